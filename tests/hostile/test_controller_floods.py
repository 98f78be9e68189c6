"""A hostile pod floods the controller's webhook port (issue 36, attack 4): 100 AdmissionReviews of 3 MB,
each sent but for its last few KiB and then trickled a byte a second, from 100 addresses (100 pods), against
a real `python -m webhook` with its default limits (`--max-body` 3 MiB, `--body-budget` 64 MiB, a quarter of
it per caller address, one deadline for each whole request).

The bounds, from the issue: the controller's resident memory stays at most 288 MiB (three quarters of the
chart's 384 Mi limit); the bodies over the budget are refused at once (503, Retry-After) and the others cut
at the deadline; `/healthz` on the probe listener answers all along; and once the attackers are gone a real
review is answered 200.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from tests.hostile.floods import Flood, FloodResult, peak_rss_mib, rss_mib, time_gets
from tests.webhook.process import running_webhook
from tests.webhook.reviews import enabled, pod, review

DEADLINE = 5.0  # --header-timeout for this run (the default is 10 s): the same rule, a shorter test
RSS_LIMIT_MIB = 288.0
REVIEWS = 100
SIZE = 3_000_000


def _slow_review() -> bytes:
    head = (
        f"POST /mutate/pods HTTP/1.1\r\nHost: controller\r\nContent-Type: application/json\r\n"
        f"Content-Length: {SIZE}\r\n\r\n"
    )
    return head.encode() + b" " * (SIZE - 4096)


def test_100_slow_3mb_reviews_are_bounded_in_memory_and_the_probe_answers() -> None:
    with running_webhook("--insecure-http", "--header-timeout", f"{DEADLINE:g}s") as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        probe_port = int(hook.probe_url.rsplit(":", 1)[1])
        pid = hook.proc.pid
        before = rss_mib(pid)

        async def attack() -> tuple[FloodResult, list[float]]:
            flood = Flood(
                "127.0.0.1",
                port,
                REVIEWS,
                _slow_review(),
                trickle=True,
                hold=DEADLINE + 15,
                sources=[f"127.0.1.{i}" for i in range(1, REVIEWS + 1)],
                opening=REVIEWS,
            )
            running = asyncio.create_task(flood.run())
            await asyncio.wait(
                [running, asyncio.create_task(flood.all_open.wait())], return_when=asyncio.FIRST_COMPLETED
            )
            probe_times = await time_gets("127.0.0.1", probe_port, "/healthz", count=20)
            return await running, probe_times

        result, probe_times = asyncio.run(attack())
        peak = peak_rss_mib(pid)
        body = json.dumps(review(pod("real", labels=enabled()))).encode()
        request = urllib.request.Request(
            f"{hook.url}/mutate/pods", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            status = answer.status
            allowed = json.load(answer)["response"]["allowed"]
    print(
        f"\ncontroller under {REVIEWS} slow 3 MB reviews: RSS {before:.1f} MiB before, peak {peak:.1f}; "
        f"/healthz slowest {max(probe_times) * 1000:.1f} ms; endings {dict(result.endings)}"
    )
    assert peak <= RSS_LIMIT_MIB, f"the controller held {peak:.1f} MiB at its peak"
    refused = result.endings["HTTP/1.1 503 Service Unavailable"]
    cut = result.endings["closed without an answer"] + result.endings["error: ConnectionResetError"]
    assert refused > 0 and cut > 0 and refused + cut == REVIEWS, result.endings
    assert max(probe_times) < 1.0, probe_times
    assert status == 200 and allowed is True
