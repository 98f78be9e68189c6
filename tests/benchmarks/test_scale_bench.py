"""`python -m tests.benchmarks scale` at a small size (the emulator, the controller and this process as 20 nodes'
lockd and their kubelets): the JSON answer starts with the four figures, and its numbers are sane; the
Ready-to-grant goal is judged on the controller's own p99 (from its histogram), the end-to-end one beside it, and with
`--pin-controller` it runs the controller on that CPU and the rest on the others. Not timings: a benchmark
measures, this only checks that it measured something.

And the quantiles it reads off the controller's histogram (`histogram_quantile`, pure): Prometheus'
interpolation on hand-checked buckets, and for any histogram a value within its finite bounds that never
falls as q grows."""

from __future__ import annotations

import json
import math
import os

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.benchmarks import __main__ as bench
from tests.benchmarks.scale_bench import CONTROLLER_GRANT, histogram_quantile

FIGURES = ["controller_rss_mib", "grant_p99_ms", "admission_p99_ms", "lockd_requests_per_node_second"]
BUCKETS = {0.1: 1.0, 0.2: 3.0, 0.4: 3.0, math.inf: 4.0}


@pytest.mark.slow
def test_a_small_run_prints_the_four_figures_first_and_sane_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    cpus = sorted(os.sched_getaffinity(0))
    pin = ["--pin-controller", str(cpus[0])] if len(cpus) > 1 else []
    argv = ["scale", "--pods", "400", "--nodes", "20", "--seconds", "3", "--rate", "20", *pin]
    assert bench.main([*argv, "--admission-rate", "10", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert list(found)[:4] == FIGURES
    assert found["controller_rss_mib"] > 0
    # The goal's figure is the controller's own p99 (its histogram); the end-to-end one is beside it.
    assert found["grant_p99_ms"] == found[CONTROLLER_GRANT][1]
    assert found["grant_end_to_end_p99_ms"] >= 0
    assert found["admission_p99_ms"] >= 0
    assert found["lockd_requests_per_node_second"] > 0
    assert set(found["goals (at most)"]) == set(FIGURES)
    assert (found["pods"], found["nodes"], found["groups"]) == (400, 20, 40)
    measured, never = found["Readies measured / never answered"]
    assert measured > 0 and never <= measured
    assert sum(found["lockd requests in the window (wait, grant)"]) > 0
    assert found["admission reviews a second (asked / sent in the window and answered 200)"][1] > 0
    # Grants given: to new pods that asked, and (the hand-off) in the answers of the nodes' waits.
    assert found["events"]["grants in a wait's answer"] > 0
    # The controller timed the grants its Readies made room for, in the same window.
    assert found["grants the controller timed from a Ready (its histogram's count)"] > 0
    p50, p99 = found[CONTROLLER_GRANT]
    assert 0 < p50 <= p99
    if pin:
        assert found["CPUs (the controller / the emulator and this process)"] == [cpus[:1], cpus[1:]]
        assert os.sched_getaffinity(0) == set(cpus)  # this process's own, given back
    # The emulator and the controller are stopped.
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= before


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        pytest.param(0.25, BUCKETS, 0.1, id="rank-at-the-first-bound"),
        pytest.param(0.125, BUCKETS, 0.05, id="first-bucket-starts-at-0"),
        pytest.param(0.5, BUCKETS, 0.15, id="interpolated-inside-a-bucket"),
        pytest.param(0.75, BUCKETS, 0.2, id="empty-buckets-skipped"),
        pytest.param(0.99, BUCKETS, 0.4, id="in-inf-gives-the-highest-finite-bound"),
        pytest.param(0.5, {0.1: 0.0, math.inf: 0.0}, None, id="no-observations"),
        pytest.param(0.5, {}, None, id="no-histogram"),
    ],
)
def test_quantiles_are_interpolated_as_prometheus_does(
    q: float, buckets: dict[float, float], expected: float | None
) -> None:
    found = histogram_quantile(q, buckets)
    assert found == expected if expected is None else found == pytest.approx(expected)


@given(
    counts=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=8),
    qs=st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)),
)
def test_a_quantile_stays_within_the_bounds_and_grows_with_q(
    counts: list[int], qs: tuple[float, float]
) -> None:
    bounds = [0.001 * 2**i for i in range(len(counts))] + [math.inf]
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    buckets = dict(zip(bounds, [*cumulative, cumulative[-1] + 1], strict=True))
    low, high = sorted(qs)
    first, second = histogram_quantile(low, buckets), histogram_quantile(high, buckets)
    assert first is not None and second is not None
    assert 0 <= first <= second <= bounds[-2]
