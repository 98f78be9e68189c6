"""`python -m sim.controlplane` as a process: one ready line within 30 s and a kubeconfig that works,
SIGTERM ends it and every component (none left behind), a component that dies is named with its log and
makes it exit non-zero, and missing binaries give one clear line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.controlplane.launcher import COMPONENTS, DEFAULT_BIN_DIR, REPO_ROOT
from tests.controlplane.support import built_version, requires_binaries, wait_for
from tests.processes import clean_env

pytestmark = pytest.mark.controlplane

READY = re.compile(
    r"control plane ready: (https://127\.0\.0\.1:\d+) \(kubernetes (v[^)]+)\), kubeconfig (\S+)$"
)


def children(pid: int) -> set[int]:
    """The direct children of `pid` (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Launched:
    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.kubeconfig = tmp_path / "admin.conf"
        self.data_dir = tmp_path / "data"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sim.controlplane",
                "--kubeconfig",
                str(self.kubeconfig),
                "--data-dir",
                str(self.data_dir),
                *extra,
            ],
            cwd=REPO_ROOT,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def ready_line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until ready, or EOF if it failed
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"no ready line; exit {self.proc.wait()}: {self.proc.stderr.read()}")
        return line

    def components(self) -> dict[str, int]:
        return {
            name: pid
            for pid in children(self.proc.pid)
            for name in COMPONENTS
            if command(pid).startswith(str(DEFAULT_BIN_DIR / name) + " ")
        }

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[Launched]:
    run = Launched(tmp_path)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


@requires_binaries
def test_ready_line_then_sigterm_stops_everything(launched: Launched) -> None:
    line = launched.ready_line()
    took = time.monotonic() - launched.started
    found = READY.match(line.rstrip("\n"))
    assert found, line
    server, version, kubeconfig = found.groups()
    assert version == built_version()
    assert Path(kubeconfig) == launched.kubeconfig
    assert took < 30, f"ready after {took:.1f}s"
    assert oct(launched.kubeconfig.stat().st_mode & 0o777) == "0o600"
    assert server in launched.kubeconfig.read_text()

    pids = launched.components()
    assert sorted(pids) == sorted(COMPONENTS)
    assert all(alive(pid) for pid in pids.values())
    for name in COMPONENTS:
        assert (launched.data_dir / "logs" / f"{name}.log").stat().st_size > 0

    launched.proc.send_signal(signal.SIGTERM)
    code, out, err = launched.finish()
    assert code == 0, err
    assert out == "", "stdout has the ready line only"
    assert [p for p in pids.values() if alive(p)] == []


@requires_binaries
def test_a_component_that_dies_is_named_and_the_rest_stopped(launched: Launched) -> None:
    launched.ready_line()
    pids = launched.components()
    os.kill(pids["kube-scheduler"], signal.SIGKILL)
    code, _, err = launched.finish()
    assert code == 1
    assert "kube-scheduler was killed by SIGKILL" in err
    assert "kube-scheduler.log" in err  # and its last lines follow
    wait_for(lambda: not any(alive(p) for p in pids.values()), within=10, what="the other components to stop")


def test_missing_binaries_say_what_to_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.controlplane",
            "--kubeconfig",
            str(tmp_path / "k.conf"),
            "--bin-dir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "run `make control-plane` first" in lines[0]
    assert not (tmp_path / "k.conf").exists()
