"""The controller's group pacing, plugged into the TLS app: the pod watch, the group book, leader election,
the grant API lockd calls, the gate reconciler, Events, metrics and the `groups` section of `/status`.

It needs the API server (`--kubeconfig`, or the in-cluster service account). Without either (a local
experiment), the controller serves admission only and says so in its log and `/status`.

Who answers: only the leader grants and removes gates, and only once its watch has listed every enabled
pod (its counts rebuilt from the API: `granted-at`, gates, labels, Ready). Every other replica answers
the grant API with 503 naming the leader; admission is answered by all. On shutdown the leader stops
granting first, waits (at most `--grant-drain`, 5 s) until the grants it reserved show on their
pods, and only then gives up the Lease: the next leader, which counts from the pods, never misses a
grant it did not see.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from stagger import kube
from stagger.events import EventRecorder
from stagger.informer import InformerSettings
from webhook import grants, wire
from webhook.app import ADMISSION, METRICS, READINESS, SETTINGS, STATUS_SECTIONS, TOKEN
from webhook.gates import GateReconciler
from webhook.pacing import Pacing
from webhook.podwatch import PodWatch

__all__ = ["GROUPS", "Groups", "Leadership", "SoleLeader", "install"]

logger = logging.getLogger(__name__)

STEWARD_SECONDS = 0.5


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader(self) -> str | None: ...


@dataclass
class SoleLeader:
    """`--leader-elect=false`: one replica, always the leader (like kube-scheduler's flag of that name)."""

    identity: str

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def leader(self) -> str | None:
        return self.identity


@dataclass
class Groups:
    """What the group part keeps in the app. `off` says why it is not running (no API server)."""

    pacing: Pacing
    watch: PodWatch | None = None
    leadership: Leadership | None = None
    gates: GateReconciler | None = None
    off: str | None = None
    stopping: bool = False  # shutting down: never grant again

    @property
    def granting(self) -> bool:
        # Leadership is read at each request too: it ends at the renew deadline, even between two steward runs.
        return self.pacing.granting and self.leadership is not None and self.leadership.is_leader


GROUPS = web.AppKey("groups", Groups)

LeaderFactory = Callable[
    [web.Application, kube.RestClient], tuple[Leadership, Callable[[], Coroutine[Any, Any, None]] | None]
]
"""Makes this replica's Leadership and the coroutine function that runs the election (None: nothing to run)."""


def _sole_leader(app: web.Application, client: kube.RestClient) -> tuple[Leadership, None]:
    return SoleLeader(identity=os.environ.get("POD_NAME") or socket.gethostname()), None


def install(
    app: web.Application, *, config: kube.ClusterConfig | None, leader_factory: LeaderFactory = _sole_leader
) -> None:
    """Add the group part to the controller's TLS app (routes, background work, readiness, /status).
    With `config` None (no API server), the routes answer 503 and `/status` says why."""
    pacing = Pacing(names=app[ADMISSION].names, policies={p.name: p for p in app[ADMISSION].policies})
    app[GROUPS] = Groups(pacing=pacing)
    app.router.add_post("/v1/groups/grant", grant)
    app.router.add_post("/v1/groups/wait", wait)
    app[READINESS].append(_not_synced)
    app[METRICS].refreshers.append(lambda: _publish(app))
    app[STATUS_SECTIONS].append(_status_section)

    if config is None:
        app[GROUPS].off = "no API server (no --kubeconfig, not in a cluster): admission only, no group pacing"
        logger.warning("group pacing is off: %s", app[GROUPS].off)
        return

    async def run(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as session:
            async for _ in _running(app, kube.RestClient(session=session, config=config), leader_factory):
                yield

    app.cleanup_ctx.append(run)


async def _running(
    app: web.Application, client: kube.RestClient, leader_factory: LeaderFactory
) -> AsyncIterator[None]:
    groups = app[GROUPS]
    pacing = groups.pacing
    events = EventRecorder(client=client)
    watch = PodWatch(
        client=client, pacing=pacing, settings=InformerSettings(), events=events, host=socket.gethostname()
    )
    leadership, elect = leader_factory(app, client)
    metrics = app[METRICS]
    gates = GateReconciler(
        client=client,
        pacing=pacing,
        counted=lambda basis: metrics.grants.labels(basis=basis).inc(),
        removed=lambda result: metrics.gate_removals.labels(result=result).inc(),
        pod=lambda key: watch.informer.get(f"{key[0]}/{key[1]}"),
        wall=time.time,
    )
    groups.watch, groups.leadership, groups.gates = watch, leadership, gates
    tasks = [
        asyncio.create_task(watch.run(), name="pod-watch"),
        asyncio.create_task(events.run(), name="events"),
        asyncio.create_task(gates.run(), name="gate-reconciler"),
        asyncio.create_task(_steward(app), name="group-steward"),
    ]
    election = asyncio.create_task(elect(), name="leader-election") if elect is not None else None
    try:
        yield
    finally:
        # Stop granting, let what was granted show on the pods, then give up the Lease (see the docstring).
        groups.stopping = True
        pacing.set_granting(False)
        await _drain_reservations(pacing, within=app[SETTINGS].grant_drain)
        if election is not None:
            election.cancel()
            await asyncio.gather(election, return_exceptions=True)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await events.drain(within=1.0)


async def _drain_reservations(pacing: Pacing, *, within: float) -> None:
    deadline = time.monotonic() + within
    while pacing.book.reservations() and time.monotonic() < deadline:
        await pacing.changed(since=pacing.version, within=0.1)
    left = pacing.book.reservations()
    if left:
        logger.warning("%d grants not yet seen on their pods when giving up leadership", left)


async def _steward(app: web.Application) -> None:
    """Keeps `granting` true exactly while this replica leads with its counts rebuilt, and follows policy
    reloads. (The gauges are read off the state at each scrape: `_publish`.)"""
    groups = app[GROUPS]
    pacing = groups.pacing
    policies = app[ADMISSION].policies
    was_leader = False
    while True:
        leadership, watch = groups.leadership, groups.watch
        assert leadership is not None and watch is not None
        if app[ADMISSION].policies is not policies:
            policies = app[ADMISSION].policies
            pacing.replace_policies(policies, watch.informer.objects())
            logger.info("group pacing: %d staggering policies now", len(policies))
        leading = leadership.is_leader
        if leading != was_leader:
            logger.info(
                "%s the leader%s",
                "became" if leading else "no longer",
                ": rebuilding group counts from the API before granting"
                if leading and not watch.synced
                else "",
            )
            was_leader = leading
        granting = leading and watch.synced and not groups.stopping
        if granting and not pacing.granting:
            logger.info("granting: %d enabled pods in %d groups", len(pacing.book), len(pacing.book.pairs()))
        pacing.set_granting(granting)
        watch.announce = leading
        await asyncio.sleep(STEWARD_SECONDS)


def _publish(app: web.Application) -> None:
    """The group gauges and the leader gauge, as of now (called before each scrape)."""
    groups = app[GROUPS]
    metrics = app[METRICS]
    leadership = groups.leadership
    metrics.leader.set(1 if leadership is not None and leadership.is_leader else 0)
    rows = groups.pacing.rows()
    metrics.groups.set(len(rows))
    for state in ("ready", "starting", "held"):
        metrics.group_pods.labels(state=state).set(sum(getattr(row, state) for row in rows))
    metrics.group_waits.set(groups.pacing.waiters)


def _not_synced(app: web.Application) -> str | None:
    groups = app[GROUPS]
    if groups.off is not None or groups.watch is None:
        return None  # admission only: ready as soon as admission is
    return None if groups.watch.synced else "listing enabled pods (group counts not rebuilt yet)"


def _status_section(app: web.Application) -> tuple[str, dict[str, Any]]:
    groups = app[GROUPS]
    if groups.off is not None:
        return "groups", {"enabled": False, "why": groups.off}
    leadership = groups.leadership
    rows = groups.pacing.rows()
    return "groups", {
        "enabled": True,
        "leader": None if leadership is None else leadership.leader,
        "isLeader": bool(leadership is not None and leadership.is_leader),
        "granting": groups.granting,
        "pods": len(groups.pacing.book),
        "waits": groups.pacing.waiters,
        "groups": [
            {
                "policy": row.policy,
                "key": row.key,
                "mode": row.mode,
                "ready": row.ready,
                "starting": row.starting,
                "held": row.held,
                "limit": "none" if row.limit is None else row.limit,
                "pacer": row.pacer,
            }
            for row in rows
        ],
    }


# --- the grant API --------------------------------------------------------------------------------------


def _refusal(request: web.Request) -> web.Response | None:
    """401 without the token, 403 with no token configured, 503 when this replica does not grant."""
    app = request.app
    token = app.get(TOKEN)
    if token is None:
        body: wire.ErrorBody = {"error": "the group grant API is off: the controller has no --token-file"}
        return web.json_response(body, status=403)
    if not token.accepts(request.headers.get("Authorization")):
        return grants.unauthorized()
    groups = app[GROUPS]
    if groups.off is not None:
        return web.json_response({"error": groups.off}, status=503, headers={"Retry-After": "5"})
    if not groups.granting:
        leadership = groups.leadership
        return grants.not_granting(
            leader=None if leadership is None else leadership.leader,
            is_leader=bool(leadership is not None and leadership.is_leader),
        )
    return None


async def grant(request: web.Request) -> web.Response:
    refused = _refusal(request)
    if refused is not None:
        return refused
    try:
        body = grants.parse_grant(await request.read())
    except ValueError as err:
        return grants.bad_request(str(err))
    decision = request.app[GROUPS].pacing.grant(
        namespace=body["namespace"], name=body["name"], uid=body["uid"]
    )
    request.app[METRICS].grants.labels(basis=decision.basis).inc()
    where = f" on {body['node']}" if "node" in body else ""
    if decision.granted:
        logger.info("granted %s/%s%s: %s", body["namespace"], body["name"], where, decision.reason)
    else:
        logger.debug("held %s/%s%s: %s", body["namespace"], body["name"], where, decision.reason)
    answer: wire.GrantAnswer = {
        "granted": decision.granted,
        "reason": decision.reason,
        "retryAfter": round(decision.retry_after, 3),
    }
    return web.json_response(answer)


async def wait(request: web.Request) -> web.Response:
    refused = _refusal(request)
    if refused is not None:
        return refused
    try:
        _node, seconds, keys = grants.parse_wait(await request.read())
    except ValueError as err:
        return grants.bad_request(str(err))
    found = await request.app[GROUPS].pacing.wait_grantable(keys, within=seconds)
    answer: wire.WaitAnswer = {"grantable": [{"namespace": ns, "name": name} for ns, name in found]}
    return web.json_response(answer)
