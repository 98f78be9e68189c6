"""`python -m sim realcluster` as a user runs it, twice in a row on one machine: one line on stdout once the
node is Ready, kubectl sees it, SIGTERM stops everything with exit 0 and leaves no network namespace, bridge,
mount or record of host changes behind. Runs before the session's cluster starts (the bridge is one per
machine): tests/nodes/conftest.py ORDER puts it first."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sim.realcluster.plan import BRIDGE
from tests.tools import ROOT, tool


def _leftovers(data_dir: Path) -> list[str]:
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return (
        [f"netns {name}" for name in netns if name.startswith("stgr-")]
        + ([f"bridge {BRIDGE}"] if Path("/sys/class/net", BRIDGE).exists() else [])
        + [f"mount {point}" for point in mounts if point.startswith(str(data_dir))]
        + (["host-changes.json"] if (data_dir / "host-changes.json").exists() else [])
    )


@pytest.mark.parametrize("run", [pytest.param(1, id="first"), pytest.param(2, id="again")])
def test_the_command_starts_a_node_and_sigterm_leaves_the_host_clean(run: int, tmp_path: Path) -> None:
    if Path("/sys/class/net", BRIDGE).exists():
        pytest.fail("a real cluster is running already: tests/nodes/test_cli.py must run first")
    # kubelet's sockets go under the data dir, whose path must be short (pytest's tmp_path is too long).
    kubeconfig, data_dir = tmp_path / "kc", Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    process = subprocess.Popen(
        [sys.executable, "-m", "sim", "realcluster", "--nodes", "1", "--kubeconfig", str(kubeconfig),
         "--data-dir", str(data_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("real cluster ready: 1 nodes (node-1), kubernetes v"), (
            line + process.stderr.read()
        )
        assert f"kubeconfig {kubeconfig}" in line
        nodes = subprocess.run(
            [str(tool("kubectl")), "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert nodes.split()[:2] == ["node-1", "Ready"], nodes
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
            subprocess.run(
                [sys.executable, "-m", "sim", "realcluster", "--clean", str(data_dir)], cwd=ROOT, check=False
            )
    assert not _leftovers(data_dir), _leftovers(data_dir)
    shutil.rmtree(data_dir)
