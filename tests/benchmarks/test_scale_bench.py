"""`python -m tests.benchmarks scale` at a small size (the emulator, the controller and this process as 20 nodes'
lockd and their kubelets): the JSON answer starts with the four figures, and its numbers are sane. Not
timings: a benchmark measures, this only checks that it measured something."""

from __future__ import annotations

import json

import psutil
import pytest

from tests.benchmarks import __main__ as bench

pytestmark = pytest.mark.slow

FIGURES = ["controller_rss_mib", "grant_p99_ms", "admission_p99_ms", "lockd_requests_per_node_second"]


def test_a_small_run_prints_the_four_figures_first_and_sane_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    argv = ["scale", "--pods", "400", "--nodes", "20", "--seconds", "3", "--rate", "20"]
    assert bench.main([*argv, "--admission-rate", "10", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert list(found)[:4] == FIGURES
    assert found["controller_rss_mib"] > 0
    assert found["grant_p99_ms"] >= 0
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
    # The emulator and the controller are stopped.
    assert {child.pid for child in psutil.Process().children(recursive=True)} <= before
