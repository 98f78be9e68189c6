"""Node throttles as pure objects: concurrency limits, load thresholds, the token bucket, and check order."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from stagger import nodechecks, policy, throttles


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(config: policy.ThrottleConfig, *, cores: int = 4, cpu: float | None = 0.0, io: float | None = 0.0):
    clock = Clock()
    sample = throttles.LoadSample(cpu_percent=cpu, io_percent=io, source="test")
    return nodechecks.NodeChecks(
        node_policy=policy.NodePolicy(name="test", throttle=config),
        cores=cores,
        clock=clock,
        load=lambda: sample,
    ), clock


@pytest.mark.parametrize(
    ("config", "cores", "limit"),
    [
        pytest.param(policy.MaxConcurrent(value=3), 16, 3, id="value"),
        pytest.param(policy.MaxConcurrent(per_core=0.5), 4, 2, id="per-core"),
        pytest.param(policy.MaxConcurrent(per_core=0.5, value=7), 4, 7, id="value-wins"),
        pytest.param(policy.MaxConcurrent(per_core=0.3), 5, 2, id="rounds-up"),
        pytest.param(policy.MaxConcurrent(per_core=0.1), 1, 1, id="at-least-one"),
        # 0.14 * 50 is 7.000000000000001 in floats: still 7 slots, not 8.
        pytest.param(policy.MaxConcurrent(per_core=0.14), 50, 7, id="float-error-is-not-one-more"),
        pytest.param(policy.MaxConcurrent(per_core=0.56), 50, 28, id="float-error-larger"),
        pytest.param(policy.MaxConcurrent(per_core=0.35), 3, 2, id="exact-fraction-rounds-up"),
    ],
)
def test_concurrency_limit(config: policy.MaxConcurrent, cores: int, limit: int) -> None:
    throttle, _ = make(policy.ThrottleConfig(max_concurrent=config), cores=cores)
    assert throttle.limit == limit
    assert throttle.decide(in_use=limit - 1).allowed
    verdict = throttle.decide(in_use=limit)
    assert not verdict.allowed
    assert verdict.reason == f"{limit} of {limit} slots in use (maxConcurrent)"


@pytest.mark.parametrize(
    ("cpu", "io", "allowed", "reason"),
    [
        pytest.param(79.9, 0.0, True, "", id="cpu-below"),
        pytest.param(80.0, 0.0, False, "cpu 80% >= maxLoad 80%", id="cpu-at"),
        pytest.param(93.0, 0.0, False, "cpu 93% >= maxLoad 80%", id="cpu-over"),
        pytest.param(10.0, 25.0, False, "io 25% >= maxLoad 20%", id="io-over"),
        pytest.param(None, None, True, "", id="no-reading-never-holds"),
    ],
)
def test_load_thresholds(cpu: float | None, io: float | None, allowed: bool, reason: str) -> None:
    throttle, _ = make(policy.ThrottleConfig(cpu_max_load=80, io_max_load=20), cpu=cpu, io=io)
    verdict = throttle.decide(in_use=0)
    assert verdict.allowed is allowed
    assert verdict.reason.startswith(reason)


def test_concurrency_is_reported_before_load() -> None:
    config = policy.ThrottleConfig(cpu_max_load=50, max_concurrent=policy.MaxConcurrent(value=1))
    throttle, _ = make(config, cpu=99.0)
    assert throttle.decide(in_use=1).throttle == "maxConcurrent"
    assert throttle.decide(in_use=0).throttle == "cpu"


def test_rate_limit_burst_then_one_token_per_fill_seconds() -> None:
    throttle, clock = make(policy.ThrottleConfig(rate_limit=policy.RateLimit(burst=2, fill_seconds=2.0)))
    for _ in range(2):
        assert throttle.decide(in_use=0).allowed
        throttle.commit()
    verdict = throttle.decide(in_use=0)
    assert verdict.throttle == "rateLimit"
    assert verdict.retry_after == pytest.approx(2.0)
    clock.now += 1.0
    assert throttle.decide(in_use=0).retry_after == pytest.approx(1.0)
    clock.now += 1.0
    assert throttle.decide(in_use=0).allowed


@given(
    burst=st.integers(min_value=1, max_value=5),
    fill=st.floats(min_value=0.1, max_value=10.0),
    steps=st.lists(st.floats(min_value=0.0, max_value=5.0), max_size=40),
)
def test_token_bucket_never_grants_more_than_burst_plus_refill(
    burst: int, fill: float, steps: list[float]
) -> None:
    bucket = throttles.TokenBucket(burst=burst, fill_seconds=fill, now=0.0)
    now, taken = 0.0, 0
    for dt in steps:
        now += dt
        taken += bucket.take(now)
        assert 0.0 <= bucket.tokens(now) <= burst
    assert taken <= burst + now / fill + 1e-9


def test_token_bucket_ignores_a_clock_going_backwards() -> None:
    bucket = throttles.TokenBucket(burst=1, fill_seconds=10.0, now=50.0)
    assert bucket.take(50.0)
    assert not bucket.take(40.0)
    assert bucket.tokens(40.0) == 0.0


def test_carry_over_keeps_the_bucket_level_across_reloads() -> None:
    config = policy.ThrottleConfig(rate_limit=policy.RateLimit(burst=3, fill_seconds=60.0))
    old, clock = make(config)
    for _ in range(3):
        old.commit()
    sample = throttles.LoadSample(cpu_percent=0.0, io_percent=0.0, source="test")
    new = nodechecks.NodeChecks(
        node_policy=policy.NodePolicy(name="test", throttle=config), cores=4, clock=clock, load=lambda: sample
    )
    new.carry_over(old)
    assert not new.decide(in_use=0).allowed


@pytest.mark.parametrize(("seconds", "header"), [(0.0, 1), (0.2, 1), (1.0, 1), (1.01, 2), (30.0, 30)])
def test_retry_after_is_whole_seconds_never_zero(seconds: float, header: int) -> None:
    assert throttles.ceil_seconds(seconds) == header


def test_a_refunded_token_comes_back_but_never_above_burst() -> None:
    bucket = throttles.TokenBucket(burst=2, fill_seconds=10.0, now=0.0)
    assert bucket.take(0.0) and bucket.take(0.0)
    assert not bucket.take(0.0)
    bucket.give_back(0.0)
    assert bucket.take(0.0), "the token given back is there for the next grant"
    full = throttles.TokenBucket(burst=2, fill_seconds=10.0, now=0.0)
    full.give_back(0.0)
    assert full.tokens(0.0) == 2.0
