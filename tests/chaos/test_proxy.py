"""The chaos fault proxy over real HTTP in front of the API emulator: each fault as a Kubernetes client
sees it from the real API server: a 429 Status with Retry-After (header and details.retryAfterSeconds), a
500/503 Status, a resumed watch answered with one ERROR event holding a 410 Expired Status, a watch cut
after its first events, a connection dropped without an answer, an outage; and requests without a
fault passed through unchanged; and a real (TLS) API server reached with the proxy's own credentials."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web

from sim.chaos.faults import FaultPlan, FaultSettings
from sim.chaos.proxy import FaultProxy, fault_proxy
from sim.emulator.server import ApiServer
from stagger.kube import ClusterConfig

PODS = "/api/v1/namespaces/default/pods"
AUTH = {"Authorization": "Bearer sim"}
QUIET = dict(
    error=0.0, throttle=0.0, reset=0.0, slow=0.0, cut=0.0, gone=0.0, outages=0, quiet_start_seconds=0.0
)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with ApiServer() as api:
        yield api


def _plan(**rates: float) -> FaultPlan:
    return FaultPlan(settings=FaultSettings(**{**QUIET, **rates}), seed=7, span_seconds=60)  # type: ignore[arg-type]


async def _get(proxy: FaultProxy, path: str) -> tuple[int, dict[str, str], str]:
    # A new connection per request: aiohttp retries a request once on a reused connection that drops.
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.get(proxy.url + path, headers=AUTH) as response,
    ):
        return response.status, dict(response.headers), await response.text()


async def test_no_fault_passes_through(server: ApiServer) -> None:
    async with fault_proxy(upstream=server.url, plan=_plan()) as proxy:
        status, _, text = await _get(proxy, PODS)
    assert status == 200 and json.loads(text)["kind"] == "PodList"
    assert proxy.passed == 1


@pytest.mark.parametrize(
    ("rates", "status", "reason"),
    [
        pytest.param({"throttle": 1.0}, 429, "TooManyRequests", id="throttle"),
        pytest.param({"error": 1.0}, None, None, id="error"),
    ],
)
async def test_errors_are_status_objects(
    server: ApiServer, rates: dict[str, float], status: int | None, reason: str | None
) -> None:
    async with fault_proxy(upstream=server.url, plan=_plan(**rates)) as proxy:
        got, headers, text = await _get(proxy, PODS)
    body = json.loads(text)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == got
    if status == 429:
        assert got == 429 and body["reason"] == reason
        assert headers["Retry-After"] == str(body["details"]["retryAfterSeconds"])
    else:
        assert got in (500, 503) and body["reason"] in ("InternalError", "ServiceUnavailable")


async def test_a_resumed_watch_is_told_410(server: ApiServer) -> None:
    async with fault_proxy(upstream=server.url, plan=_plan(gone=1.0)) as proxy:
        status, _, text = await _get(proxy, PODS + "?watch=true&resourceVersion=1")
    assert status == 200
    (line,) = text.splitlines()
    event = json.loads(line)
    assert (
        event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    )


async def test_a_watch_is_cut_after_its_first_events(server: ApiServer) -> None:
    async with aiohttp.ClientSession() as session:
        for name in ("a", "b", "c", "d", "e"):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
            async with session.post(server.url + PODS, json=pod, headers=AUTH) as response:
                assert response.status == 201
    async with fault_proxy(upstream=server.url, plan=_plan(cut=1.0)) as proxy:
        # Without a resourceVersion the watch starts with every pod (ADDED each), then is cut.
        status, _, text = await _get(proxy, PODS + "?watch=true&timeoutSeconds=30")
    assert status == 200
    assert len(text.splitlines()) <= 3  # cut after at most 3 of the 5 events
    assert proxy.plan.counts["cut"] == 1


@pytest.mark.parametrize(
    "rates",
    [
        pytest.param({"reset": 1.0}, id="reset"),
        pytest.param({"outages": 1, "outage_seconds": 60.0}, id="outage"),
    ],
)
async def test_a_reset_or_an_outage_drops_the_connection(server: ApiServer, rates: dict[str, float]) -> None:
    async with fault_proxy(upstream=server.url, plan=_plan(**rates)) as proxy:
        with pytest.raises(aiohttp.ClientError):
            await _get(proxy, PODS)


async def test_a_real_api_server_is_reached_over_tls_with_the_proxys_own_credentials(tmp_path: Path) -> None:
    """On a real control plane the proxy speaks TLS upstream, verifying the cluster's CA, and sends the
    kubeconfig's token in place of whatever its (loopback, plain HTTP) client sent."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"kind": "PodList", "items": []})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    upstream = f"https://127.0.0.1:{port}"
    config = ClusterConfig(server=upstream, token="admin-token", ca_file=ca_file)
    try:
        async with fault_proxy(upstream=upstream, plan=_plan(), config=config) as proxy:
            status, _, text = await _get(proxy, PODS)
    finally:
        await runner.cleanup()
    assert status == 200 and json.loads(text)["kind"] == "PodList"
    assert seen == ["Bearer admin-token"]


async def test_an_outage_ends_the_open_watches(server: ApiServer) -> None:
    """When the API server goes down, a watch that was open ends too (as at a restart), not only the new
    requests."""
    plan = FaultPlan(
        settings=FaultSettings(**{**QUIET, "outages": 1, "outage_seconds": 5.0, "quiet_start_seconds": 0.5}),  # type: ignore[arg-type]
        seed=7,
        span_seconds=5.5,
    )
    async with fault_proxy(upstream=server.url, plan=plan) as proxy:
        (outage,) = plan.outages
        assert outage.start == pytest.approx(0.5)
        async with (
            aiohttp.ClientSession() as session,
            session.get(proxy.url + PODS + "?watch=true&timeoutSeconds=60", headers=AUTH) as response,
        ):
            assert response.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with asyncio.timeout(10):
                    await response.content.read()  # ends (dropped) at the outage, 0.5 s in
        assert proxy.now() < 5.0
