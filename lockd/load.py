"""Node load sampling, done in the background so that no request ever waits for a reading.

Sources, in order of preference:
- a load file (`--load-file`, a testing aid: the simulated cluster writes each node's modelled load
  there as JSON `{"cpuPercent": 40.0, "ioPercent": 5.0}`),
- the CPU times in `/proc/stat` for CPU, and Linux pressure stall information (`/proc/pressure/io`, "some
  avg10") for IO where the kernel has it, else the iowait share of CPU time. Both are read under
  `--proc-root` (default /proc): a
  container's own /proc already shows the whole node's CPU and PSI on standard runtimes, but not where
  /proc is virtualised (lxcfs, sandboxed runtimes); there the host's /proc is mounted and named instead.

`/proc/stat` is read here rather than through psutil: the two shares lockd needs are a subtraction of
two lines, and psutil (with the pickle, glob and datetime modules it loads) cost about 1 MiB of every
node's lockd (issue 14's memory goal), and its /proc root is a process-wide setting.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stagger.throttles import LoadSample

logger = logging.getLogger(__name__)

PROC_ROOT = Path("/proc")


class LoadReader(Protocol):
    def read(self) -> LoadSample: ...


def parse_psi_some_avg10(text: str) -> float | None:
    """`some avg10=1.23 avg60=...` → 1.23; None when the line is not there."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for item in fields[1:]:
                key, _, value = item.partition("=")
                if key == "avg10":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks, from the first (`cpu `) line of /proc/stat."""

    total: int
    idle: int
    iowait: int | None
    """None on kernels that do not count it (the line has fewer than five fields)."""


def parse_proc_stat(text: str) -> CpuTimes | None:
    """`cpu  user nice system idle iowait irq softirq steal guest guest_nice` -> CpuTimes; None when the
    line is missing or malformed. guest and guest_nice are already counted in user and nice (proc(5)), so
    they are left out of the total, as psutil and top do."""
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] != "cpu":
            continue
        try:
            ticks = [int(value) for value in fields[1:]]
        except ValueError:
            return None
        if len(ticks) < 4:
            return None
        counted = ticks[:8]  # user .. steal
        iowait = ticks[4] if len(ticks) > 4 else None
        return CpuTimes(total=sum(counted), idle=ticks[3], iowait=iowait)
    return None


def cpu_shares(before: CpuTimes, after: CpuTimes) -> tuple[float, float | None] | None:
    """(busy %, iowait %) of the CPU time between two readings; None when no tick passed (or the counters
    went back, as after a host's /proc was swapped), so that the caller keeps its last reading. Busy is what
    is neither idle nor waiting for IO, as psutil's cpu_percent counts it."""
    elapsed = after.total - before.total
    if elapsed <= 0:
        return None
    iowait = None
    if before.iowait is not None and after.iowait is not None:
        iowait = max(0, after.iowait - before.iowait)
    idle = max(0, after.idle - before.idle) + (iowait or 0)
    busy = min(100.0, max(0.0, 100.0 * (elapsed - idle) / elapsed))
    return busy, (None if iowait is None else min(100.0, 100.0 * iowait / elapsed))


class SystemLoad:
    """CPU busy share since the previous read (from `<proc_root>/stat`), and IO pressure (PSI) or the
    iowait share."""

    def __init__(self, *, proc_root: Path = PROC_ROOT) -> None:
        self._stat_path = proc_root / "stat"
        self._psi_path = proc_root / "pressure" / "io"
        self._warned = False
        # Shares are measured between reads: this first reading is the start of the first interval.
        self._last = self._times()
        self._cpu: float | None = None
        self._iowait: float | None = None

    def _times(self) -> CpuTimes | None:
        try:
            times = parse_proc_stat(self._stat_path.read_text())
            problem = "no cpu line in it"
        except OSError as err:
            times, problem = None, str(err)
        if times is None and not self._warned:
            # Once, not every second: a load throttle with no reading does not act (it fails open).
            logger.warning(
                "cannot read CPU times from %s (%s); CPU load unknown until it can", self._stat_path, problem
            )
        self._warned = times is None
        return times

    def read(self) -> LoadSample:
        now = self._times()
        if now is not None and self._last is not None:
            shares = cpu_shares(self._last, now)
            if shares is not None:
                self._cpu, self._iowait = shares
        self._last = now if now is not None else self._last
        try:
            psi = parse_psi_some_avg10(self._psi_path.read_text())
        except OSError:
            psi = None
        if psi is not None:
            return LoadSample(cpu_percent=self._cpu, io_percent=psi, source="stat+psi")
        return LoadSample(cpu_percent=self._cpu, io_percent=self._iowait, source="stat+iowait")


class FileLoad:
    """Reads `{"cpuPercent": x, "ioPercent": y}` from a file each time. A testing aid, see module doc."""

    def __init__(self, *, path: Path) -> None:
        self._path = path
        self._warned = False

    def read(self) -> LoadSample:
        source = f"file:{self._path}"
        try:
            data = json.loads(self._path.read_text() or "{}")
            cpu, io = data.get("cpuPercent"), data.get("ioPercent")
            sample = LoadSample(
                cpu_percent=None if cpu is None else float(cpu),
                io_percent=None if io is None else float(io),
                source=source,
            )
        except (OSError, ValueError, TypeError, AttributeError) as err:
            # A file being rewritten or not yet written: no reading, which no load throttle acts on.
            if not self._warned:
                logger.warning(
                    "cannot read load file %s (%s); treating load as unknown until it can", self._path, err
                )
                self._warned = True
            return LoadSample(cpu_percent=None, io_percent=None, source=source)
        self._warned = False
        return sample
