"""lockd's aiohttp application: handlers translate HTTP to `LockService` calls and back, nothing more.

Two modes share everything but where pods come from: `standalone` (pods are namespace/name, slots end by
DELETE or holdTimeout) and `cluster` (pods are checked against the API server's view of the node, and
slots end when their pod is Ready, finishes or is deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import aiohttp
from aiohttp import web

from lockd import heap, ledger, load, params, statefile, status
from lockd import metrics as metrics_text
from lockd.metrics import Metrics
from lockd.service import LeftQueue, LockService, Refused, Silent, choose_node_policy
from lockd.settings import Settings
from stagger import kube, policy, throttles
from stagger.contracts.lock import (
    LOCK_PATH,
    RELEASE_TOKEN_HEADER,
    ErrorBody,
    LeftQueueBody,
    LockDenied,
    LockGranted,
    QueueFullBody,
    Released,
)
from stagger.policywatch import PolicyWatcher
from stagger.timestamps import format_rfc3339

if TYPE_CHECKING:
    # Cluster mode's parts are imported when cluster mode starts (`_cluster_parts`): a standalone lockd
    # never loads the informers, the group client or the Event recorder.
    from lockd import cluster, groups

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class LoadCache:
    """The latest load sample: written by the sampler task, read by requests (never sampled on a request)."""

    sample: throttles.LoadSample = throttles.NO_LOAD

    def get(self) -> throttles.LoadSample:
        return self.sample


@dataclass
class ClusterState:
    """Cluster mode's parts; filled in when the app starts (they need the running loop and a session)."""

    config: kube.ClusterConfig
    view: cluster.NodeView | None = None
    group_watch: groups.GroupWatch | None = None


SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", LockService)
METRICS = web.AppKey("metrics", Metrics)
LOAD = web.AppKey("load", LoadCache)
POLICY = web.AppKey("policy", PolicyWatcher)
READER = web.AppKey("load_reader", load.LoadReader)
CLUSTER = web.AppKey("cluster", ClusterState)
QUERIES = web.AppKey("lock_queries", params.LockQueries)

_JSON = "application/json"


def _json(body: object, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """`web.json_response` without its text round trip: the body is encoded once, as bytes."""
    return web.Response(
        body=json.dumps(body).encode(), status=status, headers=headers, content_type=_JSON, charset="utf-8"
    )


def _json_error(status_code: int, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    body: ErrorBody = {"error": message}
    return _json(body, status=status_code, headers=headers)


def _view(app: web.Application) -> cluster.NodeView | None:
    state = app.get(CLUSTER)
    return state.view if state is not None else None


def node_labels(app: web.Application) -> dict[str, str]:
    """The labels that choose the node policy: the Node's in cluster mode, `--node-labels` standalone."""
    view = _view(app)
    return view.node_labels() if view is not None else dict(app[SETTINGS].node_labels)


def _policy_file(watcher: PolicyWatcher) -> policy.PolicyFile | None:
    """The policy file for `choose_node_policy`: None without one (the built-in default node policy)."""
    return watcher.policy_file if watcher.path is not None else None


def choose_policy(app: web.Application) -> None:
    watcher = app[POLICY]
    app[SERVICE].apply_policy(
        choose_node_policy(
            policy_file=_policy_file(watcher), source=watcher.source, node_labels=node_labels(app)
        )
    )


# --- handlers -----------------------------------------------------------------------------------------


class EncodedBodies:
    """Answers encoded once and reused: the 423 bodies by (reason, position, maxWait), since a queued pod
    asks again and again and is told the same, and the 200 bodies of holders asking again, by slot. Each
    table starts over when it holds `size` bodies, so callers cannot grow it without bound."""

    def __init__(self, *, size: int = 1024) -> None:
        self.size = size
        self._tables: dict[str, dict[tuple[object, ...], bytes]] = {"denied": {}, "reasked": {}}

    def get(self, table: str, key: tuple[object, ...], build: Callable[[], object]) -> bytes:
        known = self._tables[table]
        encoded = known.get(key)
        if encoded is None:
            if len(known) >= self.size:
                known.clear()
            encoded = known[key] = json.dumps(build()).encode()
        return encoded


BODIES = web.AppKey("encoded_bodies", EncodedBodies)


def _denied(outcome: ledger.Denied, *, max_wait: float, bodies: EncodedBodies) -> web.Response:
    def build() -> LockDenied:
        return {"granted": False, "reason": outcome.reason, "position": outcome.position, "maxWait": max_wait}

    return web.Response(
        body=bodies.get("denied", (outcome.reason, outcome.position, max_wait), build),
        status=423,
        headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))},
        content_type=_JSON,
        charset="utf-8",
    )


