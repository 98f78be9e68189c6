"""How `python -m tests.benchmarks buys --runs N` folds the runs of one cell into its row: medians of the times
and ratios when every run reached all Ready, "not reached" otherwise, and the worst run's safety figures;
the markdown names each run's time, and the requests by kind per pod (a column per cell)."""

from __future__ import annotations

from dataclasses import replace

from tests.benchmarks.buys_bench import Row, by_kind_per_pod, cell_medians, markdown

RUN = Row(
    config="node",
    pods=60,
    nodes=1,
    all_ready_seconds=90.0,
    ready_at_end=60,
    restarts=0,
    max_starting_per_node=8,
    api_requests=700,
    api_requests_per_pod=11.7,
    ideal_seconds=80.0,
    ratio=90.0 / 80.0,
    ideal_given_arrivals_seconds=82.0,
    ratio_given_arrivals=90.0 / 82.0,
    last_arrival_seconds=5.0,
    wall_seconds=50.0,
    cpu_seconds={},
    control_plane="real",
    time_scale=2.0,
)


def test_medians_of_a_cell_and_the_worst_safety_figures() -> None:
    runs = [
        RUN,
        replace(RUN, all_ready_seconds=100.0, ratio=1.25, restarts=2, max_starting_per_node=9),
        replace(RUN, all_ready_seconds=84.0, ratio=1.05),
        replace(RUN, config="group-lock", all_ready_seconds=120.0, ratio=1.2),
    ]
    (node, node_runs), (group, group_runs) = cell_medians(runs)
    assert (node.config, len(node_runs), group.config, len(group_runs)) == ("node", 3, "group-lock", 1)
    assert (node.all_ready_seconds, node.ratio) == (90.0, 90.0 / 80.0)
    assert (node.restarts, node.max_starting_per_node) == (2, 9)
    assert group == runs[3]  # one run: itself
    text = markdown(runs, command="python -m tests.benchmarks buys --runs 3")
    assert "| 90.0 [90.0, 100.0, 84.0] |" in text


def test_a_cell_with_a_run_that_did_not_finish_is_not_reached() -> None:
    runs = [RUN, replace(RUN, all_ready_seconds=None, ratio=None, ratio_given_arrivals=None, ready_at_end=50)]
    ((row, _),) = cell_medians(runs)
    assert (row.all_ready_seconds, row.ratio, row.ready_at_end) == (None, None, 55)
    assert "not reached (55 Ready) [90.0, (50 Ready)]" in markdown(runs, command="c")


def test_requests_by_kind_per_pod_are_the_difference_of_two_counts_and_a_table_with_medians() -> None:
    before = {"PATCH pods": 10, "POST events": 5, "GET nodes": 100}
    after = {"PATCH pods": 130, "POST events": 65, "GET nodes": 102, "POST pods": 60}
    kinds = by_kind_per_pod(before, after, pods=60)
    assert kinds == {"PATCH pods": 2.0, "POST events": 1.0, "POST pods": 1.0}  # GET nodes: 0.03 a pod
    runs = [
        replace(RUN, api_requests_by_kind=kinds),
        replace(RUN, api_requests_by_kind={**kinds, "PATCH pods": 3.0}),
        replace(RUN, api_requests_by_kind={**kinds, "PATCH pods": 2.5}),
    ]
    ((row, _),) = cell_medians(runs)
    assert row.api_requests_by_kind["PATCH pods"] == 2.5
    text = markdown(runs, command="c")
    assert "| kind | node (60) |" in text and "| PATCH pods | 2.50 |" in text
