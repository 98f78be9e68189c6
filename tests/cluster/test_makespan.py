"""The ideal makespan (sim.cluster.measure.makespan): the start-up model's queue with every slot reused at once."""

from __future__ import annotations

import math

import pytest

from sim.cluster.measure.makespan import ideal_makespan
from sim.cluster.startup import ContainerSpec, ModelSettings, NodeModel, advance, start_container
from stagger.policy import ExponentialPacer


@pytest.mark.parametrize(("pods", "limit"), [(30, 4), (60, 8), (7, 2), (8, 8), (1, 4), (60, 3)])
def test_within_the_cores_each_start_takes_its_cpu_seconds(pods: int, limit: int) -> None:
    got = ideal_makespan(nodes=3, cores=8, limit=limit, pods_per_node=pods, cpu_seconds=10, penalty=0.5)
    assert got == pytest.approx(math.ceil(pods / limit) * 10)


def test_no_pods_no_time() -> None:
    assert ideal_makespan(nodes=2, cores=4, limit=2, pods_per_node=0, cpu_seconds=10, penalty=0.5) == 0


def test_above_the_cores_the_model_decides() -> None:
    # 8 at once on 4 cores: each gets 0.5 core at efficiency 1 / (1 + 0.5 * 1) = 2/3, so 1/3 CPU-second per
    # second: 3 CPU-seconds take 9 s, twice over for 16 pods.
    got = ideal_makespan(nodes=1, cores=4, limit=8, pods_per_node=16, cpu_seconds=3, penalty=0.5)
    assert got == pytest.approx(18)
    # Without a penalty, oversubscription costs nothing: the same as 4 at a time.
    assert ideal_makespan(
        nodes=1, cores=4, limit=8, pods_per_node=16, cpu_seconds=3, penalty=0
    ) == pytest.approx(ideal_makespan(nodes=1, cores=4, limit=4, pods_per_node=16, cpu_seconds=3, penalty=0))


def test_all_at_once_agrees_with_the_model() -> None:
    node = NodeModel(cores=4, settings=ModelSettings(penalty=0.5))
    for i in range(15):
        node = start_container(node, key=str(i), spec=ContainerSpec(cpu_seconds=3, liveness_seconds=None))
    node, events = advance(node, until=1000)
    last = max(e.at for e in events if e.kind == "ready")
    got = ideal_makespan(nodes=2, cores=4, limit=None, pods_per_node=15, cpu_seconds=3, penalty=0.5)
    assert got == pytest.approx(last)


def test_a_limit_above_the_pods_is_no_limit() -> None:
    a = ideal_makespan(nodes=1, cores=4, limit=100, pods_per_node=15, cpu_seconds=3, penalty=0.5)
    b = ideal_makespan(nodes=1, cores=4, limit=None, pods_per_node=15, cpu_seconds=3, penalty=0.5)
    assert a == pytest.approx(b)


def test_the_seed_pacer_adds_its_two_first_rounds() -> None:
    pacer = ExponentialPacer(min_initial=4, multiplier=4, max_stagger=16)
    # 4 start (one round), then 16 (12 more: a round), then all, 8 per node at a time.
    got = ideal_makespan(
        nodes=10, cores=8, limit=8, pods_per_node=60, cpu_seconds=10, penalty=0.5, pacer=pacer
    )
    # 16 pods done in two rounds, spread over the 10 nodes (at most 2 each): the other 584 need 58 or 59
    # per node, 8 at a time: 8 more rounds.
    assert got == pytest.approx(100)
    # One node: 4, then 8 (of the 12 allowed), then 8 with 12 Ready; 40 left once 20 are Ready: 8 rounds, as
    # without the pacer (60 / 8 leaves half a round free for the pacer's slow first one).
    one = ideal_makespan(
        nodes=1, cores=8, limit=8, pods_per_node=60, cpu_seconds=10, penalty=0.5, pacer=pacer
    )
    assert one == pytest.approx(80)
    # 64 pods: 4, 8, 8, then 44 in 6 rounds: 9 rounds where 8 would do without the pacer.
    assert ideal_makespan(
        nodes=1, cores=8, limit=8, pods_per_node=64, cpu_seconds=10, penalty=0.5, pacer=pacer
    ) == pytest.approx(90)


def test_arrivals_late_pods_start_when_they_come() -> None:
    # All at 0: the same as without arrivals.
    assert ideal_makespan(
        nodes=0,
        cores=4,
        limit=2,
        pods_per_node=0,
        cpu_seconds=10,
        penalty=0.5,
        arrivals=[[0.0] * 6, [0.0] * 6],
    ) == pytest.approx(30)
    # One node's pods come one every 20 s, two slots: each starts on arrival, the last Ready at 40 + 10.
    assert ideal_makespan(
        nodes=0, cores=4, limit=2, pods_per_node=0, cpu_seconds=10, penalty=0.5, arrivals=[[0, 20, 40]]
    ) == pytest.approx(50)
    # Four arriving at 5 on one slot: 5 + 4 * 10.
    assert ideal_makespan(
        nodes=0, cores=4, limit=1, pods_per_node=0, cpu_seconds=10, penalty=0.5, arrivals=[[5, 5, 5, 5], []]
    ) == pytest.approx(45)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ideal_makespan(nodes=0, cores=4, limit=2, pods_per_node=3, cpu_seconds=1, penalty=0.5)
    with pytest.raises(ValueError):
        ideal_makespan(nodes=1, cores=4, limit=0, pods_per_node=3, cpu_seconds=1, penalty=0.5)
