"""lockd's aiohttp application: handlers translate HTTP to `LockService` calls and back, nothing more;
the app's state under typed keys, and the background tasks that keep the load, the slots' expiry and the
policy current. The parts are built by `lockd.daemon`; cluster mode installs itself (`lockd.clustermode`).

Two modes share everything but where pods come from: `standalone` (pods are namespace/name, slots end by
DELETE or holdTimeout) and `cluster` (pods are checked against the API server's view of the node, and
slots end when their pod is Ready, finishes or is deleted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from lockd import asking, ledger, load, params, status
from lockd import metrics as metrics_text
from lockd.appstate import (
    BODIES,
    CLUSTER,
    DEPENDENCIES,
    HTTP,
    LOAD,
    METRICS,
    POLICY,
    QUERIES,
    READER,
    SERVICE,
    SETTINGS,
    EncodedBodies,
    LoadCache,
    Outbound,
    view_of,
)
from lockd.dependencies import DependencyChecks, node_variables
from lockd.metrics import Metrics
from lockd.nodepolicy import choose_node_policy, shadowed_objects
from lockd.service import LeftQueue, Refused
from lockd.settings import Settings
from stagger import policy, serving, throttles
from stagger.contracts.lock import LOCK_PATH, LeftQueueBody, Released
from stagger.policywatch import PolicyWatcher
from stagger.serving import json_response

if TYPE_CHECKING:
    from lockd import clusterwatch, pacemakerwatch, prober

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def node_labels(app: web.Application) -> dict[str, str]:
    """The labels that choose the node policy: the Node's in cluster mode, `--node-labels` standalone."""
    view = view_of(app)
    return view.node_labels() if view is not None else dict(app[SETTINGS].node.node_labels)


def policy_file_of(watcher: PolicyWatcher) -> policy.PolicyFile | None:
    """The policy file for `choose_node_policy`: None without one (the built-in default node policy)."""
    return watcher.policy_file if watcher.path is not None else None


def pacemaker_of(app: web.Application) -> pacemakerwatch.PacemakerWatch | None:
    """Cluster mode's watch of PacemakerConfig objects (`--pacemaker-configs`), else None."""
    state = app.get(CLUSTER)
    return state.pacemaker if state is not None else None


def object_policies(app: web.Application) -> tuple[policy.NodePolicy, ...]:
    """The node policies of the cluster's PacemakerConfig objects in force (none without the watch)."""
    watch = pacemaker_of(app)
    return watch.policies() if watch is not None else ()


def choose_policy(app: web.Application) -> None:
    watcher = app[POLICY]
    service = app[SERVICE]
    policy_file, objects = policy_file_of(watcher), object_policies(app)
    service.apply_policy(
        choose_node_policy(
            policy_file=policy_file, source=watcher.source, node_labels=node_labels(app), objects=objects
        )
    )
    if (watch := pacemaker_of(app)) is not None:
        watch.note_shadowed(shadowed_objects(policy_file=policy_file, objects=objects))
    # A policy with other dependencies has them checked at once (until then they hold every grant).
    app[DEPENDENCIES].want(service.node_policy.dependencies)


# --- handlers -----------------------------------------------------------------------------------------


def _json_error(status_code: int, message: str) -> web.Response:
    return asking.error(status_code, message).response()


def _connected(request: web.Request) -> Callable[[], bool]:
    def alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    return alive


