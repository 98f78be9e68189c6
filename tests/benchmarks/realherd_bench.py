"""The real herd: a burst of real pods on 2 real nodes (`python -m sim realcluster`), with and without stagger.

Each pod is the test bed's workload (testbed/cmd/workload): CPU_SECONDS of real CPU work of its own before
it listens, a readiness probe, and a liveness probe that gives up LIVENESS_SECONDS after the container
starts (initialDelaySeconds + 3 failures 2 s apart), as a slow-starting app's does. The two nodes share
this machine's 2 cores, so PODS pods started together each get a sliver of a core, miss their liveness
deadline, are restarted by their kubelet and start over: the restart storm, for real.

Configurations (the chart installed once with the image `make image` builds; the policy changed by `helm
upgrade` between them):

- `none`: the pods are not opted in (no stagger);
- `fixed`: a fixed-time lock, as pod-startup-lock gives: one slot per node held exactly FIXED_SECONDS
  (lockd's `minHold` and `holdTimeout`), whatever the pod does; FIXED_SECONDS is the start-up time at one
  core, what a pod-startup-lock user would set for identical pods;
- `node`: the chart's default node policy (0.5 slot per core: 1 per node here; no start while the node's
  CPUs are more than 90 % busy; a slot ends when the pod is ready: lockd runs its readiness probe itself);
- `kubelet-ready`: that node policy with `probeReadiness: false`: a slot ends at the pod's Ready condition,
  which the kubelet sets at its next readiness probe, up to one `periodSeconds` after the app is ready
  (what stagger did before issue 38);
- `group`: that node policy and a staggering group for the Deployment (lock mode, exponential 2/2/8).

The pods' readiness probe keeps Kubernetes' default period (10 s), as most users' do; `--readiness-period 1`
sets it (the real herd of before issue 38 ran with 1 s, which hid the period's cost).

Per run: wall seconds from the Deployment's creation to every pod Ready (or DEADLINE), container restarts,
the most pods starting at once on a node, API requests per pod (kube-apiserver's `apiserver_request_total`
during the run: every client's, the kubelets' and controllers' included), and the ideal: PODS x
CPU_SECONDS / CORES (the cores kept busy with start-up work and nothing else).

`python -m tests.benchmarks realherd [--pods 40] [--configs none,fixed,node,group] [--out bench]` (root, after `make
control-plane node-tools image`) writes OUT/realherd.json, realherd.md and realherd.png (Ready pods over
time per configuration). Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import Herd, Kube, Release, restarts, wait_for, workload

CORES = 2
CPU_SECONDS = 3.0
LIVENESS_DELAY = 10
LIVENESS_SECONDS = LIVENESS_DELAY + 6
FIXED_SECONDS = CPU_SECONDS
PODS = 40
DEADLINE = 300.0
CONFIGS = ("none", "fixed", "node", "kubelet-ready", "group")
IMAGE = os.environ.get("STAGGER_IMAGE", "localhost/stagger:dev")

DEFAULT_NODE_POLICY = {
    "name": "default",
    "throttleConfig": {"cpu": {"maxLoad": 90}, "maxConcurrent": {"perCore": 0.5}},
    "holdTimeout": "2m",
    "maxWait": "10m",
}
"""The chart's configs/_policies.yaml node policy, spelled out so that each configuration states it."""


def policies(config: str) -> dict[str, Any]:
    if config == "fixed":
        held = f"{FIXED_SECONDS:g}s"
        node = {
            "name": "fixed",
            "throttleConfig": {"maxConcurrent": {"value": 1}},
            "minHold": held,
            "holdTimeout": held,
        }
        return {"nodePolicies": [node]}
    group = [
        {
            "name": "herd",
            "labelSelector": {"app": "herd"},
            "mode": "lock",
            "pacer": {"exponential": {"minInitial": 2, "multiplier": 2, "maxStagger": 8}},
        }
    ]
    node: dict[str, Any] = dict(DEFAULT_NODE_POLICY)
    if config == "kubelet-ready":
        node["probeReadiness"] = False
    return {"nodePolicies": [node], "staggeringPolicies": group if config == "group" else []}


@dataclass(frozen=True)
class Row:
    config: str
    pods: int
    all_ready_seconds: float | None
    ready_at_deadline: int
    restarts: int
    max_starting_per_node: int
    api_requests_per_pod: float
    ideal_seconds: float
    timeline: list[tuple[float, int]]

    @property
    def ratio(self) -> float | None:
        return None if self.all_ready_seconds is None else self.all_ready_seconds / self.ideal_seconds


