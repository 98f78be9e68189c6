"""The init client's wait loop (`wait_for_slot`) driven with a virtual clock and scripted lockd
answers: it ends, never waits past max-wait, gives up only when max-wait is (nearly) used up, logs
one warning when it gives up, and gives up when the deadline timer interrupts a request or a sleep."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from initclient.client import (
    DeadlinePassed,
    Failure,
    Finish,
    Reply,
    Request,
    wait_for_slot,
)
from initclient.settings import Settings

GRANTED = Reply(status=200, body={"granted": True})
LOCKED = Reply(status=423, body={"granted": False, "reason": "busy", "position": 1}, retry_after=1.0)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def recorded() -> Iterator[Records]:
    # A handler of our own: hypothesis examples cannot share a function-scoped caplog.
    logger = logging.getLogger("initclient.client")
    handler, old_level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


class VirtualLockd:
    """Answers from a script after a scripted latency, on a clock that only moves when waited on."""

    def __init__(self, *, settings: Settings, script: Sequence[tuple[Reply | Failure, float]]) -> None:
        self.settings = settings
        self.now = 0.0
        self.script = itertools.cycle(script)
        self.requests: list[Request] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds

    def fetch(self, request: Request) -> Reply | Failure:
        remaining = self.settings.max_wait - self.now
        assert 0 < request.connect_timeout <= request.timeout <= remaining + 1e-9
        assert 0 <= int(request.params["wait"]) <= self.settings.poll_wait
        assert int(request.params["wait"]) < request.timeout  # lockd can answer before we time out
        self.requests.append(request)
        outcome, latency = next(self.script)
        if latency >= request.timeout:
            self.now += request.timeout
            return Failure("no answer in time")
        self.now += latency
        return outcome


outcomes = st.one_of(
    st.just(LOCKED),
    st.builds(
        Reply,
        status=st.sampled_from([423, 429, 503]),
        body=st.fixed_dictionaries({"reason": st.sampled_from(["a", "b"])}),
        retry_after=st.none() | st.floats(min_value=0, max_value=300),
    ),
    st.builds(Reply, status=st.sampled_from([500, 502, 408]), body=st.just({})),
    st.builds(Failure, st.sampled_from(["Connection refused", "Connection reset by peer"])),
)
latencies = st.floats(min_value=0.0, max_value=120.0)


@settings(max_examples=150, deadline=None)
@given(
    script=st.lists(st.tuples(outcomes, latencies), min_size=1, max_size=12),
    last=st.sampled_from([None, GRANTED, Reply(status=400, body={"error": "bad"})]),
    max_wait=st.floats(min_value=0.0, max_value=90.0),
    poll_wait=st.integers(min_value=0, max_value=60),
    request_timeout=st.floats(min_value=0.01, max_value=30.0),
    max_backoff=st.floats(min_value=0.01, max_value=30.0),
    unreachable_wait=st.floats(min_value=0.01, max_value=120.0),
    jitters=st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), min_size=1, max_size=5),
)
def test_total_wait_never_exceeds_max_wait(
    script: list[tuple[Reply | Failure, float]],
    last: Reply | None,
    max_wait: float,
    poll_wait: int,
    request_timeout: float,
    max_backoff: float,
    unreachable_wait: float,
    jitters: list[float],
) -> None:
    config = Settings(
        lockd_url="http://lockd:8080",
        namespace="ns",
        name="pod",
        max_wait=max_wait,
        poll_wait=poll_wait,
        request_timeout=request_timeout,
        max_backoff=max_backoff,
        unreachable_wait=unreachable_wait,
    )
    if last is not None:
        script = [*script, (last, 0.0)]
    lockd = VirtualLockd(settings=config, script=script)
    rng = itertools.cycle(jitters)
    with recorded() as log:
        finish = wait_for_slot(
            settings=config, fetch=lockd.fetch, clock=lockd.clock, sleep=lockd.sleep, rng=lambda: next(rng)
        )
    assert lockd.now <= max_wait + 1e-9
    assert finish.exit_code == 0
    warnings = [r for r in log.records if r.levelno == logging.WARNING]
    errors = [r for r in log.records if r.levelno == logging.ERROR]
    if finish.granted:
        assert log.records[-1].getMessage().startswith("granted start-up slot for ns/pod after ")
        assert not warnings and not errors
    elif errors:
        [error] = errors
        assert error.getMessage().startswith("proceeding without a start-up slot")
        assert not warnings
    else:
        # Gave up: only once max-wait is used up, or the unreachable bound while lockd could not decide.
        [warning] = warnings
        assert lockd.now >= max_wait - 1e-9 or "unreachable-wait" in warning.getMessage()
        assert log.records[-1] is warnings[0]


SETTINGS = Settings(lockd_url="http://lockd:8080", namespace="ns", name="pod", max_wait=60.0)


def test_deadline_timer_during_a_request_gives_up_with_the_last_known_state() -> None:
    lockd = VirtualLockd(settings=SETTINGS, script=[(LOCKED, 1.0)])

    def fetch(request: Request) -> Reply | Failure:
        if lockd.requests:
            lockd.now = 61.0  # a request hung past the deadline; the timer fired
            raise DeadlinePassed()
        return lockd.fetch(request)

    with recorded() as log:
        finish = wait_for_slot(
            settings=SETTINGS, fetch=fetch, clock=lockd.clock, sleep=lockd.sleep, rng=lambda: 0.5
        )
    assert (finish.exit_code, finish.granted, finish.cause) == (0, False, "maxWait")
    assert [r.levelname for r in log.records] == ["INFO", "WARNING"]
    assert "lockd's last answer: busy" in log.records[-1].getMessage()


def test_deadline_timer_during_a_sleep_gives_up_without_asking_again() -> None:
    lockd = VirtualLockd(settings=SETTINGS, script=[(LOCKED, 1.0)])

    def sleep(seconds: float) -> None:
        lockd.now = 61.0
        raise DeadlinePassed()

    with recorded() as log:
        finish = wait_for_slot(
            settings=SETTINGS, fetch=lockd.fetch, clock=lockd.clock, sleep=sleep, rng=lambda: 0.5
        )
    assert (finish.exit_code, finish.granted, finish.cause) == (0, False, "maxWait")
    assert len(lockd.requests) == 1
    assert [r.levelname for r in log.records] == ["INFO", "WARNING"]


def test_granted_after_waiting_logs_waiting_once_then_granted() -> None:
    lockd = VirtualLockd(settings=SETTINGS, script=[(LOCKED, 0.5)] * 4 + [(GRANTED, 0.1)])
    with recorded() as log:
        finish = wait_for_slot(
            settings=SETTINGS, fetch=lockd.fetch, clock=lockd.clock, sleep=lockd.sleep, rng=lambda: 0.0
        )
    assert finish == Finish(exit_code=0, granted=True)
    assert [r.getMessage() for r in log.records] == [
        "waiting for a start-up slot for ns/pod: busy (queue position 1)",
        "granted start-up slot for ns/pod after 4.1s",  # 4 x (0.5 latency + 0.5 sleep) + 0.1
    ]
