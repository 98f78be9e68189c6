"""What a pod pays for stagger's init client on a real node (issue 39), read from the container's own cgroup:
the image's init client as the kubelet runs it (containerd, runc, the injected command and limits), waiting
in a long poll behind another pod on a node that starts one pod at a time (node policy `one-slot`).

Measured from the init container's cgroup v1 directories (the kubelet's cgroupfs driver): its anonymous
memory (`memory.stat` rss), all it is charged for (`memory.usage_in_bytes`, the image's files it read
included) and the most of that (`memory.max_usage_in_bytes`), and its CPU from exec to the long poll
(`cpuacct.usage`, which counts runc's own setup inside the container's cgroup too); beside them the
process's own VmRSS. Measured on 2026-11-28 (2 cores): 8.2 MiB anonymous, 8.9 MiB charged at most, VmRSS
14.8 MiB, 78 ms of CPU. The test asserts what must hold whatever the
machine: the container stays under the injected memory limit (48Mi) with room. The figures are printed
(`pytest -s`) for the report (tests/benchmarks/goals.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes.kube import Kube, lockd_status, wait_for, workload

CGROUPS = Path("/sys/fs/cgroup")
INIT = "stagger-wait"
LIMIT_MIB = 48.0  # the injected container's memory limit (webhook/admission/inject.py)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _is_init_client(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"-m" in argv and b"initclient" in argv


def init_client_pid(namespace: str, pod: str) -> int | None:
    """The pid of the init client of `namespace/pod` (its POD_NAME and POD_NAMESPACE, as injected)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _is_init_client(int(entry.name)):
            env = _environ(int(entry.name))
            if env.get("POD_NAME") == pod and env.get("POD_NAMESPACE") == namespace:
                return int(entry.name)
    return None


def cgroup_of(pid: int, controller: str) -> Path:
    """The v1 cgroup directory of `pid` for `controller` (memory, cpuacct)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            hierarchy = next(
                (d for d in CGROUPS.iterdir() if controller in d.name.split(",") and d.is_dir()),
                None,
            )
            if hierarchy is not None:
                return hierarchy / path.lstrip("/")
    raise AssertionError(f"pid {pid} has no {controller} cgroup")


def _mib(value: int) -> float:
    return round(value / 2**20, 1)


def measure(pid: int) -> dict[str, float]:
    memory, cpu = cgroup_of(pid, "memory"), cgroup_of(pid, "cpuacct")
    stat = dict(line.split() for line in (memory / "memory.stat").read_text().splitlines())
    status = Path(f"/proc/{pid}/status").read_text()
    vmrss_kib = int(status.split("VmRSS:")[1].split()[0])
    return {
        "cgroup rss (anonymous), MiB": _mib(int(stat["rss"])),
        "cgroup usage (with the page cache it read), MiB": _mib(
            int((memory / "memory.usage_in_bytes").read_text())
        ),
        "cgroup usage at most, MiB": _mib(int((memory / "memory.max_usage_in_bytes").read_text())),
        "cgroup limit, MiB": _mib(int((memory / "memory.limit_in_bytes").read_text())),
        "process VmRSS, MiB": round(vmrss_kib / 1024, 1),
        "CPU from exec to the long poll, ms": round(int((cpu / "cpuacct.usage").read_text()) / 1e6, 1),
    }


@pytest.fixture
def waiting_pod(one_slot_node: tuple[str, str], kube: Kube) -> Iterator[tuple[str, str]]:
    """Two pods of the workload on the one-slot node, the first holding the slot for 30 CPU-seconds: the
    second's init client waits in a long poll. (namespace, the waiting pod's name)."""
    node, address = one_slot_node
    namespace = kube.namespace("initcost")
    deployment = workload("cost", namespace, replicas=2, cpu_seconds=30.0, liveness_delay=120)
    deployment["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    try:
        kube.apply(deployment)

        def one_waits() -> str | None:
            waiting = lockd_status(address).get("queue") or []
            return str(waiting[0]["name"]) if waiting and waiting[0]["namespace"] == namespace else None

        yield namespace, wait_for("a pod waiting in lockd's queue", one_waits, timeout=120)
    finally:
        kube.delete_namespace(namespace)


def test_the_waiting_init_client_costs_a_few_mib_in_its_cgroup(waiting_pod: tuple[str, str]) -> None:
    namespace, pod = waiting_pod
    pid = wait_for(
        "the waiting pod's init client process", lambda: init_client_pid(namespace, pod), timeout=30
    )
    figures = measure(pid)
    print("\ninit client waiting on a real node, from its container's cgroup:", json.dumps(figures, indent=2))
    assert figures["cgroup limit, MiB"] == LIMIT_MIB  # the injected limit is the one it runs under
    assert figures["cgroup usage at most, MiB"] < LIMIT_MIB
    assert 0 < figures["cgroup rss (anonymous), MiB"] <= figures["process VmRSS, MiB"] + 1
    assert figures["CPU from exec to the long poll, ms"] > 0
