"""lockd's group wait stream (`lockd.groupclient.GroupWatch`) stopped mid-poll, over real HTTP: when lockd stops
while its long poll to the controller is open and the controller then drops the connection, the poll's
request ends without "Task exception was never retrieved" and its traceback in lockd's log (found by
`python -m sim chaos`, where a controller leader killed mid-poll did exactly this at lockd's shutdown)."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import aiohttp
from aiohttp import web

from lockd.groupclient import GroupWatch, PushedGrants


async def test_a_poll_cancelled_while_its_request_fails_leaves_no_unretrieved_exception() -> None:
    arrived = asyncio.Event()
    drop = asyncio.Event()

    async def wait(request: web.Request) -> web.Response:
        arrived.set()
        await drop.wait()
        assert request.transport is not None
        request.transport.abort()  # the controller goes away mid-poll
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/groups/wait", wait)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        async with aiohttp.ClientSession() as session:
            watch = GroupWatch(
                session=session,
                url=f"http://127.0.0.1:{port}",
                token_file=None,
                node="node-a",
                wait=30.0,
                timeout=60.0,
                aside=lambda: [(("default", "web-0"), "uid-0")],
                on_grantable=lambda keys: None,
                on_unhealthy=lambda: None,
                pushed=PushedGrants(),
                clock=time.monotonic,
            )
            poll = asyncio.create_task(watch._poll([(("default", "web-0"), "uid-0")]))
            await asyncio.wait_for(arrived.wait(), timeout=10)
            poll.cancel()  # lockd stops
            drop.set()
            await asyncio.gather(poll, return_exceptions=True)
            await asyncio.sleep(0.2)  # the request's end, had it been left running
        del poll
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
        await runner.cleanup()
    assert not unretrieved, unretrieved
