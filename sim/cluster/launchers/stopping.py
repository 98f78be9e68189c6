"""Stopping a child process as a kubelet stops a container: SIGTERM, a grace period, then SIGKILL. Shared by
the launchers: the init client processes (``initproc``), lockd's (``lockdproc``), the controller's
(``controllerproc``) and the fork server (``forkserver``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol


class Stoppable(Protocol):
    """What stopping needs of a process: an exec'd one (``asyncio.subprocess.Process``) or a forked one
    (``sim.cluster.launchers.forkserver.ForkedProcess``)."""

    @property
    def returncode(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def wait(self) -> Awaitable[int]: ...


async def stop_process(proc: Stoppable, *, grace: float, on_kill: Callable[[], None] | None = None) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds (``on_kill`` is told first)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout=grace)
    except TimeoutError:
        if on_kill is not None:
            on_kill()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
