"""Waiting for a start-up slot from lockd: a pure decision core and the thin loop that does the I/O.

The core (`start`, `plan_request`, `decide`, `give_up`) is made of functions of data and of `now`
(monotonic seconds) that return data: the next request, or what to do with an answer (finish, or
sleep N seconds) plus the lines to log. `wait_for_slot` runs it with injected I/O (fetch, clock,
sleep, random numbers); `fetch_lock` is the real HTTP fetch (`initclient.http`: one deadline for the
whole request, so a lockd that answers a byte at a time is as unreachable as one that does not answer).

Delays:
- 423/429 (and 503 with Retry-After): sleep uniformly in [R/2, R) for Retry-After R. Never later
  than lockd asked, so a pod does not miss a freed slot; spread over half the interval so that pods
  that got the same answer at the same moment do not all come back in the same instant. With long
  polling an early re-ask costs only a parked request on lockd.
- connection errors, timeouts, other 5xx: capped exponential backoff, jittered the same way.
- every sleep and every request's deadline (connect, send, and the whole answer) is cut to what is left
  of max-wait, or of the unreachable bound while lockd cannot decide.

Max-wait is the smaller of `--max-wait` and the node policy's `maxWait` that lockd sends with a 423/429
(`"maxWait": seconds`): the first answer that carries it may lower the bound, a later one lower it
further (never raise it), with one line each time it changes.

Max-wait bounds waiting for a slot in lockd's queue. Waiting while lockd cannot decide at all (no
connection, 5xx, or 503 not ready) has a bound of its own, `--unreachable-wait` (60s by default): counted
from lockd's last queue answer (or the start), so a lockd that crash-loops or is gone costs a new pod at
most that, not its whole max-wait; a lockd that comes up within it (a booting node) still staggers the pod.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from initclient.http import HttpError, exchange
from initclient.settings import Settings
from stagger.contracts.failopen import FailOpenCause
from stagger.contracts.lock import LOCK_PATH, LockParams, LockReply, read_lock_reply
from stagger.durations import format_duration

__all__ = [
    "DeadlinePassed",
    "Decision",
    "Failure",
    "Finish",
    "Line",
    "Reply",
    "Request",
    "Sleep",
    "WaitState",
    "backoff_delay",
    "deadline_of",
    "decide",
    "fetch_lock",
    "give_up",
    "jittered",
    "max_wait",
    "parse_retry_after",
    "plan_request",
    "retry_delay",
    "start",
    "undecided_since",
    "wait_for_slot",
]

logger = logging.getLogger(__name__)

# First delay after an error; doubles per consecutive error up to settings.max_backoff.
INITIAL_BACKOFF = 0.5
# A Retry-After of 0 from a lockd that did not long-poll would otherwise make a busy loop.
MIN_RETRY_AFTER = 0.5
# Time lockd gets to answer a long poll before our HTTP timeout ends it.
ANSWER_MARGIN = 0.5
# A sleep that would leave less than this before the deadline runs to the deadline instead:
# so little time is not worth a request, and giving up earlier would not have waited max-wait.
LAST_ASK = 0.5

Level = Literal["info", "warning", "error"]
Kind = Literal["starting", "waiting", "not-ready", "unreachable", "failing"]
_TROUBLE: frozenset[Kind] = frozenset({"unreachable", "failing"})
# While lockd cannot decide on this pod, the unreachable bound runs (`--unreachable-wait`).
_UNDECIDED: frozenset[Kind] = frozenset({"starting", "not-ready", "unreachable", "failing"})


@dataclass(frozen=True)
class Request:
    params: LockParams
    connect_timeout: float  # for the connection, counted from the request's start; never over `timeout`
    timeout: float  # for the whole request: connect, send, and the whole answer


@dataclass(frozen=True)
class Reply:
    """An HTTP answer from lockd."""

    status: int
    body: LockReply
    retry_after: float | None = None  # seconds


@dataclass(frozen=True)
class Failure:
    """No HTTP answer (connection error, timeout); `error` is short, e.g. "Connection refused"."""

    error: str


Outcome = Reply | Failure


@dataclass(frozen=True)
class Line:
    level: Level
    text: str


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Finish:
    exit_code: int
    granted: bool
    release_token: str | None = None  # never logged
    # Without a grant: why the pod starts anyway, and the line that says so (its termination message).
    cause: FailOpenCause | None = None
    reason: str = ""


@dataclass(frozen=True)
class WaitState:
    started: float
    deadline: float
    kind: Kind = "starting"
    detail: str = ""  # lockd's reason, or the error, of the current state
    position: int | None = None
    failures: int = 0  # consecutive errors; drives the backoff
    last_answer: float | None = None  # when lockd last answered 423/429/503
    last_queued: float | None = None  # when lockd last answered 423/429 (it decided: wait in its queue)
    policy_max_wait: float | None = None  # lockd's node policy maxWait, once it lowered the bound


@dataclass(frozen=True)
class Decision:
    state: WaitState
    action: Sleep | Finish
    lines: tuple[Line, ...] = ()


class DeadlinePassed(BaseException):
    """Raised from a timer signal when a request outlives max-wait (a BaseException, so no library
    code swallows it)."""


# ---------------------------------------------------------------------------------------------
# the pure core


def start(*, settings: Settings, now: float) -> WaitState:
    return WaitState(started=now, deadline=now + settings.max_wait)


def undecided_since(state: WaitState) -> float:
    """Since when lockd has not decided on this pod: its last queue answer, or the start."""
    return state.last_queued if state.last_queued is not None else state.started


def deadline_of(*, settings: Settings, state: WaitState) -> float:
    """When waiting ends: max-wait's deadline, or sooner the unreachable bound while lockd cannot decide."""
    if state.kind not in _UNDECIDED:
        return state.deadline
    return min(state.deadline, undecided_since(state) + settings.unreachable_wait)


