"""The init client's pure decision core: request plans, what each lockd answer leads to
(finish, or sleep how long), which state changes get a log line, and the give-up lines."""

from __future__ import annotations

from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initclient.client import (
    INITIAL_BACKOFF,
    LAST_ASK,
    MIN_RETRY_AFTER,
    Decision,
    Failure,
    Finish,
    Reply,
    Sleep,
    WaitState,
    backoff_delay,
    decide,
    give_up,
    max_wait,
    parse_retry_after,
    plan_request,
    retry_delay,
    start,
)
from initclient.settings import Settings
from stagger.contracts.failopen import FailOpenCause
from stagger.contracts.lock import LockReply, read_lock_reply

# The unreachable bound as long as max-wait: these tests are about max-wait (the bound has its own below).
SETTINGS = Settings(
    lockd_url="http://lockd:8080", namespace="ns", name="pod", uid="u-1", unreachable_wait=600.0
)
BUSY = "2 of 2 slots in use (maxConcurrent)"


def locked(reason: str = BUSY, *, position: int | None = 3, retry_after: float | None = 4.0) -> Reply:
    body: LockReply = {"granted": False, "reason": reason}
    if position is not None:
        body["position"] = position
    return Reply(status=423, body=body, retry_after=retry_after)


def assert_failed_open(decision: Decision, cause: FailOpenCause) -> None:
    """The pod starts without a slot, and its termination message will say why: the cause, and the line
    the client logs."""
    assert isinstance(decision.action, Finish)
    assert (decision.action.exit_code, decision.action.granted, decision.action.cause) == (0, False, cause)
    assert decision.action.reason == decision.lines[-1].text


def fresh() -> WaitState:
    return start(settings=SETTINGS, now=100.0)


def texts(decision: Decision) -> list[str]:
    return [line.text for line in decision.lines]


# --- plan_request ---------------------------------------------------------------------------


def test_first_request_long_polls_for_the_poll_wait() -> None:
    request = plan_request(settings=SETTINGS, state=fresh(), now=100.0)
    assert request is not None
    assert request.params == {"namespace": "ns", "name": "pod", "uid": "u-1", "wait": "30"}
    assert request.timeout == 40.0  # poll wait + request timeout
    assert request.connect_timeout == 10.0


def test_uid_is_left_out_when_not_configured() -> None:
    settings = Settings(lockd_url="http://lockd:8080", namespace="ns", name="pod")
    request = plan_request(settings=settings, state=start(settings=settings, now=0.0), now=0.0)
    assert request is not None
    assert "uid" not in request.params


@pytest.mark.parametrize(
    ("remaining", "wait", "timeout"),
    [
        pytest.param(5.7, "5", 5.7, id="poll shortened so lockd answers before the deadline"),
        pytest.param(5.2, "4", 5.2, id="lockd gets at least the answer margin"),
        pytest.param(0.9, "0", 0.9, id="no long poll at the very end"),
        pytest.param(0.01, "0", 0.01, id="a last quick ask"),
        pytest.param(41.0, "30", 40.0, id="enough time: the full poll"),
    ],
)
def test_request_near_the_deadline_is_cut_to_what_is_left(
    remaining: float, wait: str, timeout: float
) -> None:
    state = fresh()
    request = plan_request(settings=SETTINGS, state=state, now=state.deadline - remaining)
    assert request is not None
    assert request.params["wait"] == wait
    assert request.timeout == pytest.approx(timeout)
    assert request.connect_timeout <= request.timeout


@pytest.mark.parametrize("past", [pytest.param(0.0, id="at"), pytest.param(3.0, id="after")])
def test_no_request_once_the_deadline_is_reached(past: float) -> None:
    state = fresh()
    assert plan_request(settings=SETTINGS, state=state, now=state.deadline + past) is None


