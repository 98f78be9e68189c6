"""The group grant API lockd calls and evict mode's admission decision (docs/contracts.md, "lockd →
controller: group grants"): handlers that translate HTTP to the pacing and back.

- `POST /v1/groups/grant`: may this pod start now? A grant is reserved at once (counted as starting)
  so that concurrent asks from other nodes never over-grant.
- `POST /v1/groups/wait`: a node's long poll: answered as soon as any of the listed held pods may go
  (or after `wait` seconds with none). lockd keeps one such request open per node, so a group that
  gains room reaches the node within milliseconds, and the controller's load grows with nodes, not
  with waiting pods.
- `POST /v1/groups/admit`: a replica that does not lead asks the leader whether to let an evict-mode pod
  through (`decide_evict` asks it, `admit` answers it).

All need `Authorization: Bearer <token>` (compared in constant time; 401 otherwise) and are answered
only by the leader once its counts are rebuilt; any other replica answers 503 naming the leader. The
bodies are built and read by `stagger.contracts.groups`; the refusals are `webhook.groups.answers`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal, TypeVar

import aiohttp
from aiohttp import web

from stagger.contracts import groups as contract
from stagger.contracts.errors import read_error
from stagger.groupbook import RESERVATION_SECONDS, Decision
from stagger.objectnames import PodKey
from stagger.serving import json_response
from stagger.waiting import wait_event
from webhook.admission import EvictAnswer, EvictQuestion, wire
from webhook.app import (
    METRICS,
    SETTINGS,
    TOKEN,
)
from webhook.groups import answers
from webhook.groups.state import GROUPS, Groups

__all__ = ["admit", "decide_evict", "grant", "wait"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _refusal(request: web.Request) -> web.Response | None:
    """401 without the token, 403 with no token configured, 503 when this replica does not grant."""
    app = request.app
    token = app.get(TOKEN)
    if token is None:
        body: wire.ErrorBody = {"error": "the group grant API is off: the controller has no --token-file"}
        return json_response(body, status=403)
    if not token.accepts(request.headers.get("Authorization")):
        return answers.unauthorized()
    groups = app[GROUPS]
    if groups.off is not None:
        return json_response({"error": groups.off}, status=503, headers={"Retry-After": "5"})
    if not groups.granting:
        leadership = groups.leadership
        return answers.not_granting(
            leader=None if leadership is None else leadership.leader,
            is_leader=bool(leadership is not None and leadership.is_leader),
        )
    return None


async def _read(
    request: web.Request, read: Callable[[object], T], *, refused: web.Response | None
) -> T | web.Response:
    """The request's body as `read` (a reader of `stagger.contracts.groups`) reads it, or the answer that
    turns the request away: `refused` (`_refusal`'s, which the caller may have waived), else a 400 naming
    the bad field."""
    if refused is not None:
        return refused
    try:
        return read(contract.decode_json(await request.read()))
    except contract.BodyError as err:
        return answers.bad_request(str(err))


async def grant(request: web.Request) -> web.Response:
    body = await _read(request, contract.read_grant_request, refused=_refusal(request))
    if isinstance(body, web.Response):
        return body
    where = f" on {body['node']}" if "node" in body else ""
    decision = _grant(request, (body["namespace"], body["name"]), uid=body["uid"], where=where)
    answer = contract.grant_answer(
        granted=decision.granted, reason=decision.reason, retry_after=decision.retry_after
    )
    return json_response(answer)


async def wait(request: web.Request) -> web.Response:
    asked = await _read(request, contract.read_wait_request, refused=_refusal(request))
    if isinstance(asked, web.Response):
        return asked
    pacing = request.app[GROUPS].pacing
    if asked.grant and (again := pacing.granted_already(asked.pods, uids=asked.uids)):
        return json_response(
            contract.wait_answer(granted=again, granted_for=min(again.values()), uids=asked.uids)
        )
    found = await pacing.wait_grantable(asked.pods, within=asked.wait)
    if not asked.grant:
        return json_response(contract.wait_answer(grantable=found, uids=asked.uids))
    transport = request.transport
    if transport is None or transport.is_closing():
        # The node hung up while it waited (it names a new pod in a new wait): no grant for an answer nobody
        # reads. (One that crosses the hang-up is not lost either: the next wait names the pod again and is
        # answered with the same grant, `granted_already`.)
        found = []
    where = f" on {asked.node} in its wait"
    granted = [key for key in found if _grant(request, key, uid=asked.uids.get(key, ""), where=where).granted]
    answer = json_response(
        contract.wait_answer(granted=granted, granted_for=RESERVATION_SECONDS, uids=asked.uids)
    )
    _observe_ready_to_grant(request, granted)
    return answer


def _observe_ready_to_grant(request: web.Request, granted: list[PodKey]) -> None:
    """The Ready-to-grant latency of each pod this answer grants whose room a Ready made, up to the answer
    being written (it is sent as the handler returns).

    Grants without such a Ready are left out, not labelled: a pod that had room when it asked (or got it
    by time, a deletion, a lapsed reservation) has no Ready to measure from, and its answer's time is a
    request's; mixed in, those near-zero values would pull the quantiles down and hide the one path this
    histogram is for (Ready -> pacer room -> wake-up -> answer). They are counted by basis in
    `stagger_controller_grants_total`."""
    pacing = request.app[GROUPS].pacing
    histogram = request.app[METRICS].grant_latency
    now = pacing.monotonic()
    for key in granted:
        seen = pacing.take_freed(key)
        if seen is not None:
            histogram.observe(max(0.0, now - seen))


def _grant(request: web.Request, key: PodKey, *, uid: str, where: str) -> Decision:
    """One pod's grant, asked by lockd (`POST /v1/groups/grant`) or given in a node's wait (decided again
    there: an earlier pod of the same answer may have taken the room): decided, counted and logged."""
    decision = request.app[GROUPS].pacing.grant(namespace=key[0], name=key[1], uid=uid)
    request.app[METRICS].grants.labels(basis=decision.basis).inc()
    if decision.granted:
        logger.info("granted %s/%s%s: %s", key[0], key[1], where, decision.reason)
    else:
        logger.debug("held %s/%s%s: %s", key[0], key[1], where, decision.reason)
    return decision


async def decide_evict(app: web.Application, question: EvictQuestion) -> EvictAnswer:
    """Let the pod through or hold it: decided here when this replica grants, else by the leader."""
    groups = app[GROUPS]
    metrics = app[METRICS]
    now = time.time()
    if groups.off is not None:
        metrics.evict_admissions.labels(outcome="lock", basis="off").inc()
        return EvictAnswer(outcome="lock", reason=groups.off, now=now)
    if groups.granting or await _until_granting(groups, within=app[SETTINGS].groups.admit_timeout):
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
            f"(waited --admit-timeout {app[SETTINGS].groups.admit_timeout:g}s)"
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
    if settings.groups.leader_url is None or groups.session is None or token is None:
        why = "no --leader-url" if settings.groups.leader_url is None else "no --token-file"
        reason = f"this replica does not lead and cannot ask the leader ({why})"
        logger.info("held a pod in evict mode: %s", reason)
        return EvictAnswer(outcome="hold", reason=reason, now=now), False
    body = contract.admit_request(
        pacer_groups=question.pacer_groups,
        bypassed_groups=question.bypassed_groups,
        owner=question.owner,
        dry_run=question.dry_run,
    )
    url = settings.groups.leader_url.rstrip("/") + contract.ADMIT_PATH
    try:
        async with groups.session.post(
            url,
            json=body,
            headers={"Authorization": f"Bearer {token.token.decode()}"},
            ssl=groups.leader_ssl if groups.leader_ssl is not None else True,
            timeout=aiohttp.ClientTimeout(total=settings.groups.admit_timeout),
        ) as response:
            data = await response.json(content_type=None)
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}: {read_error(data) or 'unexpected answer'}")
            answer = contract.read_admit_answer(data)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        logger.info(
            "held a pod in evict mode: the leader could not be asked at %s: %s",
            url,
            err or type(err).__name__,
        )
        reason = f"the leader could not be asked: {err or type(err).__name__}"
        return EvictAnswer(outcome="hold", reason=reason, now=now), False
    decided = EvictAnswer(
        outcome="admit" if answer["admit"] else "hold",
        reason=answer["reason"],
        now=now,
        ticket=answer.get("ticket"),
        held_since=answer.get("heldSince"),
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
        and await _until_granting(request.app[GROUPS], within=request.app[SETTINGS].groups.admit_timeout / 2)
    ):
        refused = None
    body = await _read(request, contract.read_admit_request, refused=refused)
    if isinstance(body, web.Response):
        return body
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
    answer = contract.admit_answer(
        admit=decision.admit, reason=decision.reason, ticket=decision.ticket, held_since=decision.held_since
    )
    return json_response(answer)
