"""The pacer arithmetic (stagger.pacers): allowance, room and the reason text of each pacer type, in
tables; properties: allowance never decreases as more pods are Ready, room is never negative and is the
allowance left, and the seed example's "4 start, then 16, then all"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger import pacers
from stagger.policy import ExponentialPacer, LinearPacer, MaxConcurrentPacer, Pacer

SEED = ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16)
LINEAR = LinearPacer(step=2, max_stagger=10)
CONCURRENT = MaxConcurrentPacer(value=3)


@pytest.mark.parametrize(
    ("pacer", "ready", "expected"),
    [
        pytest.param(SEED, 0, 4, id="exponential-min-initial"),
        pytest.param(SEED, 1, 4, id="exponential-min-initial-wins"),
        pytest.param(SEED, 2, 8, id="exponential-multiplied"),
        pytest.param(SEED, 4, 16, id="exponential-4-ready"),
        pytest.param(SEED, 15, 60, id="exponential-just-below-max-stagger"),
        pytest.param(SEED, 16, None, id="exponential-no-limit-at-max-stagger"),
        pytest.param(SEED, 100, None, id="exponential-no-limit-past-max-stagger"),
        pytest.param(ExponentialPacer(1, 1.5, 100), 3, 5, id="exponential-rounds-up"),
        pytest.param(ExponentialPacer(1, 1.1, 100), 10, 11, id="exponential-decimal-not-float"),
        pytest.param(LINEAR, 0, 2, id="linear-step"),
        pytest.param(LINEAR, 9, 11, id="linear-ready-plus-step"),
        pytest.param(LINEAR, 10, None, id="linear-no-limit-at-max-stagger"),
        pytest.param(CONCURRENT, 0, 3, id="max-concurrent"),
        pytest.param(CONCURRENT, 1000, 1003, id="max-concurrent-always"),
    ],
)
def test_allowance(pacer: Pacer, ready: int, expected: int | None) -> None:
    assert pacers.allowance(pacer, ready=ready) == expected


@pytest.mark.parametrize(
    ("pacer", "ready", "starting", "expected"),
    [
        pytest.param(SEED, 0, 0, 4, id="exponential-empty"),
        pytest.param(SEED, 0, 4, 0, id="exponential-full"),
        pytest.param(SEED, 4, 0, 12, id="exponential-after-first-wave"),
        pytest.param(SEED, 1, 5, 0, id="exponential-over-is-zero-not-negative"),
        pytest.param(SEED, 16, 50, None, id="exponential-no-limit"),
        pytest.param(LINEAR, 3, 1, 1, id="linear-one-left"),
        pytest.param(LINEAR, 3, 2, 0, id="linear-full"),
        pytest.param(LINEAR, 10, 9, None, id="linear-no-limit"),
        pytest.param(CONCURRENT, 7, 2, 1, id="max-concurrent-one-left"),
        pytest.param(CONCURRENT, 7, 4, 0, id="max-concurrent-over"),
    ],
)
def test_room(pacer: Pacer, ready: int, starting: int, expected: int | None) -> None:
    assert pacers.room(pacer, ready=ready, starting=starting) == expected


@pytest.mark.parametrize(
    ("pacer", "ready", "starting", "text"),
    [
        pytest.param(SEED, 0, 4, "4 of 4 started (exponential 4/4/16, 0 Ready)", id="exponential"),
        pytest.param(SEED, 4, 3, "7 of 16 started (exponential 4/4/16, 4 Ready)", id="exponential-second"),
        pytest.param(
            SEED, 16, 0, "no limit: 16 Ready >= maxStagger 16 (exponential 4/4/16)", id="exponential-no-limit"
        ),
        pytest.param(
            ExponentialPacer(2, 1.5, 8), 1, 0, "1 of 2 started (exponential 2/1.5/8, 1 Ready)", id="fraction"
        ),
        pytest.param(LINEAR, 3, 2, "2 of 2 starting (linear step 2 until 10 Ready, 3 Ready)", id="linear"),
        pytest.param(
            LINEAR, 12, 1, "no limit: 12 Ready >= maxStagger 10 (linear step 2)", id="linear-no-limit"
        ),
        pytest.param(CONCURRENT, 5, 3, "3 of 3 starting (maxConcurrent 3)", id="max-concurrent"),
    ],
)
def test_describe(pacer: Pacer, ready: int, starting: int, text: str) -> None:
    assert pacers.describe(pacer, ready=ready, starting=starting) == text


exponential = st.builds(
    ExponentialPacer,
    min_initial=st.integers(1, 50),
    multiplier=st.floats(1.01, 10, allow_nan=False).map(lambda m: round(m, 2)).filter(lambda m: m > 1),
    max_stagger=st.integers(1, 200),
)
linear = st.builds(LinearPacer, step=st.integers(1, 50), max_stagger=st.integers(1, 200))
concurrent = st.builds(MaxConcurrentPacer, value=st.integers(1, 50))
any_pacer = exponential | linear | concurrent
counts = st.integers(0, 500)


def _as_number(limit: int | None) -> float:
    return float("inf") if limit is None else limit


@given(any_pacer, counts, counts)
def test_allowance_never_decreases_as_more_are_ready(pacer: Pacer, a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert _as_number(pacers.allowance(pacer, ready=low)) <= _as_number(pacers.allowance(pacer, ready=high))


@given(any_pacer, counts)
def test_allowance_covers_the_ready_and_lets_one_more_start(pacer: Pacer, ready: int) -> None:
    # A group never deadlocks: whatever is Ready, at least one more pod may start.
    assert _as_number(pacers.allowance(pacer, ready=ready)) >= ready + 1


@given(any_pacer, counts, counts)
def test_room_is_never_negative_and_is_the_allowance_left(pacer: Pacer, ready: int, starting: int) -> None:
    room = pacers.room(pacer, ready=ready, starting=starting)
    limit = pacers.allowance(pacer, ready=ready)
    if limit is None:
        assert room is None
    else:
        assert room == max(0, limit - ready - starting) >= 0


@given(any_pacer, counts, counts)
def test_describe_always_names_the_numbers(pacer: Pacer, ready: int, starting: int) -> None:
    text = pacers.describe(pacer, ready=ready, starting=starting)
    assert pacers.name(pacer) in text
    assert text.startswith("no limit") == (pacers.allowance(pacer, ready=ready) is None)


def test_seed_four_start_then_sixteen_then_all() -> None:
    # Every start-up takes one step; each step as many pods start as the pacer has room for, and the
    # pods that started in the previous step are Ready by now.
    ready, waves = 0, []
    for _ in range(4):
        room = pacers.room(SEED, ready=ready, starting=0)
        waves.append(room)
        if room is None:
            break
        ready += room
    assert waves == [4, 12, None]  # 4 started, then up to 16 started, then all
    assert pacers.allowance(SEED, ready=4) == 16
