"""The start-up CPU contention model: rates, readiness, liveness kills, back-off and its invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.startup import (
    LIVENESS_EXIT_CODE,
    ContainerSpec,
    ModelSettings,
    NodeModel,
    advance,
    backoff_delay,
    cpu_busy_percent,
    next_event_at,
    per_container_rate,
    remove_container,
    start_container,
    starting_count,
)

NO_JITTER = ModelSettings(backoff_jitter=0.0)


@pytest.mark.parametrize(
    ("starting", "cores", "penalty", "expected"),
    [
        pytest.param(1, 4, 0.5, 1.0, id="alone-full-core"),
        pytest.param(4, 4, 0.5, 1.0, id="exactly-cores"),
        pytest.param(8, 4, 0.5, 0.5 / 1.5, id="twice-oversubscribed"),
        pytest.param(8, 4, 0.0, 0.5, id="no-penalty-fair-share"),
        pytest.param(0, 4, 0.5, 0.0, id="nobody-starting"),
    ],
)
def test_per_container_rate(starting: int, cores: float, penalty: float, expected: float) -> None:
    assert per_container_rate(starting=starting, cores=cores, penalty=penalty) == pytest.approx(expected)


@given(
    starting=st.integers(min_value=1, max_value=500),
    cores=st.floats(min_value=0.25, max_value=128),
    penalty=st.floats(min_value=0, max_value=10),
)
def test_never_more_cpu_than_cores_and_never_more_than_one_core_each(
    starting: int, cores: float, penalty: float
) -> None:
    rate = per_container_rate(starting=starting, cores=cores, penalty=penalty)
    assert 0 < rate <= 1.0
    assert starting * rate <= cores * (1 + 1e-12)


def test_a_lone_container_is_ready_after_its_cpu_seconds() -> None:
    node = start_container(
        NodeModel(cores=2), key="a", spec=ContainerSpec(cpu_seconds=3, liveness_seconds=20)
    )
    assert next_event_at(node) == pytest.approx(3.0)
    node, events = advance(node, until=10)
    assert [(e.kind, round(e.at, 9)) for e in events] == [("ready", 3.0)]
    assert node.containers["a"].phase == "running"
    assert node.now == 10


def test_rates_change_when_a_container_finishes() -> None:
    # Two on one core: each at 0.5/s. A (1 cpu-s) is ready at 2 s; B then runs alone: 2 - 1 = 1 left -> 3 s.
    node = NodeModel(cores=1, settings=ModelSettings(penalty=0.0))
    node = start_container(node, key="a", spec=ContainerSpec(cpu_seconds=1, liveness_seconds=None))
    node = start_container(node, key="b", spec=ContainerSpec(cpu_seconds=2, liveness_seconds=None))
    node, events = advance(node, until=100)
    assert [(e.key, round(e.at, 9)) for e in events] == [("a", 2.0), ("b", 3.0)]


def test_liveness_kills_restarts_after_backoff_and_loses_work() -> None:
    spec = ContainerSpec(cpu_seconds=3, liveness_seconds=5)
    node = NodeModel(cores=1, settings=NO_JITTER)
    for key in ("a", "b", "c"):  # 1/3 core each, halved by the penalty: 0.83 of 3 cpu-s in 5 s
        node = start_container(node, key=key, spec=spec)
    node, events = advance(node, until=5)
    assert sorted(e.kind for e in events) == ["killed"] * 3
    state = node.containers["a"]
    assert state.phase == "backoff"
    assert state.restarts == 1
    assert state.work_done == 0
    assert state.last_termination is not None
    assert state.last_termination.exit_code == LIVENESS_EXIT_CODE
    assert state.last_termination.reason == "Error"
    assert state.backoff_until == pytest.approx(5 + 10)
    node, events = advance(node, until=15)
    assert sorted(e.kind for e in events) == ["restarted"] * 3
    assert node.containers["a"].started_at == pytest.approx(15)


def test_restart_policy_never_fails_for_good() -> None:
    spec = ContainerSpec(cpu_seconds=10, liveness_seconds=2, restart_policy="Never")
    node = start_container(NodeModel(cores=1), key="a", spec=spec)
    node, events = advance(node, until=100)
    assert [e.kind for e in events] == ["killed"]
    assert node.containers["a"].phase == "failed"
    assert next_event_at(node) is None


def test_job_container_exits_zero_after_its_run_time() -> None:
    spec = ContainerSpec(cpu_seconds=1, liveness_seconds=None, run_seconds=4, restart_policy="Never")
    node = start_container(NodeModel(cores=1), key="a", spec=spec)
    node, events = advance(node, until=100)
    assert [(e.kind, round(e.at, 9), e.exit_code) for e in events] == [
        ("ready", 1.0, None),
        ("exited", 5.0, 0),
    ]
    assert node.containers["a"].phase == "succeeded"


def test_backoff_doubles_and_is_capped() -> None:
    delays = [backoff_delay(restarts=r, settings=NO_JITTER) for r in range(1, 10)]
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300, 300]
    jittered = backoff_delay(restarts=3, settings=ModelSettings(backoff_jitter=0.25), key="x")
    assert 40 <= jittered <= 50


def test_busy_percent_and_removal() -> None:
    node = NodeModel(cores=4)
    for key in "abcdef":
        node = start_container(node, key=key, spec=ContainerSpec())
    assert cpu_busy_percent(node) == 100.0
    node = remove_container(node, key="a")
    node = remove_container(node, key="b")
    node = remove_container(node, key="unknown")
    assert starting_count(node) == 4
    assert cpu_busy_percent(node) == 100.0
    node = remove_container(node, key="c")
    assert cpu_busy_percent(node) == 75.0
    assert node.peak_starting == 6


def test_cannot_go_back_in_time_or_start_twice() -> None:
    node, _ = advance(NodeModel(cores=1), until=5)
    with pytest.raises(ValueError, match="back in time"):
        advance(node, until=1)
    node = start_container(node, key="a", spec=ContainerSpec())
    with pytest.raises(ValueError, match="already"):
        start_container(node, key="a", spec=ContainerSpec())


def simulate_burst(
    *, count: int, cores: float, spec: ContainerSpec, settings: ModelSettings, deadline: float
) -> tuple[float | None, int]:
    """Start ``count`` identical containers at once on one node; returns (time all Ready, restarts).

    The time is None when they are not all Ready by ``deadline``. A quick what-if for scenarios.
    """
    node = NodeModel(cores=cores, settings=settings)
    for i in range(count):
        node = start_container(node, key=f"c{i}", spec=spec)
    while True:
        t = next_event_at(node)
        if t is None or t > deadline:
            return None, sum(c.restarts for c in node.containers.values())
        node, _ = advance(node, until=t)
        if all(c.phase == "running" for c in node.containers.values()):
            return node.now, sum(c.restarts for c in node.containers.values())


def test_the_herd_storms_without_stagger_and_not_with_two_at_a_time() -> None:
    spec = ContainerSpec(cpu_seconds=3, liveness_seconds=20)
    herd = simulate_burst(count=15, cores=4, spec=spec, settings=ModelSettings(), deadline=3000)
    pair = simulate_burst(count=2, cores=4, spec=spec, settings=ModelSettings(), deadline=3000)
    assert herd[0] is not None and herd[1] >= 15  # everyone restarts at least once
    assert pair[0] is not None and round(pair[0], 9) == 3.0
    assert pair[1] == 0


keys = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
specs = st.builds(
    ContainerSpec,
    cpu_seconds=st.floats(min_value=0, max_value=20),
    liveness_seconds=st.one_of(st.none(), st.floats(min_value=0.5, max_value=30)),
    run_seconds=st.one_of(st.none(), st.floats(min_value=0, max_value=10)),
    restart_policy=st.sampled_from(["Always", "OnFailure", "Never"]),
)


@settings(max_examples=60, deadline=None)
@given(
    cores=st.floats(min_value=0.5, max_value=16),
    starts=st.lists(st.tuples(keys, specs, st.floats(min_value=0, max_value=30)), max_size=12),
    steps=st.lists(st.floats(min_value=0, max_value=15), min_size=1, max_size=8),
)
def test_invariants_over_random_histories(
    cores: float, starts: list[tuple[str, ContainerSpec, float]], steps: list[float]
) -> None:
    node = NodeModel(cores=cores)
    pending = sorted(starts, key=lambda s: s[2])
    t = 0.0
    for step in steps:
        t += step
        while pending and pending[0][2] <= t:
            key, spec, at = pending.pop(0)
            node, _ = advance(node, until=max(node.now, at))
            if key not in node.containers:
                node = start_container(node, key=key, spec=spec)
        before = node.now
        node, events = advance(node, until=t)
        assert [e.at for e in events] == sorted(e.at for e in events)
        assert all(before - 1e-9 <= e.at <= t + 1e-9 for e in events)
        for c in node.containers.values():
            assert 0 <= c.work_done <= c.spec.cpu_seconds + 1e-9
            if c.phase == "starting" and c.spec.liveness_seconds is not None:
                assert node.now - c.started_at <= c.spec.liveness_seconds + 1e-6
        n = starting_count(node)
        assert n * per_container_rate(starting=n, cores=cores, penalty=node.settings.penalty) <= cores + 1e-9
        assert node.peak_starting >= n
        nxt = next_event_at(node)
        assert nxt is None or nxt >= node.now - 1e-9 or math.isclose(nxt, node.now)
