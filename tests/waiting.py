"""Waiting helpers shared by the test folders."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def eventually(
    probe: Callable[[], Awaitable[bool]], *, within: float = 10.0, what: str = "condition", poll: float = 0.02
) -> None:
    """Polls `probe` until it is true: for states that come with time or through a watch, when there is
    no event the test itself can await."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await probe():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(poll)