def plan_request(*, settings: Settings, state: WaitState, now: float) -> Request | None:
    """The next long poll, or None when max-wait (or the unreachable bound) is over."""
    remaining = deadline_of(settings=settings, state=state) - now
    if remaining <= 0:
        return None
    wait = max(0, min(math.floor(settings.poll_wait), math.floor(remaining - ANSWER_MARGIN)))
    timeout = min(wait + settings.request_timeout, remaining)
    params: LockParams = {"namespace": settings.namespace, "name": settings.name, "wait": str(wait)}
    if settings.uid:
        params["uid"] = settings.uid
    return Request(params=params, connect_timeout=min(settings.request_timeout, timeout), timeout=timeout)


def jittered(delay: float, *, jitter: float) -> float:
    """`delay` scaled into [delay/2, delay) by `jitter` in [0, 1)."""
    return delay * (0.5 + 0.5 * jitter)


def retry_delay(*, retry_after: float, jitter: float) -> float:
    return jittered(max(retry_after, MIN_RETRY_AFTER), jitter=jitter)


def backoff_delay(*, failures: int, max_backoff: float, jitter: float) -> float:
    """Delay after the `failures`-th consecutive error (1-based)."""
    exponent = min(max(failures - 1, 0), 32)  # 2**32 * 0.5s is past any sane cap; avoids overflow
    return jittered(min(max_backoff, INITIAL_BACKOFF * 2**exponent), jitter=jitter)


def _target(settings: Settings) -> str:
    return f"{settings.namespace}/{settings.name}"


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value < 60 else format_duration(round(value))


def _log_key(state: WaitState) -> tuple[Kind, str]:
    # Errors vary from poll to poll (refused, timed out); only lockd's reasons are worth a line each.
    return (state.kind, "" if state.kind in _TROUBLE else state.detail)


def _state_line(settings: Settings, old: WaitState, new: WaitState, *, now: float) -> Line:
    prefix = ""
    if old.kind in _TROUBLE and new.kind not in _TROUBLE:
        silent = now - (old.last_answer if old.last_answer is not None else old.started)
        prefix = f"lockd reachable again after {_seconds(silent)}; "
    bound = (
        f"{format_duration(settings.unreachable_wait)} (unreachable-wait)"
        if settings.unreachable_wait < max_wait(settings=settings, state=new)
        else "max-wait"
    )
    retrying = f"retrying with backoff (at most {_seconds(settings.max_backoff)}) for up to {bound}"
    match new.kind:
        case "waiting":
            position = f" (queue position {new.position})" if new.position is not None else ""
            verb = "still waiting" if old.kind == "waiting" else "waiting"
            text = f"{verb} for a start-up slot for {_target(settings)}: {new.detail}{position}"
        case "not-ready":
            text = f"lockd is not ready yet ({new.detail}); asking again"
        case "unreachable":
            text = f"lockd at {settings.lockd_url} unreachable ({new.detail}); {retrying}"
        case _:
            text = f"lockd at {settings.lockd_url} is failing ({new.detail}); {retrying}"
    return Line("info", prefix + text)


