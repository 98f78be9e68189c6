"""The controller's aiohttp applications: the TLS app (admission, `/status`) and the plain probe app
(`/healthz`, `/readyz`, `/metrics`).

Admission (`POST /mutate/pods`) is `webhook.admission.review` over HTTP: it needs no state and no API
call, so every replica answers it, leader or not; only for a pod in evict mode does it first ask the
group part (`EVICT_DECIDER`: the leader's counts) whether to hold it. `POST /mutate/pods/namespace` and
`POST /mutate/pods/scheduler` are the same for pods opted in by their namespace or their scheduler
(`webhook.admission.optin`; counted apart by route in stagger_controller_requests_total).
`POST /mutate/jobs` is `webhook.admission.review_job`. It never denies a pod: a body that is not an
AdmissionReview gets 400 (413 over `--max-body`) with `{"error": reason}`, and an internal error admits
the pod unchanged with a warning, is counted (`result="error"`) and logged (with its traceback the first
time). Every answer carries `X-Stagger-Admission-Ms`, the time spent in the handler.

The policy file, the serving certificate and the token file are checked for changes every
`--reload-interval`; a bad new version is reported and the last good one stays.

Later parts (the group grant service, leader election, the gate reconciler) plug in with
`app.cleanup_ctx` (their background work), `app.router` (their routes), `READINESS` (a reason not to be
ready) and `STATUS_SECTIONS` (their part of `/status`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stagger import serving
from stagger.names import Names
from stagger.policy import PolicyFile, StaggeringPolicy
from stagger.policywatch import PolicyWatcher
from stagger.serving import json_response
from webhook import admission, status
from webhook.admission import wire
from webhook.metrics import ADMISSION_RESULTS, Metrics
from webhook.settings import Settings
from webhook.tls import ServingCertificate
from webhook.token import TokenFile

__all__ = [
    "ADMISSION",
    "CERTIFICATE",
    "EVICT_DECIDER",
    "METRICS",
    "POLICY",
    "READINESS",
    "SETTINGS",
    "STATUS_SECTIONS",
    "TOKEN",
    "Admission",
    "check_files",
    "make_app",
    "make_probe_app",
]

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ReadinessCheck = Callable[[web.Application], str | None]
"""A reason the controller is not ready, or None."""
StatusSection = Callable[[web.Application], tuple[str, dict[str, Any]]]
"""A part's section of `/status`: (key, JSON object)."""

TIMING_HEADER = "X-Stagger-Admission-Ms"


@dataclass(frozen=True)
class Admission:
    """What a review needs, replaced as a whole when the policy file is reloaded."""

    policies: tuple[StaggeringPolicy, ...]
    names: Names
    inject: admission.InjectSettings

    @classmethod
    def build(cls, settings: Settings, policy_file: PolicyFile) -> Admission:
        return cls(
            policies=policy_file.staggering_policies,
            names=Names(settings.prefix),
            inject=admission.InjectSettings(
                image=settings.inject.image,
                lockd_port=settings.inject.lockd_port,
                token_audience=settings.inject.token_audience if settings.inject.pod_token else None,
                max_wait=admission.max_wait_for(policy_file),
                unreachable_wait=admission.unreachable_wait_for(policy_file),
            ),
        )


@dataclass
class Lifecycle:
    started_at: float = field(default_factory=time.time)
    closing: bool = False


@dataclass
class InternalErrors:
    """Internal errors of admission: the first of each kind (exception type and where it was raised) is
    logged with its traceback, later ones in one line with their count."""

    seen: dict[str, int] = field(default_factory=dict)

    def report(self, error: Exception, *, what: str) -> None:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        kind = f"{type(error).__name__} at {where}"
        count = self.seen.get(kind, 0) + 1
        if len(self.seen) < 1000 or kind in self.seen:
            self.seen[kind] = count
        if count == 1:
            logger.error(
                "internal error admitting %s; the pod is admitted unchanged (later errors of this kind are "
                "logged in one line)",
                what,
                exc_info=error,
            )
        else:
            logger.error(
                "internal error admitting %s (%s, %d times); the pod is admitted unchanged: %s",
                what,
                kind,
                count,
                error,
            )