# --- decide: one answer each ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "kind", "seconds", "line"),
    [
        pytest.param(
            locked(),
            "waiting",
            2.0,
            f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)",
            id="423 with Retry-After",
        ),
        pytest.param(
            locked(position=None, retry_after=None),
            "waiting",
            INITIAL_BACKOFF / 2,
            f"waiting for a start-up slot for ns/pod: {BUSY}",
            id="423 without Retry-After backs off",
        ),
        pytest.param(
            Reply(status=429, body={}, retry_after=6.0),
            "waiting",
            3.0,
            "waiting for a start-up slot for ns/pod: HTTP 429",
            id="429 like 423",
        ),
        pytest.param(
            locked(retry_after=0.0),
            "waiting",
            MIN_RETRY_AFTER / 2,
            f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)",
            id="Retry-After 0 is floored",
        ),
        pytest.param(
            Reply(status=503, body={"error": "rebuilding counts"}, retry_after=2.0),
            "not-ready",
            1.0,
            "lockd is not ready yet (rebuilding counts); asking again",
            id="503 with Retry-After",
        ),
        pytest.param(
            Reply(status=503, body={}),
            "not-ready",
            INITIAL_BACKOFF / 2,
            "lockd is not ready yet (HTTP 503); asking again",
            id="503 without Retry-After backs off",
        ),
        pytest.param(
            Reply(status=500, body={"error": "boom"}, retry_after=1.0),
            "failing",
            INITIAL_BACKOFF / 2,
            "lockd at http://lockd:8080 is failing (HTTP 500: boom); "
            "retrying with backoff (at most 10.0s) for up to max-wait",
            id="500 backs off and ignores Retry-After",
        ),
        pytest.param(
            Reply(status=408, body={}),
            "failing",
            INITIAL_BACKOFF / 2,
            "lockd at http://lockd:8080 is failing (HTTP 408); "
            "retrying with backoff (at most 10.0s) for up to max-wait",
            id="408 is retried",
        ),
        pytest.param(
            Reply(status=200, body={"granted": False}),
            "failing",
            INITIAL_BACKOFF / 2,
            "lockd at http://lockd:8080 is failing (HTTP 200 without granted=true); "
            "retrying with backoff (at most 10.0s) for up to max-wait",
            id="200 without a grant is not a grant",
        ),
        pytest.param(
            Failure("Connection refused"),
            "unreachable",
            INITIAL_BACKOFF / 2,
            "lockd at http://lockd:8080 unreachable (Connection refused); "
            "retrying with backoff (at most 10.0s) for up to max-wait",
            id="connection error",
        ),
    ],
)
def test_an_answer_that_is_not_a_grant_means_sleep_and_log_the_new_state(
    outcome: Reply | Failure, kind: str, seconds: float, line: str
) -> None:
    decision = decide(settings=SETTINGS, state=fresh(), outcome=outcome, now=101.0, jitter=0.0)
    assert isinstance(decision.action, Sleep)
    assert decision.action.seconds == pytest.approx(seconds)
    assert decision.state.kind == kind
    assert texts(decision) == [line]
    assert all(entry.level == "info" for entry in decision.lines)


def test_grant_finishes_with_the_granted_line() -> None:
    outcome = Reply(status=200, body={"granted": True})
    decision = decide(settings=SETTINGS, state=fresh(), outcome=outcome, now=112.34, jitter=0.5)
    assert decision.action == Finish(exit_code=0, granted=True)
    assert texts(decision) == ["granted start-up slot for ns/pod after 12.3s"]


@pytest.mark.parametrize(
    ("status", "body", "shown"),
    [
        pytest.param(400, {"error": "wait must be 0..60"}, "HTTP 400: wait must be 0..60", id="400"),
        pytest.param(403, {"error": "pod ns/pod is not on this node"}, "HTTP 403: pod ns/pod", id="403"),
        pytest.param(404, {}, "HTTP 404: no reason given", id="404 from an older lockd"),
    ],
)
def test_a_rejection_fails_open_at_once_with_one_error_line(status: int, body: LockReply, shown: str) -> None:
    outcome = Reply(status=status, body=body, retry_after=5.0)
    decision = decide(settings=SETTINGS, state=fresh(), outcome=outcome, now=100.1, jitter=0.5)
    assert_failed_open(decision, "rejected")
    [line] = decision.lines
    assert line.level == "error"
    assert shown in line.text
    assert "will not fix" in line.text
    assert line.text.startswith("proceeding without a start-up slot for ns/pod")
    assert line.text.endswith("(fail-open)")


def test_sleep_never_reaches_past_the_deadline() -> None:
    state = fresh()
    decision = decide(
        settings=SETTINGS, state=state, outcome=locked(retry_after=3600), now=state.deadline - 2.5, jitter=0.9
    )
    assert isinstance(decision.action, Sleep)
    assert decision.action.seconds == pytest.approx(2.5)


