"""Node load sampling, done in the background so that no request ever waits for a reading.

Sources, in order of preference:
- a load file (`--load-file`, a testing aid: the simulated cluster writes each node's modelled load
  there as JSON `{"cpuPercent": 40.0, "ioPercent": 5.0, "load1": 1.5, "memoryPercent": 0.0}`; every key
  is optional, and a missing or null one is a number the source cannot tell: older writers leave out
  `load1` and `memoryPercent`),
- the CPU times in `/proc/stat` for CPU, Linux pressure stall information (`/proc/pressure/io`, "some
  avg10") for IO where the kernel has it, else the iowait share of CPU time, PSI for memory
  (`/proc/pressure/memory`, "some avg10"; none without PSI), and the 1-minute load average, the first
  field of `/proc/loadavg`. All are read under `--proc-root` (default /proc): a
  container's own /proc already shows the whole node's CPU and PSI on standard runtimes, but not where
  /proc is virtualised (lxcfs, sandboxed runtimes); there the host's /proc is mounted and named instead.

`/proc/stat` is read here rather than through psutil: the two shares lockd needs are a subtraction of
two lines, and psutil (with the pickle, glob and datetime modules it loads) cost about 1 MiB of every
node's lockd (issue 14's memory goal), and its /proc root is a process-wide setting.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from stagger.throttles import LoadSample

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

PROC_ROOT = Path("/proc")
# How often /proc/loadavg is read: the kernel recomputes it every 5 s (LOAD_FREQ), and pod-pacemaker reads
# it as often. Reading it at every sample would make each second a fresh reading, ending the load assumed
# for the grants since (incrementBy) four times out of five on a number that had not changed.
LOADAVG_SECONDS = 5.0


class LoadReader(Protocol):
    def read(self) -> LoadSample: ...


def parse_loadavg(text: str) -> float | None:
    """`0.52 0.58 0.59 1/389 12345` -> 0.52, the 1-minute load average; None when it is not a number."""
    fields = text.split(maxsplit=1)
    try:
        value = float(fields[0]) if fields else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


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
    """CPU busy share since the previous read (from `<proc_root>/stat`), IO pressure (PSI) or the iowait
    share, and the 1-minute load average (`<proc_root>/loadavg`, read every LOADAVG_SECONDS)."""

    def __init__(self, *, proc_root: Path = PROC_ROOT, clock: Callable[[], float] = time.monotonic) -> None:
        self._stat_path = proc_root / "stat"
        self._psi_path = proc_root / "pressure" / "io"
        self._memory_psi_path = proc_root / "pressure" / "memory"
        self._loadavg_path = proc_root / "loadavg"
        self._clock = clock
        self._failing: set[Path] = set()  # the files whose last read failed (and was warned of)
        # Shares are measured between reads: this first reading is the start of the first interval.
        self._last = self._times()
        self._cpu: float | None = None
        self._iowait: float | None = None
        self._load1: float | None = None
        self._load1_at: float | None = None

    def _times(self) -> CpuTimes | None:
        return self._read(
            self._stat_path,
            parse_proc_stat,
            unparsed="no cpu line in it",
            warning="cannot read CPU times from %s (%s); CPU load unknown until it can",
        )

    def _read_load1(self) -> float | None:
        return self._read(
            self._loadavg_path,
            parse_loadavg,
            unparsed="not a load average",
            warning="cannot read the load average from %s (%s); loadAvg does not hold pods until it can",
        )

    def _read(
        self, path: Path, parse: Callable[[str], _T | None], *, unparsed: str, warning: str
    ) -> _T | None:
        """`parse` of the file at `path`, or None when it cannot be read or `parse` finds nothing in it (why:
        `unparsed`). The `warning` (formatted with the path and why) is logged when a file starts failing."""
        try:
            value = parse(path.read_text())
            problem = unparsed
        except OSError as err:
            value, problem = None, str(err)
        if value is None and path not in self._failing:
            # Once, not every second: a load throttle with no reading does not act (it fails open).
            logger.warning(warning, path, problem)
        if value is None:
            self._failing.add(path)
        else:
            self._failing.discard(path)
        return value

    def read(self) -> LoadSample:
        taken_at = self._clock()
        now = self._times()
        if now is not None and self._last is not None:
            shares = cpu_shares(self._last, now)
            if shares is not None:
                self._cpu, self._iowait = shares
        self._last = now if now is not None else self._last
        if self._load1_at is None or taken_at - self._load1_at >= LOADAVG_SECONDS:
            self._load1, self._load1_at = self._read_load1(), taken_at
        psi = _read_psi(self._psi_path)
        return LoadSample(
            cpu_percent=self._cpu,
            io_percent=self._iowait if psi is None else psi,
            source="stat+iowait" if psi is None else "stat+psi",
            load1=self._load1,
            taken_at=taken_at,
            load1_taken_at=self._load1_at,
            memory_percent=_read_psi(self._memory_psi_path),
        )


def _read_psi(path: Path) -> float | None:
    """The "some avg10" of a PSI file; None without PSI (the file is missing), which no throttle acts on."""
    try:
        return parse_psi_some_avg10(path.read_text())
    except OSError:
        return None


class FileLoad:
    """Reads `{"cpuPercent": x, "ioPercent": y, "load1": z, "memoryPercent": m}` from a file each time. A testing aid, see
    module doc. Each read is a fresh reading of every number in it (the file's writer is the measurement),
    so it ends the load assumed for the grants since, as a new sample of the machine does."""

    def __init__(self, *, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = path
        self._clock = clock
        self._warned = False

    def read(self) -> LoadSample:
        source = f"file:{self._path}"
        taken_at = self._clock()
        try:
            data = json.loads(self._path.read_text() or "{}")
            cpu, io, load1 = data.get("cpuPercent"), data.get("ioPercent"), data.get("load1")
            memory = data.get("memoryPercent")
            if load1 is not None and not (math.isfinite(float(load1)) and float(load1) >= 0):
                raise ValueError(f"load1 {load1!r} is not a load average")
            sample = LoadSample(
                cpu_percent=None if cpu is None else float(cpu),
                io_percent=None if io is None else float(io),
                source=source,
                load1=None if load1 is None else float(load1),
                taken_at=taken_at,
                load1_taken_at=taken_at,
                memory_percent=None if memory is None else float(memory),
            )
        except (OSError, ValueError, TypeError, AttributeError) as err:
            # A file being rewritten or not yet written: no reading, which no load throttle acts on.
            if not self._warned:
                logger.warning(
                    "cannot read load file %s (%s); treating load as unknown until it can", self._path, err
                )
                self._warned = True
            return LoadSample(
                cpu_percent=None, io_percent=None, source=source, taken_at=taken_at, load1_taken_at=taken_at
            )
        self._warned = False
        return sample
