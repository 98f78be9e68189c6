"""`python -m webhook.idle`: the stand-in process of a pod held in evict mode with `hold: stub`.

The controller replaces every container of such a pod with this idle process, from the image already
on the node for lockd, behind a blocking init container that runs it too. The pod is scheduled and keeps
its place (and its resource requests) without pulling its own images or running its own code; the
controller evicts it when its group's pacers allow, and its owner creates the real pod.

It does nothing but wait for SIGTERM or SIGINT (the pod being deleted) and exit 0 then. It imports
nothing of stagger: it starts in a few milliseconds and costs a few MB.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType


def main() -> int:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(
            "usage: python -m webhook.idle\n\nIdles until SIGTERM or SIGINT, then exits 0 (evict mode's stub)."
        )
        return 0
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