def max_wait(*, settings: Settings, state: WaitState) -> float:
    """The bound in force: `--max-wait`, or the node policy's `maxWait` if lockd sent a smaller one."""
    if state.policy_max_wait is None:
        return settings.max_wait
    return min(settings.max_wait, state.policy_max_wait)


def _bound_by_policy(settings: Settings, state: WaitState, body: LockReply) -> tuple[WaitState, Line | None]:
    """The state with the bound lowered to the answer's `maxWait` if that is smaller, and its line."""
    offered = body.get("maxWait")
    current = max_wait(settings=settings, state=state)
    if offered is None or offered >= current:
        return state, None
    line = Line(
        "info",
        f"max-wait lowered from {format_duration(current)} to {format_duration(offered)} "
        "by lockd's node policy (maxWait)",
    )
    return replace(state, policy_max_wait=offered, deadline=state.started + offered), line


def _fail_open(settings: Settings, why: str, *, level: Level) -> Line:
    return Line(level, f"proceeding without a start-up slot for {_target(settings)}: {why} (fail-open)")


def _proceed(state: WaitState, cause: FailOpenCause, line: Line) -> Decision:
    """Finish without a slot, saying why in the log and in the termination message."""
    return Decision(state, Finish(exit_code=0, granted=False, cause=cause, reason=line.text), (line,))


def _undecided_too_long(settings: Settings, state: WaitState, now: float) -> str | None:
    """Why the unreachable bound ended the wait, or None when it did not (max-wait did)."""
    if state.kind not in _UNDECIDED or deadline_of(settings=settings, state=state) >= state.deadline:
        return None
    silent = _seconds(now - undecided_since(state))
    bound = format_duration(settings.unreachable_wait)
    since = "since it last answered" if state.last_queued is not None else "all along"
    match state.kind:
        case "unreachable":
            what = f"could not be reached {since}: {state.detail}"
        case "failing":
            what = f"kept failing {since}: {state.detail}"
        case "not-ready":
            what = f"was not ready {since}: {state.detail}"
        case _:
            what = "never answered"
    return f"lockd at {settings.lockd_url} {what} ({silent}, unreachable-wait {bound})"


def give_up(*, settings: Settings, state: WaitState, now: float) -> Decision:
    """Max-wait (or the unreachable bound) is over: proceed without a slot, with one warning line saying
    why."""
    unreachable = _undecided_too_long(settings, state, now)
    if unreachable is not None:
        return _proceed(state, "lockdUnreachable", _fail_open(settings, unreachable, level="warning"))
    bound = format_duration(max_wait(settings=settings, state=state))
    source = " from lockd's node policy" if state.policy_max_wait is not None else ""
    waited = f"waited {_seconds(now - state.started)} (max-wait {bound}{source})"
    cause: FailOpenCause = "maxWait"
    if state.kind in _TROUBLE:
        cause = "lockdUnreachable"
        trouble = "could not be reached" if state.kind == "unreachable" else "kept failing"
        if state.last_answer is None:
            why = f"{waited}; lockd at {settings.lockd_url} {trouble} all along: {state.detail}"
        else:
            since = _seconds(now - state.last_answer)
            why = f"{waited}; lockd at {settings.lockd_url} {trouble} for the last {since}: {state.detail}"
    elif state.kind == "waiting":
        position = f", queue position {state.position}" if state.position is not None else ""
        why = f"{waited} without getting a slot; lockd's last answer: {state.detail}{position}"
    elif state.kind == "not-ready":
        cause = "lockdUnreachable"
        why = f"{waited}; lockd was still not ready: {state.detail}"
    else:
        why = f"{waited}; max-wait ran out before lockd answered"
    return _proceed(state, cause, _fail_open(settings, why, level="warning"))


def _body_text(body: LockReply) -> str:
    return body.get("reason") or body.get("error") or ""


