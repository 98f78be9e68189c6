"""Node load sampling, done in the background so that no request ever waits for a reading.

Sources, in order of preference:
- a load file (`--load-file`, a testing aid: the simulated cluster writes each node's modelled load
  there as JSON `{"cpuPercent": 40.0, "ioPercent": 5.0}`),
- psutil for CPU, and Linux pressure stall information (`/proc/pressure/io`, "some avg10") for IO where the
  kernel has it, else the iowait share of CPU time. Both are read under `--proc-root` (default /proc): a
  container's own /proc already shows the whole node's CPU and PSI on standard runtimes, but not where
  /proc is virtualised (lxcfs, sandboxed runtimes); there the host's /proc is mounted and named instead.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Protocol

import psutil

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


class SystemLoad:
    """psutil CPU percent since the previous read, and IO pressure (PSI) or the iowait share."""

    def __init__(self, *, proc_root: Path = PROC_ROOT) -> None:
        self._psi_path = proc_root / "pressure" / "io"
        # psutil reads <PROCFS_PATH>/stat for CPU times; one process-wide setting, made before the first read.
        psutil.PROCFS_PATH = str(proc_root)
        # psutil measures between calls; prime both so the first real sample means something.
        psutil.cpu_percent(interval=None)
        psutil.cpu_times_percent(interval=None)

    def _io(self) -> tuple[float | None, str]:
        try:
            psi = parse_psi_some_avg10(self._psi_path.read_text())
        except OSError:
            psi = None
        if psi is not None:
            return psi, "psutil+psi"
        iowait = getattr(psutil.cpu_times_percent(interval=None), "iowait", None)
        return (float(iowait) if iowait is not None else None), "psutil+iowait"

    def read(self) -> LoadSample:
        cpu = float(psutil.cpu_percent(interval=None))
        io, source = self._io()
        return LoadSample(cpu_percent=cpu, io_percent=io, source=source)


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
