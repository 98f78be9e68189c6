"""Helpers for the integration tests of the simulated cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from stagger.kube import Resource, RestClient


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within: float, what: str, poll: float = 0.05
) -> None:
    """Poll ``check`` (for states with no single event to await) until true, at most ``within`` wall seconds."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + within
    while not await check():
        if loop.time() > stop_at:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(poll)


async def list_items(client: RestClient, resource: Resource, **kwargs: Any) -> list[dict[str, Any]]:
    return list((await client.list(resource, **kwargs)).get("items") or [])
