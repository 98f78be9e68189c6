"""The controller's group pacing, plugged into the TLS app: the pod watch, the group book, leader election,
the grant API lockd calls, the gate and eviction reconcilers, evict mode's admission decisions, Events,
metrics and the `groups` section of `/status`.

It needs the API server (`--kubeconfig`, or the in-cluster service account). Without either (a local
experiment), the controller serves admission only and says so in its log and `/status`.

Who answers: only the leader grants and removes gates, and only once its watch has listed every enabled
pod (its counts rebuilt from the API: `granted-at`, gates, labels, Ready). Every other replica answers
the grant API with 503 naming the leader; admission is answered by all. In evict mode admission needs
the leader's counts: a replica that does not lead asks the leader (`POST /v1/groups/admit` at
`--leader-url`, within `--admit-timeout`), and holds the pod when it cannot get an answer (safe: the
leader evicts held pods as their pacers allow). The leader, while it rebuilds its counts (just started or
elected), waits for them as long before it holds a pod for want of them. On shutdown the leader stops
granting first, waits (at most `--grant-drain`, 5 s) until the grants it reserved show on their
pods, and only then gives up the Lease: the next leader, which counts from the pods, never misses a
grant it did not see.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
from aiohttp import web

from stagger import kube
from stagger.contracts import groups as contract
from stagger.events import EventRecorder
from stagger.groupbook import Claim, PodRecord, pair_label
from stagger.informer import InformerSettings
from stagger.policy import PolicyFile
from stagger.waiting import wait_event
from webhook import grants, wire
from webhook.admission import EvictAnswer, EvictQuestion
from webhook.app import (
    ADMISSION,
    EVICT_DECIDER,
    METRICS,
    POLICY,
    READINESS,
    SETTINGS,
    STATUS_SECTIONS,
    TOKEN,
)
from webhook.evictions import EvictionReconciler
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
    evictions: EvictionReconciler | None = None
    off: str | None = None
    stopping: bool = False  # shutting down: never grant again
    session: aiohttp.ClientSession | None = None  # the app's one session (API server, the leader)
    leader_ssl: ssl.SSLContext | None = None  # to verify --leader-url with --leader-ca-file

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
    app.router.add_post(contract.GRANT_PATH, grant)
    app.router.add_post(contract.WAIT_PATH, wait)
    app.router.add_post(contract.ADMIT_PATH, admit)
    app[EVICT_DECIDER] = lambda question: _decide_evict(app, question)
    app[READINESS].append(_not_synced)
    app[METRICS].refreshers.append(lambda: _publish(app))
    app[STATUS_SECTIONS].append(_status_section)
    app[POLICY].subscribe(lambda new: _policies_changed(app, new))

    if config is None:
        app[GROUPS].off = "no API server (no --kubeconfig, not in a cluster): admission only, no group pacing"
        logger.warning("group pacing is off: %s", app[GROUPS].off)
        return

    settings = app[SETTINGS]
    if settings.leader_ca_file is not None:
        # Read now, so a missing or bad CA file is a start-up error naming the flag.
        try:
            app[GROUPS].leader_ssl = ssl.create_default_context(cafile=str(settings.leader_ca_file))
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"--leader-ca-file: cannot use {settings.leader_ca_file}: {err}") from err

    async def run(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as session:
            app[GROUPS].session = session
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
    evictions = EvictionReconciler(
        client=client,
        pacing=pacing,
        backoff=app[SETTINGS].eviction_backoff,
        counted=lambda basis: metrics.grants.labels(basis=basis).inc(),
        result=lambda result: metrics.evictions.labels(result=result).inc(),
        released=lambda record, reason, claim: _announce_eviction(watch, record, reason, claim),
    )
    groups.watch, groups.leadership, groups.gates, groups.evictions = watch, leadership, gates, evictions
    tasks = [
        asyncio.create_task(watch.run(), name="pod-watch"),
        asyncio.create_task(events.run(), name="events"),
        asyncio.create_task(gates.run(), name="gate-reconciler"),
        asyncio.create_task(evictions.run(), name="eviction-reconciler"),
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


def _announce_eviction(watch: PodWatch, record: PodRecord, reason: str, claim: Claim | None) -> None:
    owner = (
        "its owner's replacement starts in its place"
        if claim is not None
        else "it has no owner to replace it"
    )
    watch.announce(
        record,
        "StaggerReleased",
        f"released: evicted, {owner} ({reason}); now {watch.describe_pairs(record.pacer_groups + record.bypassed_groups)}",
    )


async def _drain_reservations(pacing: Pacing, *, within: float) -> None:
    deadline = time.monotonic() + within
    while pacing.book.reservations() and time.monotonic() < deadline:
        await pacing.changed(since=pacing.version, within=0.1)
    left = pacing.book.reservations()
    if left:
        logger.warning("%d grants not yet seen on their pods when giving up leadership", left)


def _policies_changed(app: web.Application, new: PolicyFile) -> None:
    """A reloaded policy file reaches the pacers at once (the policy watcher's subscriber): every known pod
    is read again, since bypass selectors and groupings may have changed."""
    groups = app[GROUPS]
    pods = groups.watch.informer.objects() if groups.watch is not None else ()
    groups.pacing.replace_policies(new.staggering_policies, pods)
    logger.info("group pacing: %d staggering policies now", len(new.staggering_policies))


async def _steward(app: web.Application) -> None:
    """Keeps `granting` true exactly while this replica leads with its counts rebuilt. (The gauges are read
    off the state at each scrape: `_publish`.)"""
    groups = app[GROUPS]
    pacing = groups.pacing
    was_leader = False
    while True:
        leadership, watch = groups.leadership, groups.watch
        assert leadership is not None and watch is not None
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
        watch.announce_events = leading
        if leading and not watch.synced:
            await wait_event(
                watch.informer.synced, within=STEWARD_SECONDS
            )  # grant once the counts are rebuilt
        else:
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
    metrics.reservations.set(len(groups.pacing.book.claims()))


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
    now = groups.pacing.clock()
    claims = groups.pacing.book.claims()
    evictions = groups.evictions
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
        "reservations": {
            "count": len(claims),
            # The newest 100: what /status shows of a large release.
            "items": [
                {
                    "id": claim.id,
                    "kind": "owner" if claim.owner and not claim.taken else "admitted",
                    "owner": claim.owner or None,
                    "groups": [pair_label(pair) for pair in claim.pairs],
                    "ageSeconds": round(now - claim.since, 1),
                    "heldForSeconds": None if claim.first_held is None else round(now - claim.first_held, 1),
                }
                for claim in claims[-100:]
            ],
        },
        "evictions": None
        if evictions is None
        else {
            "evicted": evictions.stats.evicted,
            "throttled": evictions.stats.throttled,
            "gone": evictions.stats.gone,
            "error": evictions.stats.error,
            "backingOff": evictions.backing_off(),
        },
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
    answer: contract.GrantAnswer = {
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
    answer: contract.WaitAnswer = {"grantable": [{"namespace": ns, "name": name} for ns, name in found]}
    return web.json_response(answer)


# --- evict mode at admission -----------------------------------------------------------------------------


async def _decide_evict(app: web.Application, question: EvictQuestion) -> EvictAnswer:
    """Let the pod through or hold it: decided here when this replica grants, else by the leader."""
    groups = app[GROUPS]
    metrics = app[METRICS]
    now = time.time()
    if groups.off is not None:
        metrics.evict_admissions.labels(outcome="lock", basis="off").inc()
        return EvictAnswer(outcome="lock", reason=groups.off, now=now)
    if groups.granting or await _until_granting(groups, within=app[SETTINGS].admit_timeout):
        decision = groups.pacing.admit(
            pacer_groups=question.pacer_groups,
            bypassed_groups=question.bypassed_groups,
            owner=question.owner,
            dry_run=question.dry_run,
        )
        outcome: Literal["admit", "hold"] = "admit" if decision.admit else "hold"
        metrics.evict_admissions.labels(outcome=outcome, basis=decision.basis).inc()
        return EvictAnswer(
            outcome=outcome,
            reason=decision.reason,
            now=now,
            ticket=decision.ticket,
            held_since=decision.held_since,
        )
    leadership = groups.leadership
    if leadership is not None and leadership.is_leader and not groups.stopping:
        # Leading, but the counts were not rebuilt within --admit-timeout: nobody else can answer.
        reason = (
            "this replica leads but is still rebuilding its group counts from the API "
            f"(waited --admit-timeout {app[SETTINGS].admit_timeout:g}s)"
        )
        logger.info("held a pod in evict mode: %s", reason)
        metrics.evict_admissions.labels(outcome="hold", basis="unanswered").inc()
        return EvictAnswer(outcome="hold", reason=reason, now=now)
    answer, answered = await _ask_leader(app, question, now=now)
    metrics.evict_admissions.labels(
        outcome=answer.outcome, basis="forwarded" if answered else "unanswered"
    ).inc()
    return answer


async def _until_granting(groups: Groups, *, within: float) -> bool:
    """Whether this replica grants, waiting (at most `within` seconds) while it leads but is still
    rebuilding its counts: a pod created just as the controller starts (or just after an election) is
    decided on the counts a moment later, not held for want of them (holding would cost it an eviction)."""
    deadline = time.monotonic() + within
    while not groups.granting:
        leadership, watch = groups.leadership, groups.watch
        if groups.stopping or leadership is None or watch is None or not leadership.is_leader:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if watch.synced:
            await groups.pacing.changed(since=groups.pacing.version, within=remaining)  # the steward's turn
        else:
            await wait_event(watch.informer.synced, within=remaining)
    return True


async def _ask_leader(
    app: web.Application, question: EvictQuestion, *, now: float
) -> tuple[EvictAnswer, bool]:
    """The leader's answer, and whether it came (if not: hold, and say why)."""
    settings = app[SETTINGS]
    groups = app[GROUPS]
    token = app.get(TOKEN)
    if settings.leader_url is None or groups.session is None or token is None:
        why = "no --leader-url" if settings.leader_url is None else "no --token-file"
        reason = f"this replica does not lead and cannot ask the leader ({why})"
        logger.info("held a pod in evict mode: %s", reason)
        return EvictAnswer(outcome="hold", reason=reason, now=now), False
    body: contract.AdmitRequest = {
        "pacerGroups": [list(pair) for pair in question.pacer_groups],
        "bypassedGroups": [list(pair) for pair in question.bypassed_groups],
        "owner": question.owner,
        "dryRun": question.dry_run,
    }
    url = settings.leader_url.rstrip("/") + contract.ADMIT_PATH
    try:
        async with groups.session.post(
            url,
            json=body,
            headers={"Authorization": f"Bearer {token.token.decode()}"},
            ssl=groups.leader_ssl if groups.leader_ssl is not None else True,
            timeout=aiohttp.ClientTimeout(total=settings.admit_timeout),
        ) as response:
            answer = await response.json(content_type=None)
            if response.status != 200 or not isinstance(answer, dict):
                error = answer.get("error") if isinstance(answer, dict) else None
                raise ValueError(f"HTTP {response.status}: {error or 'unexpected answer'}")
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        logger.info(
            "held a pod in evict mode: the leader could not be asked at %s: %s",
            url,
            err or type(err).__name__,
        )
        reason = f"the leader could not be asked: {err or type(err).__name__}"
        return EvictAnswer(outcome="hold", reason=reason, now=now), False
    ticket = answer.get("ticket")
    held_since = answer.get("heldSince")
    carried = held_since if isinstance(held_since, int | float) and not isinstance(held_since, bool) else None
    decided = EvictAnswer(
        outcome="admit" if answer.get("admit") is True else "hold",
        reason=str(answer.get("reason") or ""),
        now=now,
        ticket=ticket if isinstance(ticket, str) and ticket else None,
        held_since=None if carried is None else float(carried),
    )
    return decided, True


async def admit(request: web.Request) -> web.Response:
    """`POST /v1/groups/admit`: a replica that does not lead asks for an evict-mode admission decision."""
    refused = _refusal(request)
    # A leader still rebuilding its counts answers once it has them, within half the asker's own bound
    # (`--admit-timeout`, the same setting on every replica), so that the answer still reaches it.
    if (
        refused is not None
        and refused.status == 503
        and await _until_granting(request.app[GROUPS], within=request.app[SETTINGS].admit_timeout / 2)
    ):
        refused = None
    if refused is not None:
        return refused
    try:
        body = grants.parse_admit(await request.read())
    except ValueError as err:
        return grants.bad_request(str(err))
    groups = request.app[GROUPS]
    decision = groups.pacing.admit(
        pacer_groups=[(policy, key) for policy, key in body["pacerGroups"]],
        bypassed_groups=[(policy, key) for policy, key in body["bypassedGroups"]],
        owner=body["owner"],
        dry_run=body["dryRun"],
    )
    request.app[METRICS].evict_admissions.labels(
        outcome="admit" if decision.admit else "hold", basis=decision.basis
    ).inc()
    answer: contract.AdmitAnswer = {"admit": decision.admit, "reason": decision.reason}
    if decision.ticket is not None:
        answer["ticket"] = decision.ticket
    if decision.held_since is not None:
        answer["heldSince"] = decision.held_since
    return web.json_response(answer)
