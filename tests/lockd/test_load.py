"""Where lockd reads the node's load: `--proc-root` (STAGGER_PROC_ROOT, default /proc) is parsed like every
other option, and `SystemLoad` takes CPU from `<root>/stat` and IO pressure from `<root>/pressure/io` there,
falling back to the iowait share when that file is missing; the /proc/stat arithmetic (`parse_proc_stat`,
`cpu_shares`) on its own, against the machine's real /proc/stat too."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockd import load
from lockd.settings import parse_settings

# user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
STAT = "cpu  {busy} 0 0 {idle} {iowait} 0 0 0 0 0\ncpu0 {busy} 0 0 {idle} {iowait} 0 0 0 0 0\n"
PSI = "some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=2.00 avg60=1.00 avg300=0.50 total=1\n"


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    """A fake /proc with one CPU."""
    (tmp_path / "stat").write_text(STAT.format(busy=100, idle=900, iowait=0))
    return tmp_path


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
    assert parse_settings(["--standalone", *argv], environ).node.proc_root == expected


def test_cpu_and_io_pressure_come_from_the_proc_root(proc_root: Path) -> None:
    (proc_root / "pressure").mkdir()
    (proc_root / "pressure" / "io").write_text(PSI)
    reader = load.SystemLoad(proc_root=proc_root)
    # 300 busy ticks out of the next 400: 75 %.
    (proc_root / "stat").write_text(STAT.format(busy=400, idle=1000, iowait=0))
    sample = reader.read()
    assert sample.cpu_percent == pytest.approx(75.0)
    assert (sample.io_percent, sample.source) == (12.5, "stat+psi")


def test_without_pressure_io_is_the_iowait_share(proc_root: Path) -> None:
    reader = load.SystemLoad(proc_root=proc_root)
    # 100 busy, 200 idle and 100 iowait ticks: iowait is a quarter of the time.
    (proc_root / "stat").write_text(STAT.format(busy=200, idle=1100, iowait=100))
    sample = reader.read()
    assert sample.source == "stat+iowait"
    assert sample.io_percent == pytest.approx(25.0)
    assert sample.cpu_percent == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "cpu  10 2 3 100 7 1 1 1 5 1\ncpu0 10 2 3 100 7 1 1 1 5 1\n",
            load.CpuTimes(total=125, idle=100, iowait=7),
            id="guest-left-out",
        ),
        pytest.param("cpu  1 2 3 4\n", load.CpuTimes(total=10, idle=4, iowait=None), id="no-iowait"),
        pytest.param("intr 1 2\ncpu  1 0 0 9 0\n", load.CpuTimes(total=10, idle=9, iowait=0), id="not-first"),
        pytest.param("cpu0 1 2 3 4 5\n", None, id="no-total-line"),
        pytest.param("cpu  1 2 x 4 5\n", None, id="not-a-number"),
        pytest.param("cpu  1 2 3\n", None, id="too-short"),
        pytest.param("", None, id="empty"),
    ],
)
def test_parse_proc_stat(text: str, expected: load.CpuTimes | None) -> None:
    assert load.parse_proc_stat(text) == expected


def test_no_tick_between_readings_keeps_the_last_share(proc_root: Path) -> None:
    reader = load.SystemLoad(proc_root=proc_root)
    (proc_root / "stat").write_text(STAT.format(busy=200, idle=1000, iowait=0))
    assert reader.read().cpu_percent == pytest.approx(50.0)
    assert reader.read().cpu_percent == pytest.approx(50.0)  # the same counters: nothing new to say


def test_unreadable_stat_is_unknown_load_and_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lockd.load")
    reader = load.SystemLoad(proc_root=tmp_path)  # no stat file at all
    first, second = reader.read(), reader.read()
    assert (first.cpu_percent, second.cpu_percent) == (None, None)
    assert len([r for r in caplog.records if "CPU times" in r.getMessage()]) == 1


def test_the_real_proc_stat_gives_a_share() -> None:
    times = load.parse_proc_stat(Path("/proc/stat").read_text())
    assert times is not None and times.total > 0
    later = load.CpuTimes(total=times.total + 100, idle=times.idle + 40, iowait=times.iowait)
    assert load.cpu_shares(times, later) == (pytest.approx(60.0), 0.0 if times.iowait is not None else None)


ticks = st.integers(min_value=0, max_value=10**12)


@given(user=ticks, idle=ticks, iowait=ticks, d_user=ticks, d_idle=ticks, d_iowait=ticks)
def test_shares_are_percentages(
    user: int, idle: int, iowait: int, d_user: int, d_idle: int, d_iowait: int
) -> None:
    before = load.CpuTimes(total=user + idle + iowait, idle=idle, iowait=iowait)
    after = load.CpuTimes(
        total=before.total + d_user + d_idle + d_iowait, idle=idle + d_idle, iowait=iowait + d_iowait
    )
    shares = load.cpu_shares(before, after)
    if d_user + d_idle + d_iowait == 0:
        assert shares is None
        return
    assert shares is not None
    busy, io = shares
    assert io is not None
    assert 0.0 <= busy <= 100.0 and 0.0 <= io <= 100.0
    assert busy + io <= 100.0 + 1e-9
    assert busy == pytest.approx(100.0 * d_user / (d_user + d_idle + d_iowait))
