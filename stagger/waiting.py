"""Waiting for an asyncio event with a time limit, without losing a cancellation.

`asyncio.wait_for(event.wait(), timeout)` on Python 3.11 returns normally when the event is set in the
same loop iteration as the waiting task is cancelled: the cancellation is lost, and a task that loops on
it never ends (seen here: a controller that would not shut down). `asyncio.timeout` has no such race
(https://github.com/python/cpython/issues/86296, fixed in 3.12 by reimplementing wait_for on it).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, *, within: float) -> bool:
    """Wait until `event` is set or `within` seconds pass; True if it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, within)):
            await event.wait()
    return event.is_set()