async def lock(request: web.Request) -> web.Response:
    """`GET /v1/lock` (and POST) when aiohttp serves the connection; long polls usually reach
    `lockd.longpoll` instead. Both answer with `lockd.asking`."""
    answer = await asking.answer_ask(
        request.app,
        raw_query=request.rel_url.raw_query_string,
        headers=request.headers,
        alive=_connected(request),
        peer=request.remote or "",
    )
    return answer.response()


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
    view = view_of(app)
    # A pod that admission gave its token must show it here too (`asking.check_token`): without it, a
    # release in its name is refused even from its own IP.
    checked = await asking.check_token(
        app, request.headers, namespace=namespace, name=name, uid=uid, peer=request.remote or ""
    )
    if isinstance(checked, asking.Answer):
        return checked.response()
    # In a cluster the pod's own service-account token proves it is the pod, and so does a request from the
    # pod's own IP with its uid (a pod cannot use another pod's IP); the release token everywhere else.
    verified = view is not None and (
        checked == "verified"
        or (bool(uid) and view.is_pod_request(namespace=namespace, name=name, uid=uid, remote=request.remote))
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
        return json_response(left)
    service.metrics.count("released")
    body: Released = {
        "released": True,
        "namespace": namespace,
        "name": name,
        "heldSeconds": round(service.clock() - result.granted_at, 3),
    }
    return json_response(body)


async def legacy_lock(request: web.Request) -> web.Response:
    """pod-startup-lock compatibility, `GET /?duration=S`, when aiohttp serves it (the front door serves
    the usual request itself): `asking.answer_anonymous`."""
    return asking.answer_anonymous(request.app, raw_query=request.rel_url.raw_query_string).response()


async def show_status(request: web.Request) -> web.Response:
    app = request.app
    try:
        fmt = params.status_format(request.query)
        limit = params.status_limit(request.query)
    except params.BadRequest as err:
        return _json_error(400, str(err))
    service, watcher, view = app[SERVICE], app[POLICY], view_of(app)
    doc = status.build_status(
        node=app[SETTINGS].node.node_name,
        mode="cluster" if view is not None else "standalone",
        active=service.active,
        cores=service.cores,
        book=service.ledger,
        sample=app[LOAD].get(),
        readings=service.checks.load_readings(),
        counters=service.counters,
        now=service.clock(),
        limit=limit,
        reason=service.current_reason,
        details=_pod_details(view, app[CLUSTER].prober) if view is not None else None,
        dependencies=app[DEPENDENCIES].status(service.node_policy.dependencies, now=service.clock()),
    )
    if watcher.last_error:
        doc["policy"]["lastReloadError"] = watcher.last_error
    if view is not None:
        doc["policy"]["nodeLabels"] = view.node_labels()
    if (pacemaker := pacemaker_of(app)) is not None:
        doc["policy"]["pacemakerConfigs"] = pacemaker.status()
    watch = app[CLUSTER].group_watch if CLUSTER in app else None
    if watch is not None:
        watch.pushed.expire(service.clock())
        doc["groupStream"] = {
            "connected": watch.healthy,
            "requests": watch.requests,
            "wakeups": watch.wakeups,
            "stepAside": len(service.ledger.group_aside(service.clock())),
            # Grants the controller gave in the stream's answers: received, used by their pods, lapsed
            # unused (the pod asked again or left), and held now.
            "pushedGrants": {
                "received": watch.pushed.received,
                "used": watch.pushed.used,
                "lapsed": watch.pushed.lapsed,
                "held": len(watch.pushed),
            },
        }
    if fmt == "text":
        return web.Response(text=status.render_text(doc))
    return json_response(doc)


def _pod_details(
    view: clusterwatch.NodeView, probes: prober.ReadinessProber | None
) -> Callable[[ledger.PodKey], dict[str, str]]:
    from lockd import clusterwatch

    return clusterwatch.pod_details(view, probes=probes.describe if probes is not None else None)


async def healthz(request: web.Request) -> web.Response:
    return json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    unavailable = asking.not_ready(request.app.get(MAIN_APP, request.app))
    return unavailable.response() if unavailable is not None else json_response({"ready": True})


async def metrics_handler(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[METRICS].render(), headers={"Content-Type": metrics_text.CONTENT_TYPE}
    )


# --- background tasks ---------------------------------------------------------------------------------


def publish_load(m: Metrics, sample: throttles.LoadSample) -> None:
    m.cpu_load.set(None if sample.cpu_percent is None else sample.cpu_percent / 100)
    m.io_load.set(None if sample.io_percent is None else sample.io_percent / 100)
    m.load1.set(sample.load1)
    m.memory_load.set(None if sample.memory_percent is None else sample.memory_percent / 100)


async def _sample_load(app: web.Application) -> None:
    settings, cache, reader, m = app[SETTINGS], app[LOAD], app[READER], app[METRICS]
    while True:
        sample = await asyncio.to_thread(reader.read) if settings.node.load_file else reader.read()
        service = app[SERVICE]
        # New numbers, or a fresh reading that ends load assumed for the grants since (incrementBy).
        changed = sample != cache.sample or service.checks.resets_assumed(sample)
        cache.sample = sample
        publish_load(m, sample)
        if changed:
            service.load_changed()
        await asyncio.sleep(settings.node.sample_interval)


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
        await asyncio.sleep(settings.policy.reload_interval)
        try:
            reload_policy(app)
        except Exception:  # a bug here must not stop the reloads for good (the last good policy stays)
            logger.exception("checking the policy file %s failed", settings.policy.policies)


async def _check_dependencies(app: web.Application) -> None:
    """The node policy's dependencies, checked in the background (`lockd.dependencies`); one coming up or
    going down wakes the waiting long polls, as a load sample does."""
    checks, service = app[DEPENDENCIES], app[SERVICE]
    checks.want(service.node_policy.dependencies)
    await checks.run(session=app[HTTP].get(), on_change=service.wake_next)


async def _http_session(app: web.Application) -> AsyncIterator[None]:
    """The app's one ClientSession (`Outbound`), first in and last out of the app's contexts. It keeps no
    cookies: none of lockd's peers uses them, and a dependency's must not change its next check."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        app[HTTP].session = session
        yield
        app[HTTP].session = None


async def _close_service(app: web.Application) -> None:
    app[SERVICE].close()


# --- the factory --------------------------------------------------------------------------------------


def make_app(
    settings: Settings,
    *,
    watcher: PolicyWatcher,
    cache: LoadCache,
    reader: load.LoadReader,
    metrics: Metrics,
) -> web.Application:
    """The app: its state under typed keys, the routes, its HTTP session and the background tasks (load
    sampler, slot expiry, policy reload, dependency checks). `lockd.daemon.make_app` builds the parts,
    and the service (`SERVICE`) with its own: standalone at once, in cluster mode when the app starts
    (`lockd.clustermode`)."""
    app = web.Application(
        client_max_size=settings.server.max_body,
        middlewares=[serving.json_errors(max_body=settings.server.max_body, read_first=True)],
    )
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[LOAD] = cache
    app[POLICY] = watcher
    watcher.subscribe(lambda _new: choose_policy(app))  # the node's policy is chosen anew at each reload
    app[READER] = reader
    app[QUERIES] = params.LockQueries(max_wait=settings.queue.max_long_poll)
    app[BODIES] = EncodedBodies()
    app[HTTP] = Outbound()
    app[DEPENDENCIES] = DependencyChecks(
        interval=settings.node.dependency_interval,
        metrics=metrics,
        variables=node_variables(node_name=settings.node.node_name, node_ip=settings.node.node_ip),
    )
    app.router.add_route("GET", LOCK_PATH, lock)
    app.router.add_route("POST", LOCK_PATH, lock)
    app.router.add_route("DELETE", LOCK_PATH, unlock)
    app.router.add_get("/", legacy_lock)
    app.router.add_get("/status", show_status)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    app.cleanup_ctx.append(_http_session)  # first: cluster mode's context comes next (lockd.clustermode)
    app.cleanup_ctx.append(serving.background("load-sampler", _sample_load))
    app.cleanup_ctx.append(serving.background("slot-expiry", _expire_slots))
    if settings.policy.policies is not None:
        app.cleanup_ctx.append(serving.background("policy-reload", _watch_policy))
    app.cleanup_ctx.append(serving.background("dependency-checks", _check_dependencies))
    app.on_shutdown.append(_close_service)
    return app


MAIN_APP = web.AppKey("main_app", web.Application)  # the probe app's view of lockd's app


def make_probe_app(main: web.Application) -> web.Application:
    """The app of `--probe-listen`: `/healthz` and `/readyz` answering for lockd's app `main`, on a listener
    whose connections no caller of the lock port shares."""
    # The door takes no body here (`serving.PROBE_BOUNDS`); aiohttp's own limit is the backstop.
    most = serving.PROBE_BOUNDS.max_body
    app = web.Application(
        client_max_size=most, middlewares=[serving.json_errors(max_body=most, read_first=True)]
    )
    app[MAIN_APP] = main
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def log_start(app: web.Application) -> None:
    """One line when lockd is ready to decide: its mode, node, node policy and why, cores."""
    settings, service = app[SETTINGS], app[SERVICE]
    logger.info(
        "lockd (%s) for node %s: policy %s (%s), %d cores",
        "standalone" if settings.standalone else "cluster",
        settings.node.node_name,
        service.node_policy.name,
        service.active.why,
        service.cores,
    )


__all__ = ["log_start", "make_app", "make_probe_app", "node_labels", "publish_load", "reload_policy"]
