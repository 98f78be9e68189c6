"""lockd's aiohttp application: handlers translate HTTP to `LockService` calls and back, nothing more.

Two modes share everything but where pods come from: `standalone` (pods are namespace/name, slots end by
DELETE or holdTimeout) and `cluster` (pods are checked against the API server's view of the node, and
slots end when their pod is Ready, finishes or is deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import psutil
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lockd import cluster, groups, ledger, load, params, pods, status
from lockd.metrics import Metrics
from lockd.service import LockService, Silent, choose_node_policy
from lockd.settings import Settings
from lockd.wire import ErrorBody, LockDenied, LockGranted, Released
from stagger import events, kube, policy, throttles
from stagger.informer import InformerSettings
from stagger.names import Names
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)


@dataclass
class LoadCache:
    """The latest load sample: written by the sampler task, read by requests (never sampled on a request)."""

    sample: throttles.LoadSample = throttles.NO_LOAD

    def get(self) -> throttles.LoadSample:
        return self.sample


@dataclass
class PolicyState:
    policy_file: policy.PolicyFile | None
    source: str
    digest: str = ""
    last_error: str = ""


@dataclass
class ClusterState:
    """Cluster mode's parts; filled in when the app starts (they need the running loop and a session)."""

    config: kube.ClusterConfig
    view: cluster.NodeView | None = None


SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", LockService)
METRICS = web.AppKey("metrics", Metrics)
LOAD = web.AppKey("load", LoadCache)
POLICY = web.AppKey("policy", PolicyState)
READER = web.AppKey("load_reader", load.LoadReader)
CLUSTER = web.AppKey("cluster", ClusterState)


def _json_error(status_code: int, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    body: ErrorBody = {"error": message}
    return web.json_response(body, status=status_code, headers=headers)


def _view(app: web.Application) -> cluster.NodeView | None:
    state = app.get(CLUSTER)
    return state.view if state is not None else None


def node_labels(app: web.Application) -> dict[str, str]:
    """The labels that choose the node policy: the Node's in cluster mode, `--node-labels` standalone."""
    view = _view(app)
    return view.node_labels() if view is not None else dict(app[SETTINGS].node_labels)


def choose_policy(app: web.Application) -> None:
    state = app[POLICY]
    app[SERVICE].apply_policy(
        choose_node_policy(policy_file=state.policy_file, source=state.source, node_labels=node_labels(app))
    )


# --- handlers -----------------------------------------------------------------------------------------


def _denied(outcome: ledger.Denied) -> web.Response:
    body: LockDenied = {"granted": False, "reason": outcome.reason, "position": outcome.position}
    return web.json_response(
        body, status=423, headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))}
    )


def _not_ready(app: web.Application) -> web.Response | None:
    service = app[SERVICE]
    if service.closing:
        return _json_error(503, "lockd is shutting down", headers={"Retry-After": "1"})
    if not service.ready:
        return _json_error(
            503,
            f"lockd has not listed the pods on node {app[SETTINGS].node_name} yet",
            headers={"Retry-After": "1"},
        )
    return None


async def lock(request: web.Request) -> web.Response:
    app = request.app
    service, settings = app[SERVICE], app[SETTINGS]
    try:
        query = params.lock_query(request.query, max_wait=settings.max_long_poll)
        view = _view(app)
        if view is not None and not query.uid:
            raise params.BadRequest("uid: required in cluster mode (the pod's metadata.uid)")
    except params.BadRequest as err:
        service.metrics.requests.labels(result="bad_request").inc()
        return _json_error(400, str(err))
    unavailable = _not_ready(app)
    if unavailable is not None:
        return unavailable
    if view is not None:
        problem = view.identity_problem(namespace=query.namespace, name=query.name, uid=query.uid)
        if problem is not None:
            service.metrics.requests.labels(result="forbidden").inc()
            return _json_error(403, problem)
    outcome = await service.wait_for_slot(
        namespace=query.namespace, name=query.name, uid=query.uid, wait=query.wait
    )
    if isinstance(outcome, ledger.Denied):
        service.metrics.requests.labels(result="denied").inc()
        return _denied(outcome)
    service.metrics.requests.labels(result="granted").inc()
    body: LockGranted = {
        "granted": True,
        "namespace": query.namespace,
        "name": query.name,
        "grantedAt": format_rfc3339(outcome.slot.granted_wall),
    }
    return web.json_response(body)


