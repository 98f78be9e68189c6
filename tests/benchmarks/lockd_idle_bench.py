"""lockd's idle cost on real nodes (issue 39): the chart installed with its defaults on 2 real nodes
(`python -m sim realcluster`: the real control plane, containerd and kubelets), nothing starting, each node's
lockd with its watches open (its node's pods and Node, the probe listener, the load sampler, its
dependency and policy checks) for MINUTES minutes after a settling minute.

Per lockd process (found from the host by its command line, `python -m lockd`): CPU (utime + stime from
/proc/PID/stat, all threads) as a share of one core over the window, and RSS (VmRSS) sampled every 5 s:
highest and last. The goals: at most 0.2% of a core and 48 MiB.

`python -m tests.benchmarks lockd-idle [--minutes 10] [--out DIR]` (root, after `make control-plane
node-tools image`) writes OUT/lockd_idle.json and OUT/lockd_idle.md. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import Kube, Release

IMAGE = os.environ.get("STAGGER_IMAGE", "localhost/stagger:dev")
SAMPLE_SECONDS = 5.0
SETTLE_SECONDS = 60.0
CPU_GOAL_PERCENT = 0.2
RSS_GOAL_MIB = 48.0


@dataclass(frozen=True)
class Idle:
    pid: int
    cpu_percent_of_core: float
    rss_highest_mib: float
    rss_last_mib: float
    rss_median_mib: float
    seconds: float


def lockd_pids() -> list[int]:
    """The host's `python -m lockd` processes (one a node)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-m" in argv and b"lockd" in argv[argv.index(b"-m") + 1 : argv.index(b"-m") + 2]:
            found.append(int(entry))
    return sorted(found)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # utime and stime are fields 14 and 15 of stat(5); after the command's ")" they are the 12th and 13th.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(pids: list[int], *, seconds: float) -> list[Idle]:
    began, cpu0 = time.monotonic(), {pid: cpu_seconds(pid) for pid in pids}
    rss: dict[int, list[float]] = {pid: [] for pid in pids}
    while time.monotonic() - began < seconds:
        for pid in pids:
            rss[pid].append(rss_mib(pid))
        time.sleep(SAMPLE_SECONDS)
    took = time.monotonic() - began
    return [
        Idle(
            pid=pid,
            cpu_percent_of_core=round(100 * (cpu_seconds(pid) - cpu0[pid]) / took, 3),
            rss_highest_mib=round(max(rss[pid]), 1),
            rss_last_mib=round(rss[pid][-1], 1),
            rss_median_mib=round(statistics.median(rss[pid]), 1),
            seconds=round(took, 1),
        )
        for pid in pids
    ]


def markdown(rows: list[Idle], command: str) -> str:
    lines = [
        "# lockd idle on real nodes",
        "",
        f"`{command}`: the chart's defaults on 2 real nodes, no pod starting; after {SETTLE_SECONDS:g} s of "
        f"settling, each lockd's CPU over the window and its RSS every {SAMPLE_SECONDS:g} s. Goals: at most "
        f"{CPU_GOAL_PERCENT:g}% of a core and {RSS_GOAL_MIB:g} MiB.",
        "",
        "| lockd (pid) | window (s) | CPU, % of a core | RSS highest (MiB) | RSS median | RSS last |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.pid} | {row.seconds:.0f} | {row.cpu_percent_of_core:.3f} | {row.rss_highest_mib:.1f} | "
            f"{row.rss_median_mib:.1f} | {row.rss_last_mib:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks lockd-idle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args(argv)
    command = "python -m tests.benchmarks lockd-idle " + " ".join(argv if argv is not None else sys.argv[1:])
    if lockd_pids():
        raise SystemExit("a lockd already runs on this machine: its figures would mix with the nodes' lockds")
    with RealCluster(nodes=2, images=[IMAGE]) as cluster:
        kube = Kube(cluster)
        release = Release(kube, name="stagger", namespace="stagger-system", image=IMAGE)
        release.install({})
        release.wait_ready(nodes=2)
        time.sleep(SETTLE_SECONDS)
        pids = lockd_pids()
        assert len(pids) == 2, f"expected one lockd a node, found {pids}"
        rows = measure(pids, seconds=args.minutes * 60)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lockd_idle.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    text = markdown(rows, command.strip())
    (args.out / "lockd_idle.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