def test_a_sleep_that_would_leave_too_little_for_a_request_runs_to_the_deadline() -> None:
    state = fresh()
    now = state.deadline - 2.0 - LAST_ASK / 2
    decision = decide(settings=SETTINGS, state=state, outcome=locked(retry_after=2.0), now=now, jitter=0.999)
    assert isinstance(decision.action, Sleep)
    assert decision.action.seconds == pytest.approx(2.0 + LAST_ASK / 2)


def test_an_answer_after_the_deadline_gives_up_with_only_the_warning() -> None:
    state = fresh()
    decision = decide(settings=SETTINGS, state=state, outcome=locked(), now=state.deadline + 0.1, jitter=0.5)
    assert_failed_open(decision, "maxWait")
    assert [line.level for line in decision.lines] == ["warning"]
    assert BUSY in decision.lines[0].text


# --- decide: sequences and state-change logging --------------------------------------------


def run(state: WaitState, outcomes: list[tuple[float, Reply | Failure]]) -> tuple[WaitState, list[str]]:
    lines: list[str] = []
    for now, outcome in outcomes:
        decision = decide(settings=SETTINGS, state=state, outcome=outcome, now=now, jitter=0.5)
        assert isinstance(decision.action, Sleep)
        state = decision.state
        lines.extend(texts(decision))
    return state, lines


def test_same_reason_with_moving_position_is_logged_once() -> None:
    _, lines = run(fresh(), [(100.0 + i, locked(position=9 - i)) for i in range(8)])
    assert lines == [f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 9)"]


def test_a_new_reason_is_logged_as_still_waiting() -> None:
    other = "cpu load 93% over 80% (cpu)"
    _, lines = run(fresh(), [(101.0, locked()), (102.0, locked()), (103.0, locked(other, position=1))])
    assert lines == [
        f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)",
        f"still waiting for a start-up slot for ns/pod: {other} (queue position 1)",
    ]


def test_changing_errors_while_unreachable_are_logged_once_then_reachable_again() -> None:
    outcomes: list[tuple[float, Reply | Failure]] = [
        (101.0, locked()),
        (102.0, Failure("Connection refused")),
        (103.0, Failure("no answer within 40.0s")),
        (104.0, Failure("Connection refused")),
        (108.0, locked()),
    ]
    _, lines = run(fresh(), outcomes)
    assert lines == [
        f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)",
        "lockd at http://lockd:8080 unreachable (Connection refused); "
        "retrying with backoff (at most 10.0s) for up to max-wait",
        f"lockd reachable again after 7.0s; waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)",
    ]


def test_backoff_doubles_per_consecutive_error_up_to_the_cap_and_resets_on_an_answer() -> None:
    state = fresh()
    sleeps: list[float] = []
    for i in range(7):
        decision = decide(settings=SETTINGS, state=state, outcome=Failure("x"), now=101.0 + i, jitter=1.0)
        assert isinstance(decision.action, Sleep)
        sleeps.append(decision.action.seconds)
        state = decision.state
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    state = decide(settings=SETTINGS, state=state, outcome=locked(), now=120.0, jitter=1.0).state
    decision = decide(settings=SETTINGS, state=state, outcome=Failure("x"), now=121.0, jitter=1.0)
    assert decision.action == Sleep(INITIAL_BACKOFF)


# --- give_up ----------------------------------------------------------------------------------


def at_deadline(
    state: WaitState, outcomes: list[tuple[float, Reply | Failure]], *, cause: FailOpenCause = "maxWait"
) -> str:
    state, _ = run(state, outcomes)
    decision = give_up(settings=SETTINGS, state=state, now=state.deadline)
    assert_failed_open(decision, cause)
    [line] = decision.lines
    assert line.level == "warning"
    assert line.text.startswith("proceeding without a start-up slot for ns/pod: waited 10m (max-wait 10m)")
    assert line.text.endswith("(fail-open)")
    return line.text


