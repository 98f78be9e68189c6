"""Waiting for an asyncio event with a time limit, without losing a cancellation; and stopping background
tasks.

`asyncio.wait_for(event.wait(), timeout)` on Python 3.11 returns normally when the event is set in the
same loop iteration as the waiting task is cancelled: the cancellation is lost, and a task that loops on
it never ends (seen here: a controller that would not shut down). `asyncio.timeout` has no such race
(https://github.com/python/cpython/issues/86296, fixed in 3.12 by reimplementing wait_for on it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

__all__ = ["stop_tasks", "wait_event"]


async def wait_event(event: asyncio.Event, *, within: float) -> bool:
    """Wait until `event` is set or `within` seconds pass; True if it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, within)):
            await event.wait()
    return event.is_set()


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait until every one has ended. What they raise on the way out (their cancellation
    included) is dropped: a background task stopped at shutdown or teardown has nobody left to tell, and one
    task's error must not keep the others running."""
    stopping = list(tasks)
    for task in stopping:
        task.cancel()
    await asyncio.gather(*stopping, return_exceptions=True)