def _queue_full(outcome: ledger.QueueFull, *, max_wait: float) -> web.Response:
    body: QueueFullBody = {
        "granted": False,
        "reason": f"{outcome.limit} pods are already waiting on this node (maxQueue); try again later",
        "queueLimit": outcome.limit,
        "maxWait": max_wait,
    }
    return web.json_response(
        body, status=429, headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))}
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


def _always() -> bool:
    return True


def _connected(request: web.Request) -> Callable[[], bool]:
    def alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    return alive


async def lock(request: web.Request) -> web.Response:
    app = request.app
    service = app[SERVICE]
    try:
        query = app[QUERIES].get(request.rel_url.raw_query_string, lambda: request.query)
        view = _view(app)
        if view is not None and not query.uid:
            raise params.BadRequest("uid: required in cluster mode (the pod's metadata.uid)")
    except params.BadRequest as err:
        service.metrics.count("bad_request")
        return _json_error(400, str(err))
    unavailable = _not_ready(app)
    if unavailable is not None:
        return unavailable
    if view is not None:
        from lockd import cluster as cluster_mode  # loaded already: the view is cluster mode's

        problem = await view.check_identity(namespace=query.namespace, name=query.name, uid=query.uid)
        if isinstance(problem, cluster_mode.Unconfirmed):
            service.metrics.count("unconfirmed")
            return _json_error(503, problem, headers={"Retry-After": "1"})
        if problem is not None:
            service.metrics.count("forbidden")
            return _json_error(403, problem)
    outcome = await service.wait_for_slot(
        namespace=query.namespace,
        name=query.name,
        uid=query.uid,
        wait=query.wait,
        alive=_connected(request) if query.wait > 0 else _always,
    )
    if isinstance(outcome, ledger.QueueFull):
        service.metrics.count("queue_full")
        return _queue_full(outcome, max_wait=service.node_policy.max_wait)
    if isinstance(outcome, ledger.Denied):
        service.metrics.count("denied")
        return _denied(outcome, max_wait=service.node_policy.max_wait, bodies=request.app[BODIES])
    service.metrics.count("granted")
    slot = outcome.slot
    if outcome.token is None:
        # A holder asking again (its first answer was lost): the same body every time, encoded once.
        def again() -> LockGranted:
            return {
                "granted": True,
                "namespace": slot.namespace,
                "name": slot.name,
                "grantedAt": format_rfc3339(slot.granted_wall),
            }

        key = (slot.namespace, slot.name, slot.granted_wall)
        encoded = request.app[BODIES].get("reasked", key, again)
        return web.Response(body=encoded, content_type=_JSON, charset="utf-8")
    # Only the first 200 carries the token: it is the caller's proof for DELETE.
    body: LockGranted = {
        "granted": True,
        "namespace": query.namespace,
        "name": query.name,
        "grantedAt": format_rfc3339(slot.granted_wall),
        "releaseToken": outcome.token,
    }
    return _json(body, headers={RELEASE_TOKEN_HEADER: outcome.token})


async def unlock(request: web.Request) -> web.Response:
    """`DELETE /v1/lock`: the holder gives its slot back (release token), or a waiter leaves the queue."""
    app = request.app
    service = app[SERVICE]
    try:
        namespace, name = params.pod_identity(request.query)
        uid = params.pod_uid(request.query)
    except params.BadRequest as err:
        service.metrics.count("bad_request")
        return _json_error(400, str(err))
    view = _view(app)
    # In a cluster a request from the pod's own IP with its uid is the pod itself (a pod cannot use another
    # pod's IP); the token is the proof everywhere else.
    verified = (
        view is not None
        and bool(uid)
        and view.is_pod_request(namespace=namespace, name=name, uid=uid, remote=request.remote)
    )
    result = service.give_back(
        namespace=namespace,
        name=name,
        token=params.release_token(request.headers),
        uid=uid,
        verified=verified,
    )
    if isinstance(result, Refused):
        service.metrics.count("not_held" if result.status == 404 else "forbidden")
        return _json_error(result.status, result.reason)
    if isinstance(result, LeftQueue):
        service.metrics.count("left_queue")
        left: LeftQueueBody = {"released": False, "leftQueue": True, "namespace": namespace, "name": name}
        return web.json_response(left)
    service.metrics.count("released")
    body: Released = {
        "released": True,
        "namespace": namespace,
        "name": name,
        "heldSeconds": round(service.clock() - result.granted_at, 3),
    }
    return web.json_response(body)


