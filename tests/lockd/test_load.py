"""Where lockd reads the node's load: `--proc-root` (STAGGER_PROC_ROOT, default /proc) is parsed like every
other option, and `SystemLoad` takes CPU from `<root>/stat` and IO pressure from `<root>/pressure/io` there,
falling back to the iowait share when that file is missing, and the 1-minute load average from
`<root>/loadavg` every 5 s; the /proc/stat arithmetic (`parse_proc_stat`, `cpu_shares`) on its own, against
the machine's real /proc/stat too; and the load file (`FileLoad`) with and without its `load1`."""

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


# --- the 1-minute load average (loadAvg) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0.52 0.58 0.59 1/389 12345\n", 0.52, id="first-field"),
        pytest.param("12.00 8.00 4.00 9/1024 77\n", 12.0, id="busy"),
        pytest.param("0.00 0.00 0.00 1/50 1\n", 0.0, id="idle"),
        pytest.param("", None, id="empty"),
        pytest.param("busy 0.5 0.5\n", None, id="not-a-number"),
        pytest.param("nan 1 1 1/1 1\n", None, id="nan"),
        pytest.param("-1.0 1 1 1/1 1\n", None, id="negative"),
    ],
)
def test_parse_loadavg(text: str, expected: float | None) -> None:
    assert load.parse_loadavg(text) == expected


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_load_average_comes_from_loadavg_under_the_proc_root_every_five_seconds(proc_root: Path) -> None:
    (proc_root / "loadavg").write_text("1.60 1.20 0.90 2/300 4242\n")
    clock = Clock()
    reader = load.SystemLoad(proc_root=proc_root, clock=clock)
    first = reader.read()
    assert (first.load1, first.load1_taken_at, first.taken_at) == (1.6, 1000.0, 1000.0)
    # The kernel recomputes it every 5 s: a sample in between carries the same reading, at its old time,
    # so the load a loadAvg throttle assumes for the grants since lasts until a fresh one.
    (proc_root / "loadavg").write_text("3.10 1.30 0.90 2/300 4242\n")
    clock.now += 1.0
    second = reader.read()
    assert (second.load1, second.load1_taken_at, second.taken_at) == (1.6, 1000.0, 1001.0)
    clock.now += 4.0
    third = reader.read()
    assert (third.load1, third.load1_taken_at) == (3.1, 1005.0)


def test_an_unreadable_loadavg_is_unknown_and_warned_once(
    proc_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="lockd.load")
    clock = Clock()
    reader = load.SystemLoad(proc_root=proc_root, clock=clock)  # the fake /proc has no loadavg
    first = reader.read()
    clock.now += 5.0
    second = reader.read()
    assert (first.load1, second.load1) == (None, None)
    assert len([r for r in caplog.records if "load average" in r.getMessage()]) == 1
    (proc_root / "loadavg").write_text("0.25 0.20 0.10 1/90 7\n")
    clock.now += 5.0
    assert reader.read().load1 == 0.25


def test_the_real_proc_loadavg_is_a_load_average() -> None:
    assert load.parse_loadavg(Path("/proc/loadavg").read_text()) is not None


@pytest.mark.parametrize(
    ("text", "cpu", "io", "load1"),
    [
        pytest.param('{"cpuPercent": 40.0, "ioPercent": 5.0}', 40.0, 5.0, None, id="the-older-format"),
        pytest.param('{"cpuPercent": 40, "ioPercent": 5, "load1": 1.5}', 40.0, 5.0, 1.5, id="with-load1"),
        pytest.param('{"load1": 2}', None, None, 2.0, id="load1-alone"),
        pytest.param('{"cpuPercent": 40, "load1": null}', 40.0, None, None, id="null-is-unknown"),
        pytest.param(
            '{"cpuPercent": 40, "load1": -2}', None, None, None, id="a-negative-load1-is-no-reading"
        ),
        pytest.param('{"cpuPercent": 40, "load1": "high"}', None, None, None, id="a-word-is-no-reading"),
    ],
)
def test_the_load_file_may_carry_the_load_average(
    tmp_path: Path, text: str, cpu: float | None, io: float | None, load1: float | None
) -> None:
    path = tmp_path / "load.json"
    path.write_text(text)
    clock = Clock()
    reader = load.FileLoad(path=path, clock=clock)
    sample = reader.read()
    assert (sample.cpu_percent, sample.io_percent, sample.load1) == (cpu, io, load1)
    # Each read of the file is a fresh reading of all its numbers.
    clock.now += 0.5
    again = reader.read()
    assert (again.taken_at, again.load1_taken_at) == (1000.5, 1000.5)
