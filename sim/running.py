"""How `python -m sim controlplane` and `python -m sim realcluster` run: start in the background until ready
or until SIGTERM/SIGINT, then check the parts until a signal. One place for both commands. And how a
background task of the simulated cluster that ends with an error is reported (`report_crash`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

logger = logging.getLogger(__name__)


def report_crash(task: asyncio.Task[Any]) -> None:
    """A done callback: logs, with its traceback, a task that ended with an error (not one cancelled)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("%s stopped: %r", task.get_name(), task.exception(), exc_info=task.exception())


async def start_unless_stopped(
    start: Coroutine[Any, Any, object], *, what: str, cleans_up: tuple[type[BaseException], ...]
) -> tuple[asyncio.Event, BaseException | None] | None:
    """Runs `start` until it is done, or until SIGTERM or SIGINT: then it is cancelled (it stops what it
    started; its `cleans_up` errors are expected then) and None is returned. Otherwise: an Event that a later
    signal sets, and the exception `start` raised, if any."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    starting = asyncio.ensure_future(start)
    stop_wait = asyncio.ensure_future(stopping.wait())
    await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        print(f"stopping before {what} was ready", file=sys.stderr)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError, *cleans_up):
            await starting
        return None
    stop_wait.cancel()
    return stopping, starting.exception()


async def check_until(
    stopping: asyncio.Event, check: Callable[[], None], *, fails: tuple[type[Exception], ...], every: float
) -> Exception | None:
    """Calls `check` every `every` seconds until `stopping` is set; the first of its `fails` errors ends the
    wait and is returned."""
    while not stopping.is_set():
        try:
            check()
        except fails as err:
            return err
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every)
    return None
