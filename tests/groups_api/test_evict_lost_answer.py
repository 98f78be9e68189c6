"""`evict` mode when the Eviction API's answer is lost: the API server evicts the held pod, then the
connection drops before the controller hears it (the chaos runs' `reset` after the request was done).
The controller must not take that as a failure: the pod's deletion, seen by its watch, becomes the owner's
reservation, and the owner's replacement is let through against it, not held (a second eviction for one
release) while another owner's held pod stays held. And when the connection drops before the API server
did anything (`reset` before): the pod keeps its place and is evicted again after the eviction back-off,
not only once its reservation lapses (RESERVATION_SECONDS, a minute in which nothing else of its group
starts: `python -m sim chaos --seed 87`). The controller reaches the API emulator through
`sim.chaos.proxy`, which drops the first eviction only."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sim.chaos.faults import Fault, FaultPlan, FaultSettings
from sim.chaos.proxy import SESSION, FaultProxy
from sim.emulator.server import ApiServer
from stagger.groupbook import RESERVATION_SECONDS
from tests.groups_api.controller import Api, running_controller
from tests.groups_api.test_evict_mode import POLICY, held, notes, owned, until_gone
from tests.webhook.reviews import NAMES

pytestmark = pytest.mark.e2e


class LoseFirstEvictionAnswer(FaultProxy):
    """Resets the first eviction's connection: after the API server did it, or (`done` False) before."""

    done = True

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST" and request.path.endswith("/eviction") and not self.plan.counts["reset"]:
            self.plan.counts["reset"] += 1
            if not self.done:
                assert request.transport is not None
                request.transport.abort()  # never forwarded: the API server did nothing
                return web.Response(status=500)  # never sent: the connection is gone
            return await self._forward(request, fault=Fault("reset", after=True), watch=False)
        return await self._forward(request, fault=None, watch=request.query.get("watch") in ("true", "1"))


class DropFirstEviction(LoseFirstEvictionAnswer):
    done = False


@contextlib.asynccontextmanager
async def through(proxy: FaultProxy) -> AsyncIterator[str]:
    """The proxy served on a free port for the block: its URL."""
    async with aiohttp.ClientSession() as upstream_session:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", proxy.handle)
        app[SESSION] = upstream_session
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def test_an_eviction_that_never_reached_the_api_server_is_sent_again_soon(tmp_path: Path) -> None:
    plan = FaultPlan(settings=FaultSettings.none(), seed=1, span_seconds=1)
    async with ApiServer() as server:
        proxy = DropFirstEviction(upstream=server.url, plan=plan)
        async with (
            through(proxy) as url,
            running_controller(
                server=server,
                tmp_path=tmp_path,
                policies=POLICY,
                extra=("--no-leader-elect", "--log-level", "info", "--eviction-backoff", "0.2s"),
                granting=None,
                api_url=url,
                failure_policy="Fail",
                timeout_seconds=8,
            ) as controller,
        ):
            api = Api(server, controller.session)
            await asyncio.to_thread(controller.process.wait_for_line, r"granting: ")
            assert not held(await api.create_pod(owned("web-a", "web")))
            assert held(await api.create_pod(owned("web-b", "web")))
            assert held(await api.create_pod(owned("api-a", "api")))
            await api.make_ready("web-a")
            await asyncio.to_thread(
                controller.process.wait_for_line, r"eviction of default/web-b got no answer"
            )
            # Evicted again after the back-off, well before its reservation lapses.
            await until_gone(api, "web-b", within=RESERVATION_SECONDS / 4)
            assert plan.counts["reset"] == 1
            section = await controller.until(lambda groups: groups["evictions"]["evicted"] == 1)
            assert section["evictions"]["error"] == 1
            replacement = await api.create_pod(owned("web-c", "web"))
            assert not held(replacement), notes(replacement)
            assert notes(replacement)[NAMES.ticket_annotation]
            assert held(await api.get_pod("api-a")), "another owner's pod took the evicted pod's place"


async def test_an_eviction_whose_answer_is_lost_still_leaves_the_owner_its_reservation(
    tmp_path: Path,
) -> None:
    plan = FaultPlan(settings=FaultSettings.none(), seed=1, span_seconds=1)
    async with ApiServer() as server:
        proxy = LoseFirstEvictionAnswer(upstream=server.url, plan=plan)
        async with (
            through(proxy) as proxy_url,
            running_controller(
                server=server,
                tmp_path=tmp_path,
                policies=POLICY,
                extra=("--no-leader-elect", "--log-level", "info"),
                granting=None,
                api_url=proxy_url,
                failure_policy="Fail",
                timeout_seconds=8,
            ) as controller,
        ):
            process = controller.process
            api = Api(server, controller.session)
            await asyncio.to_thread(process.wait_for_line, r"granting: ")
            first = await api.create_pod(owned("web-a", "web"))
            assert not held(first)
            second = await api.create_pod(owned("web-b", "web"))
            assert held(second)
            other = await api.create_pod(owned("api-a", "api"))
            assert held(other)
            await api.make_ready("web-a")
            # web-b is evicted (its answer lost), web's replacement comes against the reservation.
            deadline = time.monotonic() + 20
            while (await api.call("GET", "/api/v1/namespaces/default/pods/web-b"))[0] != 404:
                assert time.monotonic() < deadline, "web-b never evicted"
                await asyncio.sleep(0.05)
            assert plan.counts["reset"] == 1
            await asyncio.sleep(1.0)  # the watch shows the deletion to the controller
            replacement = await api.create_pod(owned("web-c", "web"))
            assert not held(replacement), notes(replacement)
            assert notes(replacement)[NAMES.ticket_annotation]
            assert NAMES.held_since_annotation in notes(replacement)  # the chain's first hold
            still = await api.get_pod("api-a")
            assert held(still), "another owner's pod took the evicted pod's place"
