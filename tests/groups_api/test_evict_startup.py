"""`evict` mode in the first moment of a controller's life: a pod created while the sole leader's pod watch
is still listing (its counts not rebuilt yet) is decided once the list is in, within `--admit-timeout`,
not held for want of counts (a hold would cost it an eviction and a replacement). With a bound shorter than
the list takes, the pod is held, and the reason says why. The list is slowed by an HTTP proxy in front of
the API emulator that holds the controller's first pod list for a second (the watch streams through)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sim.emulator.server import ApiServer
from tests.groups_api.controller import Api, running_controller
from tests.groups_api.test_evict_mode import POLICY, held, notes, owned
from tests.webhook.reviews import NAMES

pytestmark = pytest.mark.e2e

LIST_DELAY = 1.0


@dataclass
class SlowLists:
    """Forwards every request to `upstream`, holding each pod list (not a watch) for `delay` seconds."""

    upstream: str
    delay: float
    lists_answered: int = 0
    lists_asked: int = 0
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        session = request.app[SESSION]
        is_list = request.path.endswith("/pods") and request.query.get("watch") not in ("true", "1")
        if is_list and request.method == "GET":
            self.lists_asked += 1
            await asyncio.sleep(self.delay)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=await request.read(),
            timeout=aiohttp.ClientTimeout(total=None),
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for name in ("Content-Type", "Warning"):
                for value in upstream.headers.getall(name, []):
                    response.headers.add(name, value)
            # A watch (or a held list) ends when the controller stops: its connection is gone.
            with contextlib.suppress(ConnectionResetError):
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
        if is_list and request.method == "GET":
            self.lists_answered += 1
        return response


SESSION = web.AppKey("session", aiohttp.ClientSession)


@contextlib.asynccontextmanager
async def slow_lists(upstream: str, *, delay: float) -> AsyncIterator[SlowLists]:
    proxy = SlowLists(upstream=upstream, delay=delay)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    async with aiohttp.ClientSession() as session:
        app[SESSION] = session
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        proxy.url = f"http://127.0.0.1:{port}"
        try:
            yield proxy
        finally:
            await runner.cleanup()


@pytest.mark.parametrize(
    ("admit_timeout", "admitted"),
    [
        pytest.param("4s", True, id="decided-once-the-counts-are-in"),
        pytest.param("0.2s", False, id="held-when-the-list-takes-longer-than-the-bound"),
    ],
)
async def test_a_pod_created_while_the_leader_lists_is_decided_on_its_counts(
    tmp_path: Path, admit_timeout: str, admitted: bool
) -> None:
    async with (
        ApiServer() as server,
        slow_lists(server.url, delay=LIST_DELAY) as proxy,
        running_controller(
            server=server,
            tmp_path=tmp_path,
            policies=POLICY,
            extra=("--no-leader-elect", "--admit-timeout", admit_timeout),
            granting=None,
            api_url=proxy.url,
            timeout_seconds=8,
        ) as controller,
    ):
        process = controller.process
        api = Api(server, controller.session)
        # The pod reaches admission while the controller's pod list is still held by the proxy.
        assert proxy.lists_answered == 0
        first = await api.create_pod(owned("web-a", "web"))
        assert proxy.lists_asked >= 1
    if admitted:
        assert not held(first), notes(first)
        assert notes(first)[NAMES.ticket_annotation] and NAMES.granted_at_annotation in notes(first)
    else:
        assert held(first), notes(first)
        log = "".join(process.lines)
        assert "held a pod in evict mode: this replica leads but is still rebuilding" in log, log[-2000:]
