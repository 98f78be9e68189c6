"""The lock ask (`GET /v1/lock`), whoever serves the connection: aiohttp's handler (`lockd.app.lock`) or the
long-poll front door (`lockd.longpoll`). One request's answer as data (`Answer`: status, headers, encoded
body), so that both translate the same decision to HTTP, and the checks on the way to it: the query, cluster
mode's uid, readiness, the pod's service-account token and its identity on this node."""

from __future__ import annotations

import http
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from lockd import ledger, params, tokenreview
from lockd.appstate import BODIES, CLUSTER, METRICS, QUERIES, SERVICE, SETTINGS, view_of
from stagger import throttles
from stagger.contracts.errors import ErrorBody
from stagger.contracts.lock import RELEASE_TOKEN_HEADER, LockDenied, LockGranted, QueueFullBody
from stagger.serving import json_body
from stagger.timestamps import format_rfc3339

__all__ = ["Answer", "answer_anonymous", "answer_ask", "check_token", "error", "not_ready"]

_RETRY_NOW = (("Retry-After", "1"),)


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer: its body, encoded (JSON, or text for pod-startup-lock's `GET /`); `headers` beyond
    Content-Type and Content-Length."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"

    def response(self) -> web.Response:
        """As aiohttp's handlers return it."""
        return web.Response(
            body=self.body,
            status=self.status,
            headers=dict(self.headers) or None,
            content_type=self.content_type,
            charset="utf-8",
        )

    def head(self, *, keep_alive: bool) -> bytes:
        """The status line and headers of an HTTP/1.1 response carrying this answer (the front door's)."""
        lines = [
            f"HTTP/1.1 {self.status} {http.HTTPStatus(self.status).phrase}",
            f"Content-Type: {self.content_type}; charset=utf-8",
            f"Content-Length: {len(self.body)}",
            *(f"{name}: {value}" for name, value in self.headers),
            "Connection: keep-alive" if keep_alive else "Connection: close",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def error(status: int, message: str, *, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    body: ErrorBody = {"error": message}
    return Answer(status, json_body(body), headers)


def not_ready(app: web.Application) -> Answer | None:
    """503 while lockd shuts down, or before cluster mode has listed the node's pods."""
    service = app[SERVICE]
    if service.closing:
        return error(503, "lockd is shutting down", headers=_RETRY_NOW)
    if not service.ready:
        return error(
            503,
            f"lockd has not listed the pods on node {app[SETTINGS].node.node_name} yet",
            headers=_RETRY_NOW,
        )
    return None


def _retry_after(seconds: float) -> tuple[tuple[str, str], ...]:
    return (("Retry-After", str(throttles.ceil_seconds(seconds))),)


def _denied(app: web.Application, outcome: ledger.Denied, *, max_wait: float) -> Answer:
    def build() -> LockDenied:
        return {"granted": False, "reason": outcome.reason, "position": outcome.position, "maxWait": max_wait}

    body = app[BODIES].get("denied", (outcome.reason, outcome.position, max_wait), build)
    return Answer(423, body, _retry_after(outcome.retry_after))


def _queue_full(outcome: ledger.QueueFull, *, max_wait: float) -> Answer:
    body: QueueFullBody = {
        "granted": False,
        "reason": f"{outcome.limit} pods are already waiting on this node (maxQueue); try again later",
        "queueLimit": outcome.limit,
        "maxWait": max_wait,
    }
    return Answer(429, json_body(body), _retry_after(outcome.retry_after))


def _granted(app: web.Application, outcome: ledger.Granted, query: params.LockQuery) -> Answer:
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

        return Answer(200, app[BODIES].get("reasked", (slot.namespace, slot.name, slot.granted_wall), again))
    # Only the first 200 carries the token: it is the caller's proof for DELETE.
    body: LockGranted = {
        "granted": True,
        "namespace": query.namespace,
        "name": query.name,
        "grantedAt": format_rfc3339(slot.granted_wall),
        "releaseToken": outcome.token,
    }
    return Answer(200, json_body(body), ((RELEASE_TOKEN_HEADER, outcome.token),))


async def check_token(
    app: web.Application, headers: Mapping[str, str], *, namespace: str, name: str, uid: str, peer: str
) -> Answer | Literal["verified", "unverified", "standalone"]:
    """Cluster mode: the pod's service-account token bound to the pod named (lockd/tokenreview.py); an answer
    when the request is refused, else whether the token showed it is that pod. A pod of this node that
    admission gave the token (its spec has the token volume) must show it; a new token costs the caller
    `peer` (its address) one review of its own budget."""
    state = app.get(CLUSTER)
    if state is None or state.tokens is None:
        return "standalone"
    metrics = app[METRICS]
    try:
        token = tokenreview.bearer_token(headers)
    except tokenreview.BadAuthorization as err:
        metrics.count("bad_request")
        return error(400, str(err))
    review = await state.tokens.review(token, peer=peer) if token is not None else None
    view = state.view
    watched = view.pod((namespace, name)) if view is not None else None
    verdict = tokenreview.decide(
        review,
        require=app[SETTINGS].tokens.require_pod_token,
        injected=view is not None and view.has_token_volume(namespace=namespace, name=name),
        namespace=namespace,
        name=name,
        uid=uid,
        watched_uid=None if watched is None else str((watched.get("metadata") or {}).get("uid") or ""),
    )
    if isinstance(verdict, tokenreview.Refusal):
        metrics.pod_tokens.count("refused")
        metrics.pod_token_refusals.count(verdict.why)
        metrics.count("forbidden" if verdict.status == 403 else "unconfirmed")
        retry = _retry_after(max(1.0, verdict.retry_after)) if verdict.status == 503 else ()
        return error(verdict.status, verdict.reason, headers=retry)
    metrics.pod_tokens.count(
        "verified" if verdict == "verified" else "absent" if review is None else "unchecked"
    )
    return verdict


async def _refusal(
    app: web.Application, headers: Mapping[str, str], query: params.LockQuery, *, peer: str
) -> Answer | None:
    """Cluster mode: why this caller gets no answer from the queue (its identity on this node, its token)."""
    from lockd import clusterwatch  # loaded already: the view is cluster mode's

    view = view_of(app)
    assert view is not None
    metrics = app[METRICS]
    try:
        tokenreview.bearer_token(headers)  # a bad header is a bad request, whoever is named
    except tokenreview.BadAuthorization as err:
        metrics.count("bad_request")
        return error(400, str(err))
    # The identity first: once it holds, the pod is in the view, which says whether it must show a token
    # (a pod the watch has not brought yet is read from the API by the check).
    problem = await view.check_identity(namespace=query.namespace, name=query.name, uid=query.uid)
    if isinstance(problem, clusterwatch.Unconfirmed):
        metrics.count("unconfirmed")
        return error(503, problem, headers=_RETRY_NOW)
    if problem is not None:
        metrics.count("forbidden")
        return error(403, problem)
    checked = await check_token(
        app, headers, namespace=query.namespace, name=query.name, uid=query.uid, peer=peer
    )
    return checked if isinstance(checked, Answer) else None


def _always() -> bool:
    return True


async def answer_ask(
    app: web.Application,
    *,
    raw_query: str,
    headers: Mapping[str, str],
    alive: Callable[[], bool],
    peer: str,
) -> Answer:
    """`GET /v1/lock?namespace=&name=[&uid=][&wait=S]`: 200 granted, 423 wait, 429 queue full, 400/403/503.
    `alive()` says whether the caller is still there while a long poll waits; `peer` is the caller's
    address (the connection's), whose own budget a new token uses (`podtoken.CallerBudgets`)."""
    service = app[SERVICE]
    try:
        # Parsed from the raw string, not a request's `query`: that would stay on the request while it waits.
        query = app[QUERIES].get(raw_query)
        if view_of(app) is not None and not query.uid:
            raise params.BadRequest("uid: required in cluster mode (the pod's metadata.uid)")
    except params.BadRequest as err:
        service.metrics.count("bad_request")
        return error(400, str(err))
    unavailable = not_ready(app)
    if unavailable is not None:
        return unavailable
    if view_of(app) is not None and (refused := await _refusal(app, headers, query, peer=peer)) is not None:
        return refused
    outcome = await service.wait_for_slot(
        namespace=query.namespace,
        name=query.name,
        uid=query.uid,
        wait=query.wait,
        alive=alive if query.wait > 0 else _always,
    )
    max_wait = service.node_policy.max_wait
    if isinstance(outcome, ledger.QueueFull):
        service.metrics.count("queue_full")
        return _queue_full(outcome, max_wait=max_wait)
    if isinstance(outcome, ledger.Denied):
        service.metrics.count("denied")
        return _denied(app, outcome, max_wait=max_wait)
    service.metrics.count("granted")
    return _granted(app, outcome, query)


def _text(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    return Answer(status, text.encode(), headers, content_type="text/plain")


def answer_anonymous(app: web.Application, *, raw_query: str) -> Answer:
    """pod-startup-lock compatibility: `GET /?duration=S` → `Lock acquired` or `Locked` (text).

    Anonymous: no identity and no release, so a slot never outlives the node policy's holdTimeout, and in
    cluster mode (where every pod on the node can reach this port) the path is off unless allowed."""
    service = app[SERVICE]
    if not app[SETTINGS].anonymous_allowed:
        service.metrics.count("forbidden")
        return error(
            403,
            "anonymous slots (GET /?duration=S) are off in cluster mode: use /v1/lock with the pod's identity, "
            "or start lockd with --allow-anonymous (chart value lockd.allowAnonymous)",
        )
    try:
        duration = params.anonymous_duration(
            params.query_params(raw_query), hold_timeout=service.node_policy.hold_timeout
        )
    except params.BadRequest as err:
        return error(400, str(err))
    if not service.ready or service.closing:
        return _text(423, "Locked", _RETRY_NOW)
    outcome = service.take_anonymous(duration=duration.seconds)
    if not isinstance(outcome, ledger.Granted):
        service.metrics.count("denied")
        return _text(423, "Locked", _retry_after(outcome.retry_after))
    service.metrics.count("granted")
    text = "Lock acquired"
    if duration.asked is not None:
        text += f" for {duration.seconds:g}s: duration={duration.asked:g} was cut to the node policy's holdTimeout"
    return _text(200, text, (("X-Stagger-Duration", f"{duration.seconds:g}"),))
