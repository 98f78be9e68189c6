"""`python -m tests.benchmarks morning`'s herd and table, without running it: buys' scenario made into many
Deployments on the nodes asked, the node limit's ideal for them, and a configuration that did not reach
all Ready shown as how many were Ready at the deadline."""

from __future__ import annotations

from dataclasses import replace

from tests.benchmarks.buys_bench import Knobs
from tests.benchmarks.morning_bench import Shape, at_zero, ideal, markdown, scenario
from tests.benchmarks.test_buys_medians import RUN as BUYS_RUN

SHAPE = Shape(deployments=40, replicas=25, nodes=20)

# buys' own test row, as a morning run of 1,000 pods on 20 nodes on the emulator.
RUN = replace(
    BUYS_RUN,
    pods=1000,
    nodes=20,
    ready_at_end=1000,
    api_requests=10000,
    api_requests_per_pod=10.0,
    ideal_seconds=70.0,
    ratio=90.0 / 70.0,
    ideal_given_arrivals_seconds=75.0,
    ratio_given_arrivals=90.0 / 75.0,
    wall_seconds=60.0,
    control_plane="emulator",
)


def test_forty_deployments_of_25_on_20_nodes_with_buys_pods() -> None:
    scen = scenario("fixed", shape=SHAPE, knobs=Knobs())
    assert scen.nodes.count == 20
    assert len(scen.workloads) == 40
    assert {w.replicas for w in scen.workloads} == {25}
    assert len({w.name for w in scen.workloads}) == 40
    assert "minHold" in scen.stagger.policies  # buys' fixed-time lock
    assert {w.replicas for w in at_zero(scen).workloads} == {0}
    assert ideal(shape=SHAPE) == 70.0  # ceil(50 / 8) rounds of 10 s on every node


def test_a_configuration_not_all_ready_shows_how_many_were_by_the_deadline() -> None:
    rows = [RUN, replace(RUN, config="none", all_ready_seconds=None, ratio=None, ready_at_end=612)]
    text = markdown(rows, command="c", shape=SHAPE, knobs=Knobs(deadline_seconds=600.0))
    assert "| none | 612 of 1000 by 600 s |" in text
    assert "| node | 90.0 | 70.0 | 1.286 |" in text