def decide(*, settings: Settings, state: WaitState, outcome: Outcome, now: float, jitter: float) -> Decision:
    """What to do after `outcome` arrived at `now`; `jitter` is uniform in [0, 1)."""
    retry_after: float | None = None
    position: int | None = None
    bound_line: Line | None = None
    if isinstance(outcome, Failure):
        kind: Kind = "unreachable"
        detail = outcome.error
    else:
        status, body = outcome.status, outcome.body
        text = _body_text(body)
        if status == 200 and body.get("granted") is True:
            line = Line(
                "info", f"granted start-up slot for {_target(settings)} after {now - state.started:.1f}s"
            )
            token = body.get("releaseToken")
            return Decision(state, Finish(exit_code=0, granted=True, release_token=token), (line,))
        retry_after = outcome.retry_after
        if status in (423, 429):
            kind, detail, position = "waiting", text or f"HTTP {status}", body.get("position")
            state, bound_line = _bound_by_policy(settings, state, body)
        elif status == 503:
            kind, detail = "not-ready", text or "HTTP 503"
        elif 400 <= status < 500 and status != 408:
            why = (
                f"lockd rejected the request (HTTP {status}: {text or 'no reason given'}); "
                "asking again will not fix this"
            )
            return _proceed(state, "rejected", _fail_open(settings, why, level="error"))
        else:
            # Other 5xx, 408, or a 200 that is not a grant: lockd is in trouble; its hints are not trusted.
            kind, retry_after = "failing", None
            detail = "HTTP 200 without granted=true" if status == 200 else f"HTTP {status}"
            if text and status != 200:
                detail += f": {text}"
    if retry_after is not None:
        failures = 0
        delay = retry_delay(retry_after=retry_after, jitter=jitter)
    else:
        # No hint from lockd: back off, further with every consecutive answer like this.
        failures = state.failures + 1
        delay = backoff_delay(failures=failures, max_backoff=settings.max_backoff, jitter=jitter)

    new = replace(
        state,
        kind=kind,
        detail=detail,
        position=position,
        failures=failures,
        last_answer=state.last_answer if kind in _TROUBLE else now,
        last_queued=now if kind == "waiting" else state.last_queued,
    )
    bound_lines = (bound_line,) if bound_line is not None else ()
    remaining = deadline_of(settings=settings, state=new) - now
    if remaining <= 0:
        gave_up = give_up(settings=settings, state=new, now=now)
        return replace(gave_up, lines=bound_lines + gave_up.lines)
    lines = (_state_line(settings, state, new, now=now),) if _log_key(new) != _log_key(state) else ()
    return Decision(new, Sleep(remaining if remaining - delay < LAST_ASK else delay), lines + bound_lines)


def parse_retry_after(value: str | None, *, wall_now: float) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date); None when absent or bad."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        # Imported here: lockd sends seconds, and this module is most of the init container's start.
        from email.utils import parsedate_to_datetime

        try:
            seconds = parsedate_to_datetime(text).timestamp() - wall_now
        except (TypeError, ValueError):
            return None
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# ---------------------------------------------------------------------------------------------
# the shell


def fetch_lock(*, lockd_url: str, request: Request, wall_now: float, token: str | None = None) -> Outcome:
    """One GET /v1/lock, with the pod's service-account `token` when there is one, whole within
    `request.timeout`; every failure to get a whole HTTP answer becomes a `Failure`."""
    try:
        response = exchange(
            url=lockd_url,
            method="GET",
            path=LOCK_PATH,
            query={key: str(value) for key, value in request.params.items()},
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=request.timeout,
            connect_timeout=request.connect_timeout,
        )
    except HttpError as exc:  # and TimedOut: no whole answer within the deadline
        return Failure(str(exc))
    try:
        data: object = json.loads(response.body)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or nested deep
        data = None
    retry_after = parse_retry_after(response.headers.get("retry-after"), wall_now=wall_now)
    return Reply(status=response.status, body=read_lock_reply(data), retry_after=retry_after)


_LEVELS: dict[Level, int] = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def wait_for_slot(
    *,
    settings: Settings,
    fetch: Callable[[Request], Outcome],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    rng: Callable[[], float],
) -> Finish:
    """Ask lockd until granted, rejected, or max-wait is over; logs the decisions' lines."""
    state = start(settings=settings, now=clock())
    while True:
        try:
            request = plan_request(settings=settings, state=state, now=clock())
            if request is None:
                decision = give_up(settings=settings, state=state, now=clock())
            else:
                outcome = fetch(request)
                decision = decide(settings=settings, state=state, outcome=outcome, now=clock(), jitter=rng())
        except DeadlinePassed:
            decision = give_up(settings=settings, state=state, now=clock())
        for line in decision.lines:
            logger.log(_LEVELS[line.level], "%s", line.text)
        if isinstance(decision.action, Finish):
            return decision.action
        state = decision.state
        # Cut short by the deadline timer: the next plan_request sees the deadline and gives up.
        with contextlib.suppress(DeadlinePassed):
            sleep(decision.action.seconds)
