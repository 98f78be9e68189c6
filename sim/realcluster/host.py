"""What a real cluster changes on the host, each change written down before it is made, so that `undo`
puts the host back as it was: also after a failed start, and from another process after a crash
(`python -m sim realcluster --clean DATA_DIR` reads the same record).

The record (`host-changes.json` in the data directory) is a list of steps; `undo` runs them last first:

- `sysctl`: a kernel setting's value before the cluster ran (kubelet sets vm.overcommit_memory,
  kernel.panic, kernel.panic_on_oops and the kernel keyring limits, which are not per network namespace).
- `link`: a network device (the host's bridge and the nodes' veths); `netns`: a node's network namespace.
- `cgroup`: a cgroup directory made in every v1 hierarchy; its processes are killed before it is removed.
- `path`: a file or folder made outside the data directory (kubelet's /var/lib/kubelet/device-plugins,
  the CNI plugins' /var/lib/cni, /run/netns itself, kubelet's /var/log/containers).
- `mounts`: every mount under a folder (kubelet's volumes, containerd's root file systems and shm), and
  the pod network namespaces containerd made under /run/netns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RECORD = "host-changes.json"
CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = Path("/run/netns")

KUBELET_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
"""The host-wide settings kubelet changes at start (its `protectKernelDefaults: false` defaults)."""

OUTSIDE_PATHS = (
    "/var/lib/kubelet",  # kubelet makes device-plugins/ there whatever its --root-dir
    "/var/lib/cni",  # libcni's cache of results, and the CNI plugins' state
    "/var/log/containers",  # kubelet's links to the containers' logs
    "/var/log/pods",
    "/opt/containerd",
    "/run/nri",
    "/run/containerd",  # containerd's shims put their sockets in /run/containerd/s whatever its state dir
    "/run/stgr",  # the nodes' containerd sockets (sim.realcluster.node.SOCKET_ROOT): a short path
)
"""Paths the node's programs make outside the directories they are given: removed at the end if they were
not there before."""


class HostError(Exception):
    """A change to the host failed; the message names the command and what it said."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise HostError(
            f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )
    return done


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctl(name: str) -> str | None:
    try:
        return sysctl_path(name).read_text().strip()
    except OSError:
        return None


def v1_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, ...), where kubelet's cgroupfs driver makes its
    cgroups; cgroup v2's unified mount is left out (this VM runs kubelet on v1, docs REAL-NODES)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] == "cgroup":
            found.append(Path(fields[4]))
    return sorted(found)


def own_cgroup_base() -> str:
    """Where this process's memory cgroup is (v1), so that the nodes' cgroups sit under it and count
    against the same memory limit as the rest of the test run: '/' when not limited."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path or "/"
    return "/"


def mounts_under(root: Path) -> list[str]:
    """Mount points at or under `root`, deepest first (so each unmount leaves its parent free)."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(prefix):
            found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def cgroup_pids(relative: str) -> set[int]:
    """Every process in the cgroup `relative` or below it, in any v1 hierarchy."""
    pids: set[int] = set()
    for hierarchy in v1_hierarchies():
        top = hierarchy / relative.lstrip("/")
        if not top.is_dir():
            continue
        for dirpath, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (Path(dirpath) / "cgroup.procs").read_text().split())
    return pids


def kill_cgroup(relative: str, *, timeout: float = 10.0) -> None:
    """SIGKILLs every process in the cgroup tree until none is left (a process forking meanwhile is caught
    on the next round)."""
    deadline = time.monotonic() + timeout
    while pids := cgroup_pids(relative):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise HostError(
                f"processes {sorted(pids)} in cgroup {relative} outlived SIGKILL for {timeout:g}s"
            )
        time.sleep(0.05)


def remove_cgroup(relative: str) -> None:
    """Removes the cgroup tree `relative` (deepest first) in every v1 hierarchy."""
    for hierarchy in v1_hierarchies():
        top = hierarchy / relative.lstrip("/")
        if not top.is_dir():
            continue
        dirs = [Path(d) for d, _, _ in os.walk(top)]
        for directory in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            for attempt in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    # A cgroup whose last process just died stays busy for a moment.
                    if attempt == 49:
                        raise
                    time.sleep(0.05)


def make_cgroup(relative: str) -> None:
    """Makes `relative` in every v1 hierarchy; in cpuset, each new level gets its parent's cpus and mems
    (a new cpuset is empty, and no process can join it then)."""
    for hierarchy in v1_hierarchies():
        current = hierarchy
        for part in Path(relative.lstrip("/")).parts:
            parent, current = current, current / part
            if current.is_dir():
                continue
            current.mkdir()
            if (parent / "cpuset.cpus").exists():
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (current / name).write_text((parent / name).read_text())