def api_requests(kube: Kube) -> float:
    text = kube.run("kubectl", "get", "--raw", "/metrics")
    return sum(
        float(m.group(1)) for m in re.finditer(r"^apiserver_request_total\{[^}]*\} (\S+)$", text, re.M)
    )


def run_config(config: str, pods: int, *, kube: Kube, release: Release, readiness_period: int | None) -> Row:
    print(f"realherd: {config} with {pods} pods ...", file=sys.stderr, flush=True)
    release.upgrade({"policies": policies(config)})
    release.wait_ready(nodes=2)
    namespace = kube.namespace(f"herd-{config}")
    app = workload("herd", namespace, replicas=pods, cpu_seconds=CPU_SECONDS, liveness_delay=LIVENESS_DELAY)
    if config == "none":
        app["spec"]["template"]["metadata"]["labels"] = {"app": "herd"}
    probe = app["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    if readiness_period is None:
        del probe["periodSeconds"]
    else:
        probe["periodSeconds"] = readiness_period
    before = api_requests(kube)
    began = time.monotonic()
    with Herd(kube, namespace, "app=herd") as herd:
        kube.apply(app)
        try:
            herd.wait_ready(pods, timeout=DEADLINE)
            took: float | None = time.monotonic() - began
        except AssertionError:
            took = None
    requests = api_requests(kube) - before
    final = kube.pods(namespace, "app=herd")
    row = Row(
        config=config,
        pods=pods,
        all_ready_seconds=took,
        ready_at_deadline=herd.samples[-1].ready if herd.samples else 0,
        restarts=sum(restarts(p) for p in final),
        max_starting_per_node=herd.max_starting_per_node(),
        api_requests_per_pod=requests / pods,
        ideal_seconds=pods * CPU_SECONDS / CORES,
        timeline=[(round(s.at, 2), s.ready) for s in herd.samples],
    )
    kube.delete_namespace(namespace)
    wait_for("the herd's pods gone", lambda: True if not kube.pods(namespace) else None, timeout=120)
    print(
        f"realherd: {config}: {row.all_ready_seconds}, {row.restarts} restarts", file=sys.stderr, flush=True
    )
    return row


def markdown(rows: list[Row], command: str, *, readiness_period: int | None) -> str:
    lines = [
        "# The real herd: 2 real nodes sharing 2 cores",
        "",
        f"`{command}`: {rows[0].pods if rows else PODS} pods of {CPU_SECONDS:g} CPU-seconds each, liveness "
        f"deadline {LIVENESS_SECONDS} s after start, readiness probe every "
        f"{'10 s (the default)' if readiness_period is None else f'{readiness_period} s'}; "
        f"ideal = pods x CPU-seconds / {CORES} cores.",
        "",
        "| configuration | all Ready (s) | ideal (s) | ratio | restarts | most starting on a node | API requests per pod |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ready = (
            f"{row.all_ready_seconds:.1f}"
            if row.all_ready_seconds is not None
            else f"not by {DEADLINE:.0f} ({row.ready_at_deadline} Ready)"
        )
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
        lines.append(
            f"| {row.config} | {ready} | {row.ideal_seconds:.0f} | {ratio} | {row.restarts} | "
            f"{row.max_starting_per_node} | {row.api_requests_per_pod:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for row in rows:
        xs = [t for t, _ in row.timeline]
        ys = [r for _, r in row.timeline]
        ax.step(xs, ys, where="post", label=f"{row.config} ({row.restarts} restarts)")
    if rows:
        ax.axvline(rows[0].ideal_seconds, color="grey", linestyle="--", label="ideal")
    ax.set_xlabel("seconds since the Deployment was created")
    ax.set_ylabel("pods Ready")
    ax.set_title(f"The real herd: {rows[0].pods if rows else PODS} pods on 2 real nodes sharing 2 cores")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks realherd", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--pods", type=int, default=PODS)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated: {', '.join(CONFIGS)}")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument(
        "--readiness-period",
        type=int,
        default=None,
        help="the pods' readiness probe periodSeconds (default: unset, Kubernetes' 10 s)",
    )
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    command = "python -m tests.benchmarks realherd " + " ".join(argv if argv is not None else sys.argv[1:])
    rows: list[Row] = []
    with RealCluster(nodes=2, images=[IMAGE]) as cluster:
        kube = Kube(cluster)
        release = Release(kube, name="stagger", namespace="stagger-system", image=IMAGE)
        release.install({"policies": policies("node")})
        for config in configs:
            rows.append(
                run_config(
                    config, args.pods, kube=kube, release=release, readiness_period=args.readiness_period
                )
            )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "realherd.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    text = markdown(rows, command.strip(), readiness_period=args.readiness_period)
    (args.out / "realherd.md").write_text(text)
    plot(rows, args.out / "realherd.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
