"""A slot ends when lockd's own run of the pod's readiness probe passes (issue 38), against the API emulator
and a cluster-mode lockd, with each pod's "app" a real server on 127.0.0.1 (the pod's IP in its status):

- an httpGet probe that fails, then passes: the slot ends (`probedReady`) while the pod is not Ready, the
  next pod is granted, and `probed-ready-at` is written on the pod; the probe's path and headers reach the
  app, and /status shows the last result;
- a tcpSocket probe; an HTTPS probe to a certificate no one trusts (the kubelet checks none either);
- a redirect never passes (nor is followed); `initialDelaySeconds` is waited out; `minHold` still holds;
- pods lockd does not probe keep their slots until Ready: an exec probe, no probe, `probeReadiness: false`;
- an app that never answers holds its check only for the probe's timeout, one attempt at a time; past
  `--probe-max-in-flight` checks wait for the next period (`skipped`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trustme
from aiohttp import web

from stagger.kube import PODS, RestClient
from stagger.timestamps import format_rfc3339
from tests.lockd_cluster.conftest import (
    NAMES,
    ClusterLockd,
    StartLockd,
    make_node,
    make_pod,
    patch_status,
    set_ready,
)
from tests.metrics import by_label
from tests.policies import limit_policy
from tests.waiting import eventually

PERIOD = "  probePeriod: 100ms\n"


class App:
    """A pod's app: answers `status` on every path, and remembers what it was asked."""

    def __init__(self) -> None:
        self.status = 503
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.hang = False

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.path_qs, dict(request.headers)))
        if self.hang:
            await asyncio.Event().wait()
        if 300 <= self.status < 400:
            raise web.HTTPFound("http://127.0.0.2/elsewhere")
        return web.Response(status=self.status, text="ok")