SETTINGS = web.AppKey("settings", Settings)
POLICY = web.AppKey("policy", PolicyWatcher)
ADMISSION = web.AppKey("admission", Admission)
CERTIFICATE = web.AppKey("certificate", ServingCertificate)  # absent with --insecure-http
TOKEN = web.AppKey("token", TokenFile)  # absent without --token-file
METRICS = web.AppKey("metrics", Metrics)
COUNTS: web.AppKey[dict[str, int]] = web.AppKey("admission_counts")
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
ERRORS = web.AppKey("internal_errors", InternalErrors)
READINESS: web.AppKey[list[ReadinessCheck]] = web.AppKey("readiness")
STATUS_SECTIONS: web.AppKey[list[StatusSection]] = web.AppKey("status_sections")
CONTROLLER = web.AppKey("controller", web.Application)  # the probe app's view of the TLS app
EvictDecider = Callable[[admission.EvictQuestion], Awaitable[admission.EvictAnswer]]
# Set by the group part (webhook.groups); absent: evict-mode pods are paced in lock mode.
EVICT_DECIDER: web.AppKey[EvictDecider] = web.AppKey("evict_decider")


def _json_error(status_code: int, message: str, *, headers: Mapping[str, str] | None = None) -> web.Response:
    body: wire.ErrorBody = {"error": message}
    return json_response(body, status=status_code, headers=headers)


# --- admission ----------------------------------------------------------------------------------------


def _what(body: object) -> str:
    """`namespace/name (uid ...)` of the pod in a review, for the log; never raises."""
    request = body.get("request") if isinstance(body, Mapping) else None
    if not isinstance(request, Mapping):
        return "a review"
    pod = request.get("object")
    metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
    name = request.get("name") or (
        (metadata.get("name") or f"{metadata.get('generateName', '')}*")
        if isinstance(metadata, Mapping)
        else "?"
    )
    return f"pod {request.get('namespace', '?')}/{name} (request {request.get('uid', '?')})"


def _answer(request: web.Request, began: float, code: int, body: object, result: str) -> web.Response:
    app = request.app
    payload = json.dumps(body, separators=(",", ":")).encode()
    elapsed = time.perf_counter() - began
    app[METRICS].admissions.labels(result=result).inc()
    app[METRICS].admission_seconds.observe(elapsed)
    app[COUNTS][result] += 1
    return web.Response(
        status=code,
        body=payload,
        content_type="application/json",
        headers={TIMING_HEADER: f"{elapsed * 1000:.3f}"},
    )


def _bad_request(request: web.Request, began: float, code: int, reason: str) -> web.Response:
    logger.warning("bad admission request from %s: %s", request.remote, reason)
    return _answer(request, began, code, {"error": reason}, "bad_request")


def _unchanged(body: object) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The pod admitted unchanged with the internal-error warning (400 if the review has no uid)."""
    request = body.get("request") if isinstance(body, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    if not isinstance(uid, str) or not uid:
        return 400, {"error": "request.uid must be a non-empty string"}
    response: wire.AdmissionResponse = {
        "uid": uid,
        "allowed": True,
        "warnings": [admission.INTERNAL_ERROR_WARNING],
    }
    return 200, {"apiVersion": wire.API_VERSION, "kind": wire.KIND, "response": response}


async def _read_review(request: web.Request, began: float) -> object | web.Response:
    """The decoded JSON body, or the error response to send."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(
            request,
            began,
            413,
            f"request body too large: at most {request.app[SETTINGS].server.max_body} bytes",
        )
    try:
        body: object = json.loads(raw)
    except RecursionError:
        return _bad_request(request, began, 400, "the body is not an AdmissionReview: nested too deeply")
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        return _bad_request(request, began, 400, f"the body is not JSON: {err}")
    return body


async def _evict_answer(
    app: web.Application,
    body: object,
    current: Admission,
    *,
    route: admission.Route = "label",
    scheduler_names: tuple[str, ...] = (),
) -> admission.EvictAnswer | None:
    question = admission.evict_question(
        body,
        policies=current.policies,
        names=current.names,
        settings=current.inject,
        route=route,
        scheduler_names=scheduler_names,
    )
    if question is None:
        return None
    decide = app.get(EVICT_DECIDER)
    if decide is None:
        return admission.EvictAnswer(
            outcome="lock", reason="this controller has no group pacing", now=time.time()
        )
    return await decide(question)


Review = Callable[
    [object, Admission, list[Exception]], Awaitable[tuple[int, wire.ReviewOut | wire.ErrorBody]]
]
"""(the decoded body, the admission in force, where to append internal errors) -> (status, answer)."""