async def unlock(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        namespace, name = params.pod_identity(request.query)
    except params.BadRequest as err:
        service.metrics.requests.labels(result="bad_request").inc()
        return _json_error(400, str(err))
    held = service.ledger.slots.get((namespace, name))
    if held is None or held.pending:
        service.metrics.requests.labels(result="not_held").inc()
        return _json_error(404, f"{namespace}/{name} holds no slot on this node")
    # In a cluster only the pod itself may give its slot back: it proves it with its uid.
    if _view(request.app) is not None and request.query.get("uid", "") != held.uid:
        service.metrics.requests.labels(result="forbidden").inc()
        return _json_error(403, f"uid does not match the holder of {namespace}/{name}'s slot")
    slot = service.release(namespace=namespace, name=name)
    assert slot is not None
    service.metrics.requests.labels(result="released").inc()
    body: Released = {
        "released": True,
        "namespace": namespace,
        "name": name,
        "heldSeconds": round(service.clock() - slot.granted_at, 3),
    }
    return web.json_response(body)


async def legacy_lock(request: web.Request) -> web.Response:
    """pod-startup-lock compatibility: `GET /?duration=S` → `Lock acquired` or `Locked`."""
    service = request.app[SERVICE]
    try:
        duration = params.anonymous_duration(request.query, default=service.node_policy.hold_timeout)
    except params.BadRequest as err:
        return web.Response(status=400, text=str(err))
    if not service.ready or service.closing:
        return web.Response(status=423, text="Locked", headers={"Retry-After": "1"})
    outcome = service.take_anonymous(duration=duration)
    if isinstance(outcome, ledger.Denied):
        service.metrics.requests.labels(result="denied").inc()
        return web.Response(
            status=423,
            text="Locked",
            headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))},
        )
    service.metrics.requests.labels(result="granted").inc()
    return web.Response(text="Lock acquired")