@asynccontextmanager
async def serving(app: App, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    server = web.Application()
    server.router.add_route("GET", "/{tail:.*}", app.handle)
    runner = web.AppRunner(server, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def running(kube: RestClient, pod: dict[str, Any], *, started: float | None = None) -> None:
    """The pod's status as its kubelet writes it once its container runs: its IP, not Ready yet."""
    stamp = format_rfc3339(time.time() if started is None else started)
    status = {
        "phase": "Running",
        "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{"name": "app", "ready": False, "state": {"running": {"startedAt": stamp}}}],
    }
    await patch_status(kube, pod, status=status)


async def probed_pod(
    kube: RestClient, name: str, probe: dict[str, Any] | None, *, port: int = 1
) -> dict[str, Any]:
    """A pod whose container has `probe` as its readinessProbe (None: no probe) and a port named "web"
    (`port`), running, not Ready."""
    container: dict[str, Any] = {
        "name": "app",
        "image": "example/app:1",
        "ports": [{"name": "web", "containerPort": port}],
    }
    if probe is not None:
        container["readinessProbe"] = probe
    pod = await make_pod(kube, name, containers=[container])
    await running(kube, pod)
    return pod


async def ended(lockd: ClusterLockd) -> dict[str, float]:
    text = await (await lockd.client.get("/metrics")).text()
    return by_label(text, "stagger_lockd_slots_ended_total", "why")


async def holds(lockd: ClusterLockd, name: str) -> bool:
    return any(slot["name"] == name for slot in (await lockd.status())["slots"])


async def ended_by_probe(lockd: ClusterLockd, name: str) -> None:
    async def gone() -> bool:
        return not await holds(lockd, name) and (await ended(lockd)).get("probedReady", 0) >= 1

    await eventually(gone, within=10, what=f"{name}'s slot to end by lockd's probe")


async def test_an_http_probe_that_passes_ends_the_slot_before_ready(start_lockd: StartLockd, kube) -> None:
    await make_node(kube)
    app = App()
    async with serving(app) as port:
        probe = {
            "httpGet": {
                "path": "/readyz?full=1",
                "port": port,
                "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
            },
            "periodSeconds": 10,
        }
        first = await probed_pod(kube, "first", probe)
        second = await probed_pod(kube, "second", probe)
        lockd = await start_lockd(limit_policy(1, extra=PERIOD))
        assert (await lockd.lock(first)).status == 200
        assert (await lockd.lock(second)).status == 423
        await eventually(lambda: _asked(app, 2), what="two checks of the failing probe")
        slot = next(s for s in (await lockd.status())["slots"] if s["name"] == "first")
        assert slot["readinessProbe"] == f"app: GET http://127.0.0.1:{port}/readyz?full=1 HTTP 503"
        app.status = 200
        await ended_by_probe(lockd, "first")
        assert (await lockd.lock(second)).status == 200

        # Recorded on the pod: the write that also makes the kubelet probe again at once.
        async def recorded() -> bool:
            pod = await kube.get(PODS, name="first", namespace="default")
            return NAMES.probed_ready_annotation in (pod["metadata"].get("annotations") or {})

        await eventually(recorded, what="probed-ready-at on the pod")
    path, headers = app.requests[0]
    assert path == "/readyz?full=1"
    assert headers["X-Probe"] == "yes" and headers["User-Agent"].startswith("kube-probe/")
    assert headers["Connection"] == "close"


async def _asked(app: App, times: int) -> bool:
    return len(app.requests) >= times


async def test_a_tcp_probe_on_a_named_port(start_lockd: StartLockd, kube) -> None:
    await make_node(kube)
    async with serving(App()) as port:
        pod = await probed_pod(kube, "tcp", {"tcpSocket": {"port": "web"}}, port=port)
        lockd = await start_lockd(limit_policy(1, extra=PERIOD))
        assert (await lockd.lock(pod)).status == 200
        await ended_by_probe(lockd, "tcp")


async def test_https_without_checking_the_certificate(start_lockd: StartLockd, kube) -> None:
    await make_node(kube)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(tls)
    app = App()
    app.status = 200
    async with serving(app, tls=tls) as port:
        pod = await probed_pod(kube, "tls", {"httpGet": {"path": "/", "port": port, "scheme": "HTTPS"}})
        lockd = await start_lockd(limit_policy(1, extra=PERIOD))
        assert (await lockd.lock(pod)).status == 200
        await ended_by_probe(lockd, "tls")


def probe_of(kind: str, port: int) -> dict[str, Any] | None:
    if kind == "exec":
        return {"exec": {"command": ["true"]}}
    if kind == "none":
        return None
    probe: dict[str, Any] = {"httpGet": {"path": "/", "port": port}}
    if kind == "delayed":
        probe["initialDelaySeconds"] = 3600
    return probe


@pytest.mark.parametrize(
    ("kind", "policy", "why"),
    [
        pytest.param("exec", PERIOD, "container app has an exec probe", id="exec-probe"),
        pytest.param("none", PERIOD, "no container has a readiness or startup probe", id="no-probe"),
        pytest.param("http", "  probeReadiness: false\n", "", id="probing-off"),
        pytest.param("redirect", PERIOD, "HTTP 302: a redirect, not followed", id="redirect"),
        pytest.param("delayed", PERIOD, "", id="initial-delay-not-over"),
    ],
)
async def test_these_slots_end_at_ready(
    start_lockd: StartLockd, kube, kind: str, policy: str, why: str
) -> None:
    await make_node(kube)
    app = App()
    app.status = 302 if kind == "redirect" else 200
    async with serving(app) as port:
        pod = await probed_pod(kube, "held", probe_of(kind, port))
        lockd = await start_lockd(limit_policy(1, extra=policy))
        assert (await lockd.lock(pod)).status == 200
        if kind == "redirect":
            await eventually(lambda: _asked(app, 2), what="the redirect asked twice")
        else:
            # Several periods of 100 ms, in which lockd must not ask the app.
            await asyncio.sleep(0.5)
            assert app.requests == []
        slot = next(s for s in (await lockd.status())["slots"] if s["name"] == "held")
        assert slot.get("readinessProbe", "") == why or why in slot["readinessProbe"], slot
        assert "probedReady" not in await ended(lockd)
        await set_ready(kube, pod)
        await eventually(lambda: _not_held(lockd, "held"), what="the slot to end at Ready")
        assert (await ended(lockd)).get("ready") == 1
    # The redirect was not followed: all its checks asked the pod's own path.
    assert {path for path, _ in app.requests} <= {"/"}


async def _not_held(lockd: ClusterLockd, name: str) -> bool:
    return not await holds(lockd, name)


async def test_min_hold_still_holds(start_lockd: StartLockd, kube) -> None:
    await make_node(kube)
    app = App()
    app.status = 200
    async with serving(app) as port:
        pod = await probed_pod(kube, "min", {"httpGet": {"path": "/", "port": port}})
        lockd = await start_lockd(limit_policy(1, extra=PERIOD + "  minHold: 1s\n"))
        granted = time.monotonic()
        assert (await lockd.lock(pod)).status == 200
        await eventually(lambda: _asked(app, 1), what="the probe")
        await ended_by_probe(lockd, "min")
        assert time.monotonic() - granted >= 1.0


async def test_an_app_that_never_answers_holds_one_check_for_its_timeout(
    start_lockd: StartLockd, kube
) -> None:
    await make_node(kube)
    app = App()
    app.hang = True
    async with serving(app) as port:
        pod = await probed_pod(kube, "hung", {"httpGet": {"path": "/", "port": port}, "timeoutSeconds": 1})
        lockd = await start_lockd(limit_policy(1, extra=PERIOD))
        assert (await lockd.lock(pod)).status == 200
        await eventually(lambda: _asked(app, 2), within=5, what="a second check after the first timed out")
        # One attempt at a time: in about a second of 100 ms periods, one check was in flight, not ten.
        assert len(app.requests) <= 3, app.requests
        slot = next(s for s in (await lockd.status())["slots"] if s["name"] == "hung")
        assert "timed out after 1s" in slot["readinessProbe"]
        assert await holds(lockd, "hung")


async def test_checks_past_the_node_bound_wait_for_the_next_period(start_lockd: StartLockd, kube) -> None:
    await make_node(kube)
    app = App()
    app.hang = True
    async with serving(app) as port:
        probe = {"httpGet": {"path": "/", "port": port}, "timeoutSeconds": 5}
        first = await probed_pod(kube, "first", probe)
        second = await probed_pod(kube, "second", probe)
        lockd = await start_lockd(limit_policy(2, extra=PERIOD), probe_max_in_flight=1)
        assert (await lockd.lock(first)).status == 200
        assert (await lockd.lock(second)).status == 200

        async def skipped() -> bool:
            text = await (await lockd.client.get("/metrics")).text()
            return by_label(text, "stagger_lockd_probes_total", "result").get("skipped", 0) >= 2

        await eventually(skipped, what="checks skipped at --probe-max-in-flight 1")
        # One check in flight on the node: the hanging app was asked once, not once a slot.
        assert len(app.requests) == 1, app.requests