async def _admission(request: web.Request, review: Review, *, log_warnings: bool) -> web.Response:
    """One AdmissionReview in, its answer out: read, reviewed, errors reported and counted, timed.
    `log_warnings`: the warnings are logged at INFO (they say why stagger left an object alone)."""
    began = time.perf_counter()
    app = request.app
    body = await _read_review(request, began)
    if isinstance(body, web.Response):
        return body
    errors: list[Exception] = []
    try:
        code, answer = await review(body, app[ADMISSION], errors)
    except Exception as unguarded:  # a bug outside the review's own guard: still never deny
        errors.append(unguarded)
        code, answer = _unchanged(body)
    for error in errors:
        app[ERRORS].report(error, what=_what(body))
    if code != 200:
        return _bad_request(request, began, code, cast(wire.ErrorBody, answer)["error"])
    response = cast(wire.ReviewOut, answer)["response"]
    result = "error" if errors else "mutated" if "patch" in response else "allowed"
    if log_warnings and response.get("warnings"):
        logger.info("admission of %s: %s", _what(body), "; ".join(response.get("warnings", [])))
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("admission of %s: %s %s", _what(body), result, response.get("warnings", ""))
    return _answer(request, began, 200, answer, result)


async def _mutate_pods(request: web.Request, *, route: admission.Route) -> web.Response:
    """One AdmissionReview v1 in, its answer out, the pod opted in by `route` (see the module docstring)."""
    scheduler_names = request.app[SETTINGS].inject.scheduler_names

    async def review(
        body: object, current: Admission, errors: list[Exception]
    ) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
        evict = await _evict_answer(request.app, body, current, route=route, scheduler_names=scheduler_names)
        return admission.review(
            body,
            policies=current.policies,
            names=current.names,
            settings=current.inject,
            internal_errors=errors,
            evict=evict,
            route=route,
            scheduler_names=scheduler_names,
        )

    return await _admission(request, review, log_warnings=False)


async def mutate_pods(request: web.Request) -> web.Response:
    """`POST /mutate/pods`: pods labelled `<prefix>/enable: "1"`."""
    return await _mutate_pods(request, route="label")


async def mutate_namespace_pods(request: web.Request) -> web.Response:
    """`POST /mutate/pods/namespace`: the pods of a namespace labelled `<prefix>/enable: "1"` (the API
    server's namespaceSelector chose them), given the label unless they opted out."""
    return await _mutate_pods(request, route="namespace")


async def mutate_scheduler_pods(request: web.Request) -> web.Response:
    """`POST /mutate/pods/scheduler`: pods naming one of --scheduler-names, given the label and the
    default scheduler (the name is checked here: none configured, none opted in)."""
    return await _mutate_pods(request, route="scheduler")


async def mutate_jobs(request: web.Request) -> web.Response:
    """`POST /mutate/jobs`: evict mode's rule for Jobs (`admission.review_job`)."""

    async def review(
        body: object, current: Admission, errors: list[Exception]
    ) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
        return admission.review_job(
            body, policies=current.policies, names=current.names, internal_errors=errors
        )

    return await _admission(request, review, log_warnings=True)


# --- status and probes --------------------------------------------------------------------------------


def not_ready(app: web.Application) -> list[str]:
    """Every reason the controller is not ready (empty when it is)."""
    return [reason for check in app[READINESS] if (reason := check(app)) is not None]


def _closing(app: web.Application) -> str | None:
    return "shutting down" if app[LIFECYCLE].closing else None


def _certificate_works(app: web.Application) -> str | None:
    certificate = app.get(CERTIFICATE)
    return None if certificate is None else certificate.problem


def status_document(app: web.Application, *, listen: str | None = None) -> dict[str, Any]:
    """`/status` as JSON; `listen`: the address it was asked on (default: the configured one)."""
    counts: dict[str, int] = app[COUNTS]
    settings = app[SETTINGS]
    scheme = "https" if settings.tls else "http"
    return status.build_status(
        settings=settings,
        listen=f"{scheme}://{listen or f'{settings.server.host}:{settings.server.port}'}",
        policy=app[POLICY],
        max_wait=app[ADMISSION].inject.max_wait,
        certificate=app.get(CERTIFICATE),
        admissions=counts,
        started_at=app[LIFECYCLE].started_at,
        not_ready=not_ready(app),
        sections=dict(section(app) for section in app[STATUS_SECTIONS]),
    )


async def show_status(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "json")
    if fmt not in ("json", "text"):
        return _json_error(400, f"format must be json or text (got {fmt!r:.40})")
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    listen = None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host = str(sockname[0])
        listen = f"[{host}]:{sockname[1]}" if ":" in host else f"{host}:{sockname[1]}"
    doc = status_document(request.app, listen=listen)
    if fmt == "text":
        return web.Response(text=status.render_text(doc))
    return json_response(doc)


async def healthz(request: web.Request) -> web.Response:
    return json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    reasons = not_ready(request.app[CONTROLLER])
    if reasons:
        return json_response({"ready": False, "reasons": reasons}, status=503)
    return json_response({"ready": True})


