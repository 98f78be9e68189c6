"""`python -m sim herd` and `python -m sim cluster` end to end on a tiny scenario: output, PNG, exit codes,
and nothing left running afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
import yaml

from sim.cli import cluster, herd

pytestmark = pytest.mark.e2e

TINY = {
    "name": "tiny",
    "timeScale": 10,
    "deadlineSeconds": 300,
    "nodes": {"count": 1, "cores": 2},
    "stagger": {
        "hostPort": 0,
        "policies": {"nodePolicies": [{"name": "one", "throttleConfig": {"maxConcurrent": {"value": 1}}}]},
    },
    "workloads": [
        {"kind": "Deployment", "name": "web", "replicas": 3, "cpuSeconds": 1, "livenessSeconds": 30}
    ],
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def test_herd_prints_json_and_draws_the_timeline(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    before = set(psutil.Process().children(recursive=True))  # e.g. the session's control plane
    assert herd.main(["--scenario", str(tiny), "--json", "--out", str(out), "--time-scale", "8"]) == 0
    data = json.loads(capsys.readouterr().out)
    off, on = data["runs"]
    assert (off["run"], on["run"]) == ("no stagger", "stagger")
    assert off["maxStartingPerNode"] == 3 and on["maxStartingPerNode"] == 1
    assert on["all_ready_seconds"] is not None and on["restarts"] == 0 and on["api_requests"] > 0
    assert Path(data["timelinePng"]).read_bytes()[:4] == b"\x89PNG"
    # lockd processes and init clients are gone
    assert set(psutil.Process().children(recursive=True)) <= before


def test_herd_rejects_a_bad_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"workloads": [{"kind": "Pod", "name": "x"}]}))
    assert herd.main(["--scenario", str(bad)]) == 2
    assert "workloads[0].kind" in capsys.readouterr().err


def test_cluster_command_runs_the_scenario_then_stops(
    tiny: Path, capsys: pytest.CaptureFixture[str], control_plane_kind: str
) -> None:
    real = control_plane_kind == "real"
    before = set(psutil.Process().children(recursive=True))  # e.g. the session's control plane
    # On a real control plane the controller-manager and scheduler hand the pods out in their own time.
    duration = "10" if real else "2"
    argv = ["--scenario", str(tiny), "--stagger", "--duration", duration, "--log-level", "warning"]
    assert cluster.main([*argv, "--control-plane", control_plane_kind]) == 0
    out = capsys.readouterr().out
    assert ("API server: https://127.0.0.1:" if real else "API server: http://") in out
    assert "sim-node-0  127.0.1.1  lockd http://127.0.1.1:" in out
    assert "applied the workloads of scenario 'tiny'" in out
    assert "peak containers starting at once per node: {'sim-node-0': 1}" in out
    assert set(psutil.Process().children(recursive=True)) - before == set()  # its own are gone
    assert cluster.main(["--nodes", "0"]) == 2