def join_cgroup(relative: str, pid: int) -> None:
    """Moves `pid` into `relative` in every v1 hierarchy (its children then start there)."""
    for hierarchy in v1_hierarchies():
        procs = hierarchy / relative.lstrip("/") / "cgroup.procs"
        if procs.exists():
            procs.write_text(str(pid))


@dataclass
class HostChanges:
    """The record of changes, kept in `path` (rewritten after each step, so a crash loses none)."""

    path: Path
    steps: list[dict[str, Any]]

    @classmethod
    def open(cls, data_dir: Path) -> HostChanges:
        path = data_dir / RECORD
        steps = json.loads(path.read_text()) if path.exists() else []
        return cls(path, steps)

    def _note(self, step: dict[str, Any]) -> None:
        self.steps.append(step)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.steps, indent=1))
        os.replace(tmp, self.path)

    # --- changes -------------------------------------------------------------------------------------

    def save_sysctls(self, names: tuple[str, ...]) -> None:
        for name in names:
            value = read_sysctl(name)
            if value is not None:
                self._note({"kind": "sysctl", "name": name, "value": value})

    def watch_paths(self, paths: tuple[str, ...]) -> None:
        for path in paths:
            if not os.path.lexists(path):
                self._note({"kind": "path", "path": path})

    def add_link(self, name: str, *create: str) -> None:
        self._note({"kind": "link", "name": name})
        run("ip", "link", "add", name, *create)

    def add_netns(self, name: str) -> None:
        if not NETNS_DIR.exists():
            self._note({"kind": "path", "path": str(NETNS_DIR), "mounted": True})
        self._note({"kind": "netns", "name": name})
        run("ip", "netns", "add", name)

    def add_cgroup(self, relative: str) -> None:
        self._note({"kind": "cgroup", "path": relative})
        make_cgroup(relative)

    def unmount_at_end(self, root: Path) -> None:
        """Everything mounted under `root` is unmounted at the end, and the pod network namespaces
        containerd adds to /run/netns meanwhile (those there now are left alone)."""
        before = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
        self._note({"kind": "mounts", "root": str(root), "netns_before": before})

    # --- undo ----------------------------------------------------------------------------------------

    def undo(self) -> list[str]:
        """Undoes every step, last first; returns what could not be undone (also logged), after trying
        every step."""
        problems = []
        for step in reversed(self.steps):
            try:
                self._undo_step(step)
            except (OSError, HostError) as err:
                problems.append(f"{step}: {err}")
                logger.warning("could not undo %s: %s", step, err)
        if not problems:
            self.path.unlink(missing_ok=True)
            self.steps = []
        return problems

    def _undo_step(self, step: dict[str, Any]) -> None:
        kind = step["kind"]
        if kind == "sysctl":
            if read_sysctl(step["name"]) != step["value"]:
                sysctl_path(step["name"]).write_text(step["value"])
        elif kind == "path":
            if step.get("mounted"):
                for point in mounts_under(Path(step["path"])):
                    run("umount", "-l", point, check=False)
            if os.path.lexists(step["path"]):
                if os.path.isdir(step["path"]) and not os.path.islink(step["path"]):
                    shutil.rmtree(step["path"])
                else:
                    os.unlink(step["path"])
        elif kind == "link":
            if Path("/sys/class/net", step["name"]).exists():
                run("ip", "link", "del", step["name"])
        elif kind == "netns":
            if (NETNS_DIR / step["name"]).exists():
                run("ip", "netns", "del", step["name"])
        elif kind == "cgroup":
            kill_cgroup(step["path"])
            remove_cgroup(step["path"])
        elif kind == "mounts":
            self._undo_mounts(Path(step["root"]), set(step["netns_before"]))
        else:
            raise HostError(f"unknown step {kind!r}")

    @staticmethod
    def _undo_mounts(root: Path, netns_before: set[str]) -> None:
        for point in mounts_under(root):
            run("umount", "-l", point, check=False)
        if NETNS_DIR.is_dir():
            for entry in NETNS_DIR.iterdir():
                if entry.name.startswith("cni-") and entry.name not in netns_before:
                    run("umount", "-l", str(entry), check=False)
                    entry.unlink(missing_ok=True)


def in_netns(name: str) -> list[str]:
    """The argv prefix that runs a command in the node's network namespace. `nsenter --net`, not `ip
    netns exec`, which remounts /sys and hides the cgroup hierarchies from kubelet (docs REAL-NODES)."""
    return ["nsenter", f"--net={NETNS_DIR / name}", "--"]