async def show_status(request: web.Request) -> web.Response:
    app = request.app
    try:
        fmt = params.status_format(request.query)
    except params.BadRequest as err:
        return _json_error(400, str(err))
    service, state, view = app[SERVICE], app[POLICY], _view(app)
    doc = status.build_status(
        node=app[SETTINGS].node_name,
        mode="cluster" if view is not None else "standalone",
        active=service.active,
        cores=service.cores,
        book=service.ledger,
        sample=app[LOAD].get(),
        counters=service.counters,
        now=service.clock(),
        details=cluster.pod_details(view) if view is not None else None,
    )
    if state.last_error:
        doc["policy"]["lastReloadError"] = state.last_error
    if view is not None:
        doc["policy"]["nodeLabels"] = view.node_labels()
    if fmt == "text":
        return web.Response(text=status.render_text(doc))
    return web.json_response(doc)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    unavailable = _not_ready(request.app)
    return unavailable if unavailable is not None else web.json_response({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[METRICS].registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


# --- background tasks ---------------------------------------------------------------------------------


def _publish_load(m: Metrics, sample: throttles.LoadSample) -> None:
    m.cpu_load.set(-1 if sample.cpu_percent is None else sample.cpu_percent)
    m.io_load.set(-1 if sample.io_percent is None else sample.io_percent)


async def _sample_load(app: web.Application) -> None:
    settings, cache, reader, m = app[SETTINGS], app[LOAD], app[READER], app[METRICS]
    while True:
        sample = await asyncio.to_thread(reader.read) if settings.load_file else reader.read()
        changed = sample != cache.sample
        cache.sample = sample
        _publish_load(m, sample)
        if changed:
            app[SERVICE].load_changed()
        await asyncio.sleep(settings.sample_interval)


async def _expire_slots(app: web.Application) -> None:
    service = app[SERVICE]
    while True:
        service.tick()
        deadline = service.ledger.next_deadline()
        # Wake at the next expiry, but at least once a second so a clock jump cannot strand a slot.
        delay = 1.0 if deadline is None else min(1.0, max(0.01, deadline - service.clock()))
        await asyncio.sleep(delay)


def _digest(text: str) -> str:
    # Compared on every reload check, so an unchanged file is neither parsed nor logged again.
    return hashlib.sha256(text.encode()).hexdigest()


def reload_policy(app: web.Application) -> bool:
    """Re-read the policy file if it changed. A bad file is logged and the last good policy stays."""
    settings, state = app[SETTINGS], app[POLICY]
    if settings.policies is None:
        return False
    try:
        text = policy.read_policy_text(settings.policies)
    except policy.PolicyError as err:
        if str(err) != state.last_error:
            logger.error("policy reload failed, keeping the last good policy: %s", err)
            app[METRICS].policy_reloads.labels(result="error").inc()
        state.last_error = str(err)
        return False
    digest = _digest(text)
    if digest == state.digest:
        return False
    state.digest = digest
    try:
        parsed = policy.parse_policy_text(text, source=str(settings.policies))
    except policy.PolicyError as err:
        state.last_error = str(err)
        logger.error("policy reload failed, keeping the last good policy:\n%s", err)
        app[METRICS].policy_reloads.labels(result="error").inc()
        return False
    state.policy_file, state.last_error = parsed, ""
    choose_policy(app)
    app[METRICS].policy_reloads.labels(result="ok").inc()
    logger.info("policy file %s reloaded", settings.policies)
    return True


async def _watch_policy(app: web.Application) -> None:
    settings = app[SETTINGS]
    while True:
        await asyncio.sleep(settings.reload_interval)
        reload_policy(app)


def _background(
    name: str, run: Callable[[web.Application], Coroutine[Any, Any, None]]
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(run(app), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


async def _cluster_parts(app: web.Application) -> AsyncIterator[None]:
    """Cluster mode: the informers, the grant finisher, Events, and the start-up sync before any grant."""
    settings, service, state = app[SETTINGS], app[SERVICE], app[CLUSTER]
    names = Names(settings.prefix)
    async with aiohttp.ClientSession() as session:
        client = kube.RestClient(session=session, config=state.config)
        view = cluster.NodeView(
            client=client,
            node=settings.node_name,
            names=names,
            own_pod=settings.own_pod,
            informer_settings=InformerSettings(),
        )
        state.view = view
        group_client = None
        if settings.controller_url:
            group_client = groups.GroupClient(
                session=session,
                url=settings.controller_url,
                token_file=settings.controller_token_file,
                timeout=settings.controller_timeout,
                availability=groups.Availability(
                    unavailable_after=settings.group_unavailable_after,
                    policy=cast(groups.FailurePolicy, settings.group_failure_policy),
                ),
                clock=service.clock,
            )
        recorder = events.EventRecorder(client=client) if settings.events else None
        service.node_state = view
        service.finisher = cluster.ClusterFinisher(client=client, view=view, groups=group_client, names=names)
        service.announcer = (
            cluster.EventAnnouncer(recorder=recorder, node=settings.node_name, wall=service.wall)
            if recorder is not None
            else Silent()
        )
        cluster.follow_pods(view, service)
        view.nodes.add_handler(lambda kind, obj: choose_policy(app))

        async def sync() -> None:
            await view.wait_synced()
            # Before the first grant: slots recorded on pods by an earlier lockd count again.
            service.restore(pods.slots_to_rebuild(view.pods.objects(), names=names))
            choose_policy(app)
            service.ready = True
            logger.info(
                "listed %d pods on node %s; ready (node policy %s)",
                len(view.pods.store),
                settings.node_name,
                service.node_policy.name,
            )

        tasks = [
            asyncio.create_task(view.run(), name="node-informers"),
            asyncio.create_task(sync(), name="sync"),
        ]
        if recorder is not None:
            tasks.append(asyncio.create_task(recorder.run(), name="events"))
        yield
        if recorder is not None:
            await recorder.drain(within=1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _close_service(app: web.Application) -> None:
    app[SERVICE].close()


# --- the factory --------------------------------------------------------------------------------------


def make_app(settings: Settings, *, reader: load.LoadReader | None = None) -> web.Application:
    """Builds the app. Raises `policy.PolicyError` (naming every bad field) if the policy file is bad, and
    `kube.ConfigError` in cluster mode when there is no way to reach the API server."""
    if settings.policies is not None:
        text = policy.read_policy_text(settings.policies)
        state = PolicyState(
            policy_file=policy.parse_policy_text(text, source=str(settings.policies)),
            source=str(settings.policies),
            digest=_digest(text),
        )
    else:
        state = PolicyState(policy_file=None, source="built-in")
    cluster_state = (
        None if settings.standalone else ClusterState(config=kube.load_config(kubeconfig=settings.kubeconfig))
    )
    if reader is None:
        reader = load.FileLoad(path=settings.load_file) if settings.load_file else load.SystemLoad()
    cores = settings.cores or psutil.cpu_count(logical=True) or 1
    cache = LoadCache(sample=reader.read())
    app_metrics = Metrics()
    _publish_load(app_metrics, cache.sample)
    service = LockService(
        active=choose_node_policy(
            policy_file=state.policy_file, source=state.source, node_labels=dict(settings.node_labels)
        ),
        cores=cores,
        metrics=app_metrics,
        waiter_idle_timeout=settings.waiter_idle_timeout,
        load=cache.get,
        ready=cluster_state is None,
    )
    app = web.Application()
    app[SETTINGS] = settings
    app[SERVICE] = service
    app[METRICS] = app_metrics
    app[LOAD] = cache
    app[POLICY] = state
    app[READER] = reader
    if cluster_state is not None:
        app[CLUSTER] = cluster_state
        app.cleanup_ctx.append(_cluster_parts)
    app.router.add_route("GET", "/v1/lock", lock)
    app.router.add_route("POST", "/v1/lock", lock)
    app.router.add_route("DELETE", "/v1/lock", unlock)
    app.router.add_get("/", legacy_lock)
    app.router.add_get("/status", show_status)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.cleanup_ctx.append(_background("load-sampler", _sample_load))
    app.cleanup_ctx.append(_background("slot-expiry", _expire_slots))
    if settings.policies is not None:
        app.cleanup_ctx.append(_background("policy-reload", _watch_policy))
    app.on_shutdown.append(_close_service)
    logger.info(
        "lockd (%s) for node %s: policy %s (%s), %d cores",
        "standalone" if cluster_state is None else "cluster",
        settings.node_name,
        service.node_policy.name,
        service.active.why,
        cores,
    )
    return app


__all__ = ["make_app", "node_labels", "reload_policy"]