async def metrics(request: web.Request) -> web.Response:
    registered = request.app[CONTROLLER][METRICS]
    for refresh in registered.refreshers:
        refresh()
    payload = generate_latest(registered.registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


# --- files that change --------------------------------------------------------------------------------


def check_files(app: web.Application) -> None:
    """Reload the policy file, the serving certificate and the token file if they changed."""
    m = app[METRICS]
    outcome = app[POLICY].check()  # a new policy reaches admission and the pacers by their subscriptions
    if outcome != "unchanged":
        m.policy_reloads.labels(result="ok" if outcome == "reloaded" else "error").inc()
    certificate = app.get(CERTIFICATE)
    if certificate is not None:
        changed = certificate.reload_if_changed()
        if changed != "unchanged":
            m.certificate_reloads.labels(result="ok" if changed == "reloaded" else "error").inc()
        certificate.self_test()
    token = app.get(TOKEN)
    if token is not None:
        token.reload_if_changed()


async def _watch_files(app: web.Application) -> None:
    interval = app[SETTINGS].policy.reload_interval
    while True:
        await asyncio.sleep(interval)
        try:
            check_files(app)
        except Exception:  # a bug here must not stop the reloads for good
            logger.exception("checking the policy, certificate and token files failed")


async def _mark_closing(app: web.Application) -> None:
    app[LIFECYCLE].closing = True


@web.middleware
async def _count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """`stagger_controller_requests_total{route, code}`: what reaches the controller, and how often. The
    route's template, not the path, so that the label's values stay few whatever callers send."""
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        request.app[METRICS].requests.labels(route=route, code=f"{status // 100}xx").inc()


# --- the factories ------------------------------------------------------------------------------------


def make_app(settings: Settings) -> web.Application:
    """The TLS listener's app. Raises `policy.PolicyError` (naming every bad field) for a bad policy
    file, `tls.CertificateError` for a certificate and key that cannot be served, and
    `token.TokenError` for an unreadable or empty token file. The listener's SSL context is
    `app[CERTIFICATE].context` (absent with --insecure-http)."""
    state = PolicyWatcher.load(settings.policy.policies, absent="none (no --policies)")
    app = web.Application(
        client_max_size=settings.server.max_body,
        middlewares=[
            _count_requests,
            serving.json_errors(max_body=settings.server.max_body, read_first=False),
        ],
    )
    if settings.tls:
        assert (
            settings.serving.tls_cert is not None and settings.serving.tls_key is not None
        )  # checked by the settings
        app[CERTIFICATE] = ServingCertificate.load(settings.serving.tls_cert, settings.serving.tls_key)
    if settings.serving.token_file is not None:
        app[TOKEN] = TokenFile.load(settings.serving.token_file)
    app[SETTINGS] = settings
    app[POLICY] = state
    app[METRICS] = Metrics()

    def admit_with(policy_file: PolicyFile) -> None:
        app[ADMISSION] = Admission.build(settings, policy_file)
        app[METRICS].staggering_policies.set(len(policy_file.staggering_policies))

    admit_with(state.policy_file)
    state.subscribe(admit_with)
    app[COUNTS] = dict.fromkeys(ADMISSION_RESULTS, 0)
    app[LIFECYCLE] = Lifecycle()
    app[ERRORS] = InternalErrors()
    checks: list[ReadinessCheck] = [_closing, _certificate_works]
    app[READINESS] = checks
    sections: list[StatusSection] = []
    app[STATUS_SECTIONS] = sections
    app.router.add_post("/mutate/pods", mutate_pods)
    app.router.add_post("/mutate/pods/namespace", mutate_namespace_pods)
    app.router.add_post("/mutate/pods/scheduler", mutate_scheduler_pods)
    if settings.inject.scheduler_names:
        logger.info(
            "controller: pods of the schedulers %s are opted in at /mutate/pods/scheduler and given %s",
            ", ".join(settings.inject.scheduler_names),
            admission.DEFAULT_SCHEDULER,
        )
    app.router.add_post("/mutate/jobs", mutate_jobs)
    app.router.add_get("/status", show_status)
    app.cleanup_ctx.append(serving.background("file-reload", _watch_files))
    app.on_shutdown.append(_mark_closing)
    logger.info(
        "controller: policy file %s (%d staggering policies), init client image %s, lockd port %d",
        state.source,
        len(state.policy_file.staggering_policies),
        settings.inject.image,
        settings.inject.lockd_port,
    )
    return app


_PROBE_MAX_BODY = 64 * 1024  # the probes take no body


def make_probe_app(controller: web.Application) -> web.Application:
    """The plain HTTP probe listener's app, answering for `controller` (the app of `make_app`)."""
    app = web.Application(
        client_max_size=_PROBE_MAX_BODY,
        middlewares=[serving.json_errors(max_body=_PROBE_MAX_BODY, read_first=False)],
    )
    app[CONTROLLER] = controller
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