@pytest.mark.parametrize(
    ("outcomes", "says", "cause"),
    [
        pytest.param([], "max-wait ran out before lockd answered", "maxWait", id="no answer yet"),
        pytest.param(
            [(101.0, locked(position=2))],
            f"without getting a slot; lockd's last answer: {BUSY}, queue position 2",
            "maxWait",
            id="waiting",
        ),
        pytest.param(
            [(101.0, Reply(status=503, body={"error": "syncing pods"}, retry_after=1))],
            "lockd was still not ready: syncing pods",
            "lockdUnreachable",
            id="not ready",
        ),
        pytest.param(
            [(101.0, Failure("Connection refused"))],
            "lockd at http://lockd:8080 could not be reached all along: Connection refused",
            "lockdUnreachable",
            id="unreachable from the start",
        ),
        pytest.param(
            [(400.0, locked()), (650.0, Failure("no answer within 40.0s"))],
            "lockd at http://lockd:8080 could not be reached for the last 5m: no answer within 40.0s",
            "lockdUnreachable",
            id="unreachable since the last answer",
        ),
        pytest.param(
            [(101.0, Reply(status=502, body={}))],
            "lockd at http://lockd:8080 kept failing all along: HTTP 502",
            "lockdUnreachable",
            id="failing",
        ),
    ],
)
def test_give_up_line_says_why(
    outcomes: list[tuple[float, Reply | Failure]], says: str, cause: FailOpenCause
) -> None:
    assert says in at_deadline(fresh(), outcomes, cause=cause)


# --- the node policy's maxWait ----------------------------------------------------------------


def bounded(max_wait: float | None, *, reason: str = BUSY, status: int = 423) -> Reply:
    body: LockReply = {"granted": False, "reason": reason, "position": 1}
    if max_wait is not None:
        body["maxWait"] = max_wait
    return Reply(status=status, body=body, retry_after=4.0)


def test_a_smaller_policy_max_wait_lowers_the_bound_with_one_line() -> None:
    state = fresh()  # started at 100, --max-wait 10m
    decision = decide(settings=SETTINGS, state=state, outcome=bounded(120.0), now=101.0, jitter=0.5)
    assert decision.state.deadline == 220.0
    assert max_wait(settings=SETTINGS, state=decision.state) == 120.0
    assert texts(decision) == [
        f"waiting for a start-up slot for ns/pod: {BUSY} (queue position 1)",
        "max-wait lowered from 10m to 2m by lockd's node policy (maxWait)",
    ]
    # The request plan follows the new bound.
    request = plan_request(settings=SETTINGS, state=decision.state, now=215.0)
    assert request is not None and request.timeout == pytest.approx(5.0)
    assert plan_request(settings=SETTINGS, state=decision.state, now=220.0) is None


def test_later_answers_may_lower_the_bound_but_never_raise_it() -> None:
    state = fresh()
    lines: list[str] = []
    for now, limit in [(101.0, 300.0), (102.0, 300.0), (103.0, None), (104.0, 900.0), (105.0, 60.0)]:
        decision = decide(settings=SETTINGS, state=state, outcome=bounded(limit), now=now, jitter=0.5)
        state = decision.state
        lines.extend(texts(decision)[1:] if now == 101.0 else texts(decision))
    assert lines == [
        "max-wait lowered from 10m to 5m by lockd's node policy (maxWait)",
        "max-wait lowered from 5m to 1m by lockd's node policy (maxWait)",
    ]
    assert state.deadline == 160.0
    decision = give_up(settings=SETTINGS, state=state, now=160.0)
    [line] = texts(decision)
    assert line.startswith(
        "proceeding without a start-up slot for ns/pod: waited 1m (max-wait 1m from lockd's node policy) "
        "without getting a slot"
    )


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(bounded(600.0), id="equal to --max-wait"),
        pytest.param(bounded(3600.0), id="larger than --max-wait"),
        pytest.param(bounded(60.0, status=503), id="on a 503"),
        pytest.param(bounded(60.0, status=500), id="on a 500 (hints of a failing lockd are not trusted)"),
    ],
)
def test_max_wait_that_does_not_lower_the_bound_changes_nothing(outcome: Reply) -> None:
    state = fresh()
    decision = decide(settings=SETTINGS, state=state, outcome=outcome, now=101.0, jitter=0.5)
    assert decision.state.deadline == state.deadline
    assert decision.state.policy_max_wait is None
    assert not [text for text in texts(decision) if "max-wait lowered" in text]


def test_a_policy_max_wait_already_used_up_gives_up_at_once() -> None:
    state = fresh()
    decision = decide(settings=SETTINGS, state=state, outcome=bounded(30.0), now=145.0, jitter=0.5)
    assert_failed_open(decision, "maxWait")
    assert [line.level for line in decision.lines] == ["info", "warning"]
    assert texts(decision)[0] == "max-wait lowered from 10m to 30s by lockd's node policy (maxWait)"
    assert "waited 45.0s (max-wait 30s from lockd's node policy)" in texts(decision)[1]


