"""Where lockd reads the node's load: `--proc-root` (STAGGER_PROC_ROOT, default /proc) is parsed like every
other option, and `SystemLoad` takes CPU from `<root>/stat` (through psutil) and IO pressure from
`<root>/pressure/io` there, falling back to the iowait share when that file is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from lockd import load
from lockd.settings import parse_settings

# user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
STAT = "cpu  {busy} 0 0 {idle} {iowait} 0 0 0 0 0\ncpu0 {busy} 0 0 {idle} {iowait} 0 0 0 0 0\n"
PSI = "some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=2.00 avg60=1.00 avg300=0.50 total=1\n"


@pytest.fixture
def proc_root(tmp_path: Path) -> Iterator[Path]:
    """A fake /proc with one CPU; psutil's process-wide PROCFS_PATH is put back afterwards."""
    saved = psutil.PROCFS_PATH
    (tmp_path / "stat").write_text(STAT.format(busy=100, idle=900, iowait=0))
    try:
        yield tmp_path
    finally:
        psutil.PROCFS_PATH = saved


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param([], {}, Path("/proc"), id="default"),
        pytest.param([], {"STAGGER_PROC_ROOT": "/host/proc"}, Path("/host/proc"), id="env"),
        pytest.param(
            ["--proc-root", "/mnt/proc"],
            {"STAGGER_PROC_ROOT": "/host/proc"},
            Path("/mnt/proc"),
            id="flag-wins",
        ),
    ],
)
def test_proc_root_setting(argv: list[str], environ: dict[str, str], expected: Path) -> None:
    assert parse_settings(["--standalone", *argv], environ).proc_root == expected


def test_cpu_and_io_pressure_come_from_the_proc_root(proc_root: Path) -> None:
    (proc_root / "pressure").mkdir()
    (proc_root / "pressure" / "io").write_text(PSI)
    reader = load.SystemLoad(proc_root=proc_root)
    assert str(proc_root) == psutil.PROCFS_PATH
    # 300 busy ticks out of the next 400: 75 %.
    (proc_root / "stat").write_text(STAT.format(busy=400, idle=1000, iowait=0))
    sample = reader.read()
    assert sample.cpu_percent == pytest.approx(75.0)
    assert (sample.io_percent, sample.source) == (12.5, "psutil+psi")


def test_without_pressure_io_is_the_iowait_share(proc_root: Path) -> None:
    reader = load.SystemLoad(proc_root=proc_root)
    # 100 busy, 200 idle and 100 iowait ticks: iowait is a quarter of the time.
    (proc_root / "stat").write_text(STAT.format(busy=200, idle=1100, iowait=100))
    sample = reader.read()
    assert sample.source == "psutil+iowait"
    assert sample.io_percent == pytest.approx(25.0)
    assert sample.cpu_percent == pytest.approx(25.0)