async def legacy_lock(request: web.Request) -> web.Response:
    """pod-startup-lock compatibility: `GET /?duration=S` → `Lock acquired` or `Locked`.

    Anonymous: no identity and no release, so a slot never outlives the node policy's holdTimeout, and in
    cluster mode (where every pod on the node can reach this port) the path is off unless allowed."""
    service, settings = request.app[SERVICE], request.app[SETTINGS]
    if not settings.anonymous_allowed:
        service.metrics.count("forbidden")
        return _json_error(
            403,
            "anonymous slots (GET /?duration=S) are off in cluster mode: use /v1/lock with the pod's identity, "
            "or start lockd with --allow-anonymous (chart value lockd.allowAnonymous)",
        )
    try:
        duration = params.anonymous_duration(request.query, hold_timeout=service.node_policy.hold_timeout)
    except params.BadRequest as err:
        return _json_error(400, str(err))
    if not service.ready or service.closing:
        return web.Response(status=423, text="Locked", headers={"Retry-After": "1"})
    outcome = service.take_anonymous(duration=duration.seconds)
    if not isinstance(outcome, ledger.Granted):
        service.metrics.count("denied")
        return web.Response(
            status=423,
            text="Locked",
            headers={"Retry-After": str(throttles.ceil_seconds(outcome.retry_after))},
        )
    service.metrics.count("granted")
    text = "Lock acquired"
    if duration.asked is not None:
        text += f" for {duration.seconds:g}s: duration={duration.asked:g} was cut to the node policy's holdTimeout"
    return web.Response(text=text, headers={"X-Stagger-Duration": f"{duration.seconds:g}"})


async def show_status(request: web.Request) -> web.Response:
    app = request.app
    try:
        fmt = params.status_format(request.query)
        limit = params.status_limit(request.query)
    except params.BadRequest as err:
        return _json_error(400, str(err))
    service, watcher, view = app[SERVICE], app[POLICY], _view(app)
    doc = status.build_status(
        node=app[SETTINGS].node_name,
        mode="cluster" if view is not None else "standalone",
        active=service.active,
        cores=service.cores,
        book=service.ledger,
        sample=app[LOAD].get(),
        counters=service.counters,
        now=service.clock(),
        limit=limit,
        reason=service.current_reason,
        details=_pod_details(view) if view is not None else None,
    )
    if watcher.last_error:
        doc["policy"]["lastReloadError"] = watcher.last_error
    if view is not None:
        doc["policy"]["nodeLabels"] = view.node_labels()
    watch = app[CLUSTER].group_watch if CLUSTER in app else None
    if watch is not None:
        doc["groupStream"] = {
            "connected": watch.healthy,
            "requests": watch.requests,
            "wakeups": watch.wakeups,
            "stepAside": len(service.ledger.group_aside(service.clock())),
        }
    if fmt == "text":
        return web.Response(text=status.render_text(doc))
    return web.json_response(doc)