# --- wire parsing -----------------------------------------------------------------------------

WALL_NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("5", 5.0, id="delta seconds"),
        pytest.param(" 1.5 ", 1.5, id="fraction with spaces"),
        pytest.param("0", 0.0, id="zero"),
        pytest.param(formatdate(WALL_NOW + 10, usegmt=True), 10.0, id="HTTP-date ahead"),
        pytest.param(formatdate(WALL_NOW - 10, usegmt=True), 0.0, id="HTTP-date passed"),
        pytest.param(None, None, id="absent"),
        pytest.param("-3", None, id="negative"),
        pytest.param("soon", None, id="garbage"),
        pytest.param("inf", None, id="infinite"),
        pytest.param("nan", None, id="nan"),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, wall_now=WALL_NOW) == seconds


@pytest.mark.parametrize(
    ("data", "reply"),
    [
        pytest.param(
            {"granted": False, "reason": "busy", "position": 3, "extra": 1},
            {"granted": False, "reason": "busy", "position": 3},
            id="423 body",
        ),
        pytest.param({"error": "bad wait"}, {"error": "bad wait"}, id="error body"),
        pytest.param(
            {"granted": "yes", "reason": 5, "position": True, "error": None}, {}, id="wrong types dropped"
        ),
        pytest.param({"granted": False, "maxWait": 120}, {"granted": False, "maxWait": 120.0}, id="maxWait"),
        pytest.param({"maxWait": 0.5}, {"maxWait": 0.5}, id="maxWait fraction"),
        pytest.param({"maxWait": True}, {}, id="maxWait bool"),
        pytest.param({"maxWait": "10m"}, {}, id="maxWait text"),
        pytest.param({"maxWait": -1}, {}, id="maxWait negative"),
        pytest.param({"maxWait": float("inf")}, {}, id="maxWait infinite"),
        pytest.param(["granted"], {}, id="not an object"),
        pytest.param(None, {}, id="not JSON"),
    ],
)
def test_lock_reply_keeps_only_well_typed_fields(data: object, reply: LockReply) -> None:
    assert read_lock_reply(data) == reply


# --- invariants -------------------------------------------------------------------------------

jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)


@given(retry_after=st.floats(min_value=0.0, max_value=1e6), jitter=jitters)
def test_retry_delay_is_jittered_into_the_upper_half_of_retry_after(
    retry_after: float, jitter: float
) -> None:
    asked = max(retry_after, MIN_RETRY_AFTER)
    assert asked / 2 <= retry_delay(retry_after=retry_after, jitter=jitter) <= asked


@given(
    failures=st.integers(min_value=1, max_value=10_000),
    max_backoff=st.floats(min_value=0.001, max_value=3600.0),
    jitter=jitters,
)
def test_backoff_delay_is_jittered_and_capped(failures: int, max_backoff: float, jitter: float) -> None:
    full = min(max_backoff, INITIAL_BACKOFF * 2 ** min(failures - 1, 40))
    delay = backoff_delay(failures=failures, max_backoff=max_backoff, jitter=jitter)
    assert full / 2 <= delay <= full <= max_backoff


@given(
    retry_after=st.floats(min_value=0.0, max_value=1e5),
    jitter=jitters,
    elapsed=st.floats(min_value=0.0, max_value=700.0),
)
def test_decided_sleep_is_within_jitter_bounds_and_never_past_the_deadline(
    retry_after: float, jitter: float, elapsed: float
) -> None:
    state = fresh()
    now = state.started + elapsed
    decision = decide(
        settings=SETTINGS, state=state, outcome=locked(retry_after=retry_after), now=now, jitter=jitter
    )
    if now >= state.deadline:
        assert_failed_open(decision, "maxWait")
        return
    assert isinstance(decision.action, Sleep)
    asked, remaining, seconds = (
        max(retry_after, MIN_RETRY_AFTER),
        state.deadline - now,
        decision.action.seconds,
    )
    if seconds != remaining:
        assert asked / 2 <= seconds <= asked
        assert remaining - seconds >= LAST_ASK
    else:
        assert remaining < asked + LAST_ASK
