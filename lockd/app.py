"""lockd's aiohttp application: handlers translate HTTP to `LockService` calls and back, nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import psutil
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lockd import ledger, load, params, status
from lockd.metrics import Metrics
from lockd.service import ActivePolicy, LockService, choose_node_policy
from lockd.settings import Settings
from lockd.wire import ErrorBody, LockDenied, LockGranted, Released
from stagger import policy, throttles

logger = logging.getLogger(__name__)


@dataclass
class LoadCache:
    """The latest load sample; written by the sampler task, read by requests (never sampled on the request path)."""

    sample: throttles.LoadSample = throttles.NO_LOAD

    def get(self) -> throttles.LoadSample:
        return self.sample


@dataclass
class PolicyState:
    policy_file: policy.PolicyFile | None
    source: str
    digest: str = ""
    last_error: str = ""


SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", LockService)
METRICS = web.AppKey("metrics", Metrics)
LOAD = web.AppKey("load", LoadCache)
POLICY = web.AppKey("policy", PolicyState)
READER = web.AppKey("load_reader", load.LoadReader)


def _json_error(status_code: int, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    body: ErrorBody = {"error": message}
    return web.json_response(body, status=status_code, headers=headers)


def _node_labels(settings: Settings) -> dict[str, str]:
    return dict(settings.node_labels)


def _read_policy(path: Any) -> tuple[policy.PolicyFile, str]:
    raw = path.read_bytes()
    return policy.load_policy_file(path), hashlib.sha256(raw).hexdigest()


# --- handlers -----------------------------------------------------------------------------------------


def _denied(outcome: ledger.Denied) -> web.Response:
    body: LockDenied = {"granted": False, "reason": outcome.reason, "position": outcome.position}
    return web.json_response(
        body, status=423, headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))}
    )


async def lock(request: web.Request) -> web.Response:
    app = request.app
    service, settings = app[SERVICE], app[SETTINGS]
    try:
        query = params.lock_query(request.query, max_wait=settings.max_long_poll)
    except params.BadRequest as err:
        service.metrics.requests.labels(result="bad_request").inc()
        return _json_error(400, str(err))
    if service.closing:
        return _json_error(503, "lockd is shutting down", headers={"Retry-After": "1"})
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
        "grantedAt": status.rfc3339(outcome.slot.granted_wall),
    }
    return web.json_response(body)


async def unlock(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        namespace, name = params.pod_identity(request.query)
    except params.BadRequest as err:
        service.metrics.requests.labels(result="bad_request").inc()
        return _json_error(400, str(err))
    slot = service.release(namespace=namespace, name=name)
    if slot is None:
        service.metrics.requests.labels(result="not_held").inc()
        return _json_error(404, f"{namespace}/{name} holds no slot on this node")
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
    service, state = app[SERVICE], app[POLICY]
    doc = status.build_status(
        node=app[SETTINGS].node_name,
        mode="standalone",
        active=service.active,
        cores=service.cores,
        book=service.ledger,
        sample=app[LOAD].get(),
        counters=service.counters,
        now=service.clock(),
    )
    if state.last_error:
        doc["policy"]["lastReloadError"] = state.last_error
    if fmt == "text":
        return web.Response(text=status.render_text(doc))
    return web.json_response(doc)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    if request.app[SERVICE].closing:
        return _json_error(503, "shutting down")
    return web.json_response({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[METRICS].registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


# --- background tasks ---------------------------------------------------------------------------------


async def _sample_load(app: web.Application) -> None:
    settings, cache, reader, m = app[SETTINGS], app[LOAD], app[READER], app[METRICS]
    while True:
        sample = await asyncio.to_thread(reader.read) if settings.load_file else reader.read()
        changed = sample != cache.sample
        cache.sample = sample
        m.cpu_load.set(-1 if sample.cpu_percent is None else sample.cpu_percent)
        m.io_load.set(-1 if sample.io_percent is None else sample.io_percent)
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


def reload_policy(app: web.Application) -> bool:
    """Re-read the policy file if it changed. A bad file is logged and the last good policy stays."""
    settings, state, service = app[SETTINGS], app[POLICY], app[SERVICE]
    if settings.policies is None:
        return False
    try:
        raw = settings.policies.read_bytes()
    except OSError as err:
        message = f"cannot read {settings.policies}: {err.strerror or err}"
        if message != state.last_error:
            logger.error("policy reload failed, keeping the last good policy: %s", message)
            app[METRICS].policy_reloads.labels(result="error").inc()
        state.last_error = message
        return False
    digest = hashlib.sha256(raw).hexdigest()
    if digest == state.digest:
        return False
    state.digest = digest
    try:
        parsed = policy.load_policy_file(settings.policies)
    except policy.PolicyError as err:
        state.last_error = str(err)
        logger.error("policy reload failed, keeping the last good policy:\n%s", err)
        app[METRICS].policy_reloads.labels(result="error").inc()
        return False
    state.policy_file, state.last_error = parsed, ""
    service.apply_policy(
        choose_node_policy(policy_file=parsed, source=state.source, node_labels=_node_labels(settings))
    )
    app[METRICS].policy_reloads.labels(result="ok").inc()
    logger.info("policy file %s reloaded", settings.policies)
    return True


async def _watch_policy(app: web.Application) -> None:
    settings = app[SETTINGS]
    while True:
        await asyncio.sleep(settings.reload_interval)
        reload_policy(app)


def _background(
    name: str, run: Callable[[web.Application], Any]
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(run(app), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


async def _close_service(app: web.Application) -> None:
    app[SERVICE].close()


# --- the factory --------------------------------------------------------------------------------------


def make_app(settings: Settings, *, reader: load.LoadReader | None = None) -> web.Application:
    """Builds the app. Raises `policy.PolicyError` (naming every bad field) if the policy file is bad."""
    if settings.policies is not None:
        policy_file, digest = _read_policy(settings.policies)
        state = PolicyState(policy_file=policy_file, source=str(settings.policies), digest=digest)
    else:
        state = PolicyState(policy_file=None, source="built-in")
    if reader is None:
        reader = load.FileLoad(path=settings.load_file) if settings.load_file else load.SystemLoad()
    cores = settings.cores or psutil.cpu_count(logical=True) or 1
    cache = LoadCache(sample=reader.read())
    app_metrics = Metrics()
    service = LockService(
        active=choose_node_policy(
            policy_file=state.policy_file, source=state.source, node_labels=_node_labels(settings)
        ),
        cores=cores,
        metrics=app_metrics,
        waiter_idle_timeout=settings.waiter_idle_timeout,
        load=cache.get,
    )
    app = web.Application()
    app[SETTINGS] = settings
    app[SERVICE] = service
    app[METRICS] = app_metrics
    app[LOAD] = cache
    app[POLICY] = state
    app[READER] = reader
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
        "lockd for node %s: policy %s (%s), %d cores",
        settings.node_name,
        service.node_policy.name,
        service.active.why,
        cores,
    )
    return app


__all__ = ["ActivePolicy", "make_app", "reload_policy"]