def _pod_details(view: cluster.NodeView) -> Callable[[ledger.PodKey], dict[str, str]]:
    from lockd import cluster

    return cluster.pod_details(view)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    unavailable = _not_ready(request.app)
    return unavailable if unavailable is not None else web.json_response({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[METRICS].render(), headers={"Content-Type": metrics_text.CONTENT_TYPE}
    )


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


def reload_policy(app: web.Application) -> bool:
    """Re-read the policy file if it changed (`PolicyWatcher.check`: a bad file is reported and the last
    good policy stays); a new policy is chosen for the node by the watcher's subscriber. Counted in
    `stagger_lockd_policy_reloads_total` by result."""
    outcome = app[POLICY].check()
    if outcome != "unchanged":
        app[METRICS].policy_reloads.labels(result="ok" if outcome == "reloaded" else "error").inc()
    return outcome == "reloaded"


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
    from lockd import cluster, groups, pods
    from stagger import events
    from stagger.informer import InformerSettings
    from stagger.names import Names

    settings, service, state = app[SETTINGS], app[SERVICE], app[CLUSTER]
    names = Names(settings.prefix)
    async with aiohttp.ClientSession() as session:
        client = kube.RestClient(session=session, config=state.config)
        view = cluster.NodeView(
            client=client,
            node=settings.node_name,
            names=names,
            own_pod=settings.own_pod,
            informer_settings=InformerSettings(list_page_size=cluster.NODE_LIST_PAGE_SIZE),
        )
        state.view = view
        group_client = None
        group_watch = None
        if settings.controller_url:
            controller_ssl = groups.controller_ssl(settings.controller_ca_file)
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
                ssl_context=controller_ssl,
            )
            group_watch = groups.GroupWatch(
                session=session,
                url=settings.controller_url,
                token_file=settings.controller_token_file,
                node=settings.node_name,
                wait=settings.group_wait,
                timeout=settings.controller_timeout,
                aside=lambda: service.ledger.group_aside(service.clock()),
                on_grantable=service.wake_waiters,
                on_unhealthy=lambda: service.ledger.cap_group_aside(
                    service.clock() + groups.UNREACHABLE_RETRY_SECONDS
                ),
                ssl_context=controller_ssl,
            )
        state.group_watch = group_watch
        recorder = events.EventRecorder(client=client) if settings.events else None
        service.node_state = view
        service.finisher = cluster.ClusterFinisher(
            client=client,
            view=view,
            groups=group_client,
            names=names,
            watch=group_watch,
            recheck=settings.group_recheck,
        )
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
            heap.trim()  # the first list's decoded pods are garbage now
            logger.info(
                "listed %d pods on node %s; ready (node policy %s)",
                len(view.pods.store),
                settings.node_name,
                service.node_policy.name,
            )

        tasks = [
            asyncio.create_task(view.run(), name="node-informers"),
            asyncio.create_task(sync(), name="sync"),
            *(
                [asyncio.create_task(group_watch.run(), name="group-watch")]
                if group_watch is not None
                else []
            ),
        ]
        if recorder is not None:
            tasks.append(asyncio.create_task(recorder.run(), name="events"))
        yield
        if recorder is not None:
            await recorder.drain(within=1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _trim_heap(app: web.Application) -> None:
    heap.trim()


async def _close_service(app: web.Application) -> None:
    app[SERVICE].close()


def _restore_state(service: LockService, path: Path) -> None:
    """Standalone restarts keep their slots: read them back, then keep the file current."""
    now, wall = service.clock(), service.wall()
    try:
        saved = statefile.load(path, now=now, wall=wall)
    except statefile.StateFileError as err:
        # Refusing to start would leave the node without lockd (every init client then fails open after
        # maxWait): start empty, keep the bad file for a person to look at.
        logger.error("%s; starting with no slots (the file is kept as %s.bad)", err, path)
        path.replace(path.with_name(path.name + ".bad"))
        saved = []
    for slot in saved:
        service.ledger.restore(slot)
    if saved:
        logger.info("restored %d slots from the state file %s", len(saved), path)

    def persist(slots: list[ledger.Slot]) -> None:
        try:
            statefile.save(path, slots, now=service.clock(), wall=service.wall())
        except OSError as err:
            logger.error("cannot write the state file %s: %s", path, err)

    service.persist = persist
    persist(list(service.ledger.slots.values()))


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error is JSON with a reason (404, 405, 413 included), and a body over `--max-body` is refused
    before any handler sees it."""
    try:
        if request.body_exists:
            await request.read()  # enforces client_max_size (413) also for chunked bodies
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 413:
            reason = f"request body too large: at most {request.app[SETTINGS].max_body} bytes"
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return _json_error(exc.status, reason, headers=headers)


# --- the factory --------------------------------------------------------------------------------------


def make_app(settings: Settings, *, reader: load.LoadReader | None = None) -> web.Application:
    """Builds the app. Raises `policy.PolicyError` (naming every bad field) if the policy file is bad, and
    `kube.ConfigError` in cluster mode when there is no way to reach the API server."""
    watcher = PolicyWatcher.load(settings.policies, absent="built-in")
    cluster_state = (
        None if settings.standalone else ClusterState(config=kube.load_config(kubeconfig=settings.kubeconfig))
    )
    if reader is None:
        reader = (
            load.FileLoad(path=settings.load_file)
            if settings.load_file
            else load.SystemLoad(proc_root=settings.proc_root)
        )
    cores = settings.cores or os.cpu_count() or 1
    cache = LoadCache(sample=reader.read())
    app_metrics = Metrics()
    _publish_load(app_metrics, cache.sample)
    service = LockService(
        active=choose_node_policy(
            policy_file=_policy_file(watcher), source=watcher.source, node_labels=dict(settings.node_labels)
        ),
        cores=cores,
        metrics=app_metrics,
        waiter_idle_timeout=settings.waiter_idle_timeout,
        load=cache.get,
        ready=cluster_state is None,
        max_queue=settings.max_queue,
    )
    if settings.state_file is not None:
        _restore_state(service, settings.state_file)
    app = web.Application(client_max_size=settings.max_body, middlewares=[_json_errors])
    app[SETTINGS] = settings
    app[SERVICE] = service
    app[METRICS] = app_metrics
    app[LOAD] = cache
    app[POLICY] = watcher
    watcher.subscribe(lambda _new: choose_policy(app))  # the node's policy is chosen anew at each reload
    app[READER] = reader
    app[QUERIES] = params.LockQueries(max_wait=settings.max_long_poll)
    app[BODIES] = EncodedBodies()
    if cluster_state is not None:
        app[CLUSTER] = cluster_state
        app.cleanup_ctx.append(_cluster_parts)  # trims the heap once the node's pods are listed
    else:
        app.on_startup.append(_trim_heap)  # start-up is over: nothing more to list before answering
    app.router.add_route("GET", LOCK_PATH, lock)
    app.router.add_route("POST", LOCK_PATH, lock)
    app.router.add_route("DELETE", LOCK_PATH, unlock)
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
