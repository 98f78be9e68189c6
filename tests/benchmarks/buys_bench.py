"""What stagger buys: a herd on the simulated cluster (real init client processes, a real lockd per node,
the real controller for staggering groups; the real control plane or sim's API emulator) at 60, 600 and
3,000 pods, in each configuration:

- `none`: without stagger;
- `node`: lockd's node policy `maxConcurrent: K` (cluster mode: a slot ends when its pod is Ready);
- `group-lock`, `group-gate`, `group-evict`: the seed staggering-group policy (one image-pull group,
  exponential 4/4/16, as sim/cluster/scenarios/groups.yaml) in each mode (evict holds by nodeSelector),
  with the same node policy;
- `fixed`: a fixed-time lock at the same limit, as pod-startup-lock does: lockd's node policy with
  `minHold: D` and `holdTimeout: D`, so every slot lasts exactly D whatever the pod does; D is the pod's
  start-up time at one core (its CPU-seconds), what a pod-startup-lock user would set for identical pods.

Per run: simulated seconds until every pod is Ready, container restarts, the most containers starting at
once on a node, API requests per pod (the API server's count during the run: on the real control plane
`apiserver_request_total`, every client's, heartbeats and the control plane's own controllers included);
next to each, the ideal makespan for the same limit (`sim.cluster.measure.makespan`: every slot reused the
instant its pod is Ready, no overhead; with the group's pacer for the group configurations) and the
ratio to it. `none` is compared with the node limit's ideal.

The cluster: PODS_PER_NODE pods per node of CORES cores (a real cluster's density: 60 pods = 1 node,
600 = 10, 3,000 = 50), one Deployment, each pod CPU_SECONDS CPU-seconds to start, liveness deadline
LIVENESS_SECONDS, node limit K = CORES.

`python -m tests.benchmarks buys [--scales 60,600,3000] [--configs ...] [--control-plane real|emulator]
[--runs N] [--out bench]` writes OUT/buys.json (every run), OUT/buys.md (per cell the median of its runs,
each run's time in brackets) and OUT/buys.png. With `--runs`, the runs of one cell are spread out (every
cell once, then every cell again), so that a busy minute on the machine does not fall on one cell's runs.
Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from sim.cli.apis import ApiUnavailable, ControlPlaneKind, check_control_plane, open_api
from sim.cli.groups import with_mode
from sim.cluster.measure.grouprun import run_group
from sim.cluster.measure.groupwatch import GroupWatch
from sim.cluster.measure.herd import RunResult, measure
from sim.cluster.measure.makespan import ideal_makespan
from sim.cluster.scenario import NodePool, Scenario, StaggerConfig, Workload, with_stagger
from sim.cluster.simcluster import ClusterSettings, SimCluster
from sim.cluster.startup import ModelSettings
from stagger.policy import parse_policy_text
from tests.benchmarks import running

logger = logging.getLogger(__name__)

PODS_PER_NODE = 60
CORES = 8
K = 8
CPU_SECONDS = 10.0
LIVENESS_SECONDS = 60.0
SCALES = (60, 600, 3000)
CONFIGS = ("none", "node", "fixed", "group-lock", "group-gate", "group-evict")
PACER = {"exponential": {"minInitial": 4, "multiplier": 4, "maxStagger": 16}}


@dataclass(frozen=True)
class Knobs:
    time_scale: float = 2.0
    """Simulated seconds per wall second."""
    deadline_seconds: float = 300.0
    """Simulated seconds before a run is called off (`none` storms for about 1,100 s at this density)."""
    launch: Literal["exec", "fork"] = "fork"
    """How the kubelets start init client processes (ClusterSettings.initclient_launch)."""
    client_qps: int | None = None
    """The real control plane's kube-controller-manager and kube-scheduler client QPS (burst 1.5x); None:
    their defaults (20 and 50), at which the ReplicaSet controller creates 20 pods per wall second."""
    kubelet_processes: int = 0
    """Processes the simulated kubelets run in (ClusterSettings.kubelet_processes); 0: the simulator's."""
    readiness_period: int | None = None
    """The pods' readiness probe period (simulated seconds; the simulated kubelet sets Ready at the first
    probe after the work); None: no probe, Ready when the work is done. The probe is an exec one: lockd
    cannot run it (simulated pods have no address it can reach), so its slots end at the Ready condition,
    as those of real pods with an exec or gRPC probe do."""


def node_policy(*, fixed_seconds: float | None = None) -> str:
    hold = (
        f"      holdTimeout: {fixed_seconds * 1000:.0f}ms\n      minHold: {fixed_seconds * 1000:.0f}ms\n"
        if fixed_seconds is not None
        else "      holdTimeout: 10m\n"
    )
    return f"""nodePolicies:
    - name: bench
      throttleConfig:
        maxConcurrent: {{value: {K}}}
{hold}"""


GROUP_POLICY = """staggeringPolicies:
    - name: image-pull
      labelSelector: {matchLabels: {staggerimages: "1"}}
      groupingExpression: .spec.containers[0].image
      pacer: {exponential: {minInitial: 4, multiplier: 4, maxStagger: 16}}
      mode: lock
"""


def scenario(config: str, pods: int, knobs: Knobs) -> Scenario:
    nodes = max(1, pods // PODS_PER_NODE)
    group = config.startswith("group-")
    # lockd's durations are wall time: the fixed hold is the start-up time at one core, in wall seconds.
    fixed = CPU_SECONDS / knobs.time_scale if config == "fixed" else None
    policies = (GROUP_POLICY if group else "") + node_policy(fixed_seconds=fixed)
    base = Scenario(
        name=f"buys-{config}-{pods}",
        nodes=NodePool(count=nodes, cores=CORES, memory="64Gi", pods=110),
        workloads=(
            Workload(
                kind="Deployment",
                name="app",
                namespace="buys",
                replicas=pods,
                cpu_seconds=CPU_SECONDS,
                liveness_seconds=LIVENESS_SECONDS,
                requests={"cpu": "100m", "memory": "256Mi"},
                image="registry.example/spring-petclinic:3.2",
                labels={"staggerimages": "1"},
                readiness_period=knobs.readiness_period,
            ),
        ),
        stagger=StaggerConfig(
            enabled=config != "none", host_port=0, max_wait="30m", policies=policies, controller=group
        ),
        model=ModelSettings(),
        time_scale=knobs.time_scale,
        deadline_seconds=knobs.deadline_seconds,
    )
    if group:
        base = with_mode(base, config.removeprefix("group-"))
    return base


def ideal(config: str, pods: int, *, came: list[list[float]] | None = None) -> float:
    pacer = None
    if config.startswith("group-"):
        pacer = parse_policy_text(GROUP_POLICY).staggering_policies[0].pacer
    return ideal_makespan(
        nodes=max(1, pods // PODS_PER_NODE),
        cores=CORES,
        limit=K,
        pods_per_node=min(pods, PODS_PER_NODE),
        cpu_seconds=CPU_SECONDS,
        penalty=ModelSettings().penalty,
        pacer=pacer,
        arrivals=came,
    )


@dataclass(frozen=True)
class Row:
    config: str
    pods: int
    nodes: int
    all_ready_seconds: float | None
    ready_at_end: int
    restarts: int
    max_starting_per_node: int
    api_requests: int
    api_requests_per_pod: float
    ideal_seconds: float
    ratio: float | None
    ideal_given_arrivals_seconds: float | None
    """The ideal with each pod on its node when the kubelet saw it (the control plane's creation and
    scheduling rate included): stagger's own overhead. Not for gate and evict mode, whose pods arrive
    when the pacer lets them."""
    ratio_given_arrivals: float | None
    last_arrival_seconds: float | None
    wall_seconds: float
    cpu_seconds: dict[str, float]
    """CPU-seconds each part of the test bed used from the apply to the end of the run (herd rows only)."""
    control_plane: str
    time_scale: float
    api_requests_by_kind: dict[str, float] = field(default_factory=dict)
    """API requests per pod by "VERB resource[/sub]" (those of at least 0.05 a pod), from the API server's
    own count: what each configuration adds, kind by kind."""


def by_kind_per_pod(before: dict[str, int], after: dict[str, int], *, pods: int) -> dict[str, float]:
    """The requests made between two counts by kind, per pod, most first (kinds under 0.05 a pod left out)."""
    per_pod = {kind: (count - before.get(kind, 0)) / pods for kind, count in after.items()}
    kept = {kind: round(value, 2) for kind, value in per_pod.items() if value >= 0.05}
    return dict(sorted(kept.items(), key=lambda item: (-item[1], item[0])))


def _overrides(knobs: Knobs, nodes: int) -> dict[str, Any]:
    # Every node's lockd starts at once: on 2 cores 50 of them need about a minute to be ready.
    return {
        "initclient_launch": knobs.launch,
        "lockd_ready_timeout_seconds": 20.0 + 2.0 * nodes,
        "kubelet_processes": knobs.kubelet_processes,
    }


_PARTS = (
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "etcd"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("kube-scheduler", "kube-scheduler"),
    ("sim.cluster.launchers.forkserver", "init clients (fork server and children)"),
    ("initclient", "init clients (exec)"),
    ("-m lockd", "lockd (all nodes)"),
    ("-m webhook", "controller"),
    ("sim apiserver", "API emulator"),
    ("sim.cluster.kubernetes.kubeletpool", "kubelets (pool processes)"),
)


def cpu_seconds_by_part() -> dict[str, float]:
    """CPU-seconds so far of this process (the simulator: kubelets, scheduler, controllers, watches) and
    of each kind of process under it (the reaped children's included, as the init clients)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    parts = {"simulator (this process)": t.user + t.system}
    for proc in me.children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
            times = proc.cpu_times()
        except psutil.Error:
            continue
        name = next((label for key, label in _PARTS if key in line), "other")
        total = times.user + times.system + times.children_user + times.children_system
        parts[name] = parts.get(name, 0.0) + total
    return parts


def _plane_args(knobs: Knobs) -> dict[str, list[str]] | None:
    if knobs.client_qps is None:
        return None
    flags = [f"--kube-api-qps={knobs.client_qps}", f"--kube-api-burst={knobs.client_qps * 3 // 2}"]
    return {"kube-controller-manager": flags, "kube-scheduler": flags}


def arrivals(cluster: SimCluster, applied_at: float) -> list[list[float]]:
    """When each node's kubelet first saw each of its (last) pods, in simulated seconds from the apply."""
    return [
        sorted(max(0.0, t - applied_at) for t in stats.arrivals) for stats in cluster.node_stats().values()
    ]


ClusterStep = Callable[[SimCluster], Awaitable[None]]


async def _run_herd(
    staggered: Scenario,
    *,
    control_plane: ControlPlaneKind,
    settings: ClusterSettings,
    knobs: Knobs,
    prepare: ClusterStep | None,
    start: ClusterStep | None,
) -> tuple[RunResult, list[list[float]], dict[str, float], dict[str, float]]:
    """A run without the controller: its result, the arrivals, the CPU-seconds by part and the API
    requests per pod by kind."""
    async with (
        open_api(control_plane, quiet=True, extra_args=_plane_args(knobs)) as api,
        SimCluster(api=api.backend, settings=settings) as cluster,
    ):
        if prepare is not None:
            await prepare(cluster)
        applied_at = cluster.clock.now()
        cpu_before = cpu_seconds_by_part()
        counts_before = await api.request_counts()
        result = await measure(
            staggered,
            cluster=cluster,
            stagger=staggered.stagger.enabled,
            request_count=api.request_count,
            start=None if start is None else functools.partial(start, cluster),
        )
        cpu_after = cpu_seconds_by_part()
        kinds = by_kind_per_pod(counts_before, await api.request_counts(), pods=result.pods)
        cpu = {k: round(v - cpu_before.get(k, 0.0), 1) for k, v in cpu_after.items()}
    return result, arrivals(cluster, applied_at), cpu, kinds


async def run_config(
    config: str,
    pods: int,
    *,
    control_plane: ControlPlaneKind,
    knobs: Knobs,
    scen: Scenario | None = None,
    ideal_of: Callable[[list[list[float]] | None], float] | None = None,
    prepare: ClusterStep | None = None,
    start: ClusterStep | None = None,
) -> Row:
    """One run of `config` at `pods` pods. Another bench's herd: `scen` (default `scenario(...)`), its ideal
    given the arrivals or None (default `ideal(...)`), and for the configurations without the controller
    `prepare` (once the cluster runs, before the measurement) and `start` (sets the herd going instead of
    creating the workloads)."""
    scen = scen or scenario(config, pods, knobs)
    ideal_of = ideal_of or (lambda came: ideal(config, pods, came=came))
    overrides = _overrides(knobs, scen.nodes.count)
    began = time.monotonic()
    came: list[list[float]] | None = None
    cpu: dict[str, float] = {}
    kinds: dict[str, float] = {}
    if not config.startswith("group-"):
        staggered = with_stagger(scen, config != "none")
        settings = ClusterSettings.from_scenario(staggered, **overrides)
        result, came, cpu, kinds = await _run_herd(
            staggered,
            control_plane=control_plane,
            settings=settings,
            knobs=knobs,
            prepare=prepare,
            start=start,
        )
        done, restarts, requests = result.all_ready_seconds, result.restarts, result.api_requests
        peak = max(result.peak_starting.values(), default=0)
        ready_at_end = result.timeline[-1][1] if result.timeline else 0
    else:
        if prepare is not None or start is not None:
            raise ValueError("prepare and start are for the configurations without the controller")
        clusters: list[tuple[SimCluster, float]] = []

        async def keep(sim: SimCluster, _group: GroupWatch) -> None:
            clusters.append((sim, sim.clock.now()))

        async with open_api(control_plane, quiet=True, extra_args=_plane_args(knobs)) as api:
            before, counts_before = await api.request_count(), await api.request_counts()
            run = await run_group(scen, api=api.backend, during=keep, **overrides)
            requests = await api.request_count() - before
            kinds = by_kind_per_pod(counts_before, await api.request_counts(), pods=pods)
        done, restarts = run.all_ready_seconds, run.restarts
        peak = max(clusters[0][0].peak_starting().values(), default=0) if clusters else 0
        ready_at_end = run.timeline[-1].ready if run.timeline else 0
        if config == "group-lock" and clusters:
            # `keep` runs just after the apply: the arrivals are a little early, never late.
            came = arrivals(*clusters[0])
    best = ideal_of(None)
    given = ideal_of(came) if came is not None else None
    return Row(
        config=config,
        pods=pods,
        nodes=scen.nodes.count,
        all_ready_seconds=None if done is None else round(done, 1),
        ready_at_end=pods if done is not None else ready_at_end,
        restarts=restarts,
        max_starting_per_node=peak,
        api_requests=requests,
        api_requests_per_pod=round(requests / pods, 1),
        ideal_seconds=round(best, 1),
        ratio=None if done is None else round(done / best, 3),
        ideal_given_arrivals_seconds=None if given is None else round(given, 1),
        ratio_given_arrivals=None if done is None or not given else round(done / given, 3),
        last_arrival_seconds=None if not came else round(max(max(a, default=0.0) for a in came), 1),
        wall_seconds=round(time.monotonic() - began, 1),
        cpu_seconds=cpu,
        control_plane=control_plane,
        time_scale=knobs.time_scale,
        api_requests_by_kind=kinds,
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, Python {platform.python_version()}"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def cell_medians(rows: Sequence[Row]) -> list[tuple[Row, list[Row]]]:
    """Per (pods, configuration), in first-run order: a row of the medians of its runs, and the runs.

    Times and ratios are medians over the runs when every run reached all Ready, else "not reached" with
    the median count Ready; restarts and the most starting on a node are the worst run's (a safety figure
    is not averaged away)."""
    cells: dict[tuple[int, str], list[Row]] = {}
    for row in rows:
        cells.setdefault((row.pods, row.config), []).append(row)
    merged = []
    for runs in cells.values():
        first = runs[0]
        reached = all(r.all_ready_seconds is not None for r in runs)

        def med(get: Any, runs: list[Row] = runs) -> float | None:
            values = [get(r) for r in runs]
            return _median(values) if all(v is not None for v in values) else None

        row = Row(
            config=first.config,
            pods=first.pods,
            nodes=first.nodes,
            all_ready_seconds=med(lambda r: r.all_ready_seconds) if reached else None,
            ready_at_end=round(_median([r.ready_at_end for r in runs])),
            restarts=max(r.restarts for r in runs),
            max_starting_per_node=max(r.max_starting_per_node for r in runs),
            api_requests=round(_median([r.api_requests for r in runs])),
            api_requests_per_pod=_median([r.api_requests_per_pod for r in runs]),
            ideal_seconds=first.ideal_seconds,
            ratio=med(lambda r: r.ratio) if reached else None,
            ideal_given_arrivals_seconds=med(lambda r: r.ideal_given_arrivals_seconds),
            ratio_given_arrivals=med(lambda r: r.ratio_given_arrivals) if reached else None,
            last_arrival_seconds=med(lambda r: r.last_arrival_seconds),
            wall_seconds=_median([r.wall_seconds for r in runs]),
            cpu_seconds={},
            control_plane=first.control_plane,
            time_scale=first.time_scale,
            api_requests_by_kind={
                kind: round(_median([r.api_requests_by_kind.get(kind, 0.0) for r in runs]), 2)
                for kind in first.api_requests_by_kind
            },
        )
        merged.append((row, runs))
    return merged


def markdown(rows: Sequence[Row], *, command: str, notes: str = "") -> str:
    cells = cell_medians(rows)
    most = max((len(runs) for _, runs in cells), default=1)
    lines = [
        "# What stagger buys",
        "",
        f"Machine: {machine()}. Command: `{command}`.",
        "",
        f"{PODS_PER_NODE} pods per node of {CORES} cores, node limit {K}, {CPU_SECONDS:g} CPU-seconds to start, "
        f"liveness {LIVENESS_SECONDS:g} s; all times simulated seconds. Ideal: every slot reused the instant its "
        "pod is Ready (`sim.cluster.measure.makespan`; the group rows with the 4/4/16 pacer); `none` against the node "
        "limit's ideal.",
        "",
        f"Each cell: the median of its runs (up to {most}; each run's all-Ready time in brackets), the worst "
        "run's restarts and most starting per node.",
        "",
        "| pods | nodes | configuration | all Ready (s) | ideal (s) | ratio | ideal given arrivals (s) | ratio "
        "| last pod on its node (s) | restarts | max starting/node | API requests/pod | time scale | wall (s) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, runs in cells:
        ready = (
            f"{r.all_ready_seconds:.1f}"
            if r.all_ready_seconds is not None
            else f"not reached ({r.ready_at_end} Ready)"
        )
        if len(runs) > 1:
            each = ", ".join(
                f"{x.all_ready_seconds:.1f}"
                if x.all_ready_seconds is not None
                else f"({x.ready_at_end} Ready)"
                for x in runs
            )
            ready += f" [{each}]"
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
        given = f"{r.ideal_given_arrivals_seconds:.1f}" if r.ideal_given_arrivals_seconds is not None else "-"
        ratio2 = f"{r.ratio_given_arrivals:.3f}" if r.ratio_given_arrivals is not None else "-"
        last = f"{r.last_arrival_seconds:.1f}" if r.last_arrival_seconds is not None else "-"
        lines.append(
            f"| {r.pods} | {r.nodes} | {r.config} | {ready} | {r.ideal_seconds:.1f} | {ratio} | {given} | {ratio2} "
            f"| {last} | {r.restarts} "
            f"| {r.max_starting_per_node} | {r.api_requests_per_pod:.1f} | {r.time_scale:g} | {r.wall_seconds:.0f} |"
        )
    lines += by_kind_table([r for r, _ in cells])
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def by_kind_table(rows: Sequence[Row]) -> list[str]:
    """API requests per pod by kind, a column per cell (median of its runs): where each mode's requests go."""
    rows = [r for r in rows if r.api_requests_by_kind]
    if not rows:
        return []
    kinds = sorted(
        {kind for r in rows for kind in r.api_requests_by_kind},
        key=lambda kind: (-max(r.api_requests_by_kind.get(kind, 0.0) for r in rows), kind),
    )
    lines = [
        "",
        "API requests per pod by kind (the API server's own count; kinds under 0.05 a pod in every cell left out):",
        "",
        "| kind | " + " | ".join(f"{r.config} ({r.pods})" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for kind in kinds:
        cells = " | ".join(f"{r.api_requests_by_kind.get(kind, 0.0):.2f}" for r in rows)
        lines.append(f"| {kind} | {cells} |")
    total = " | ".join(f"{r.api_requests_per_pod:.1f}" for r in rows)
    lines.append(f"| all | {total} |")
    return lines


def plot(rows: Sequence[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row, _ in cell_medians(rows)]
    scales = sorted({r.pods for r in rows})
    configs = [c for c in CONFIGS if any(r.config == c for r in rows)]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / (len(configs) + 1)
    for j, config in enumerate(configs):
        xs, ys, hatch = [], [], []
        for i, pods in enumerate(scales):
            row = next((r for r in rows if r.config == config and r.pods == pods), None)
            if row is None:
                continue
            xs.append(i + j * width)
            ys.append(row.all_ready_seconds if row.all_ready_seconds is not None else row.wall_seconds * 0)
            hatch.append(row.all_ready_seconds is None)
        bars = ax.bar(xs, ys, width, label=config)
        for bar, unreached in zip(bars, hatch, strict=True):
            if unreached:
                bar.set_hatch("//")
    ideal_x = [i + len(configs) * width for i in range(len(scales))]
    ax.bar(ideal_x, [ideal("node", p) for p in scales], width, label="ideal (node limit)", color="grey")
    ax.set_xticks([i + len(configs) * width / 2 for i in range(len(scales))])
    ax.set_xticklabels([f"{p} pods" for p in scales])
    ax.set_ylabel("simulated seconds to all Ready")
    ax.set_title("What stagger buys: time to all Ready (empty/hatched: not reached by the deadline)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def default_control_plane() -> ControlPlaneKind:
    try:
        check_control_plane("real")
    except ApiUnavailable:
        return "emulator"
    return "real"


async def run(
    *,
    scales: Sequence[int] = SCALES,
    configs: Sequence[str] = CONFIGS,
    control_plane: ControlPlaneKind | None = None,
    knobs: Knobs = Knobs(),
    out: Path | None = None,
    command: str = "python -m tests.benchmarks buys",
    runs: int = 1,
) -> dict[str, object]:
    kind = control_plane or default_control_plane()
    rows: list[Row] = []
    for pods, config in [(p, c) for _ in range(runs) for p in scales for c in configs]:
        print(f"buys: {config} at {pods} pods on the {kind} control plane ...", file=sys.stderr, flush=True)
        row = await run_config(config, pods, control_plane=kind, knobs=knobs)
        print(f"buys:   {row}", file=sys.stderr, flush=True)
        rows.append(row)
        if out is not None:
            write(rows, out=out, command=command, knobs=knobs)
    return {"rows": [asdict(r) for r in rows], "knobs": asdict(knobs), "machine": machine()}


def write(rows: Sequence[Row], *, out: Path, command: str, knobs: Knobs) -> None:
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine(),
        "command": command,
        "knobs": asdict(knobs),
        "podsPerNode": PODS_PER_NODE,
        "cores": CORES,
        "nodeLimit": K,
        "cpuSeconds": CPU_SECONDS,
        "livenessSeconds": LIVENESS_SECONDS,
        "rows": [asdict(r) for r in rows],
    }
    (out / "buys.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "buys.md").write_text(markdown(rows, command=command))
    plot(rows, out / "buys.png")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.buys_bench", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    run_args(args, command="python -m tests.benchmarks.buys_bench " + shlex.join(argv or sys.argv[1:]))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scales", default=",".join(str(s) for s in SCALES), help="pod counts, comma-separated"
    )
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument(
        "--control-plane", choices=("real", "emulator"), default=None, help="default: real when built"
    )
    parser.add_argument("--time-scale", type=float, default=Knobs.time_scale)
    parser.add_argument("--deadline", type=float, default=Knobs.deadline_seconds)
    parser.add_argument(
        "--launch", choices=("exec", "fork"), default=Knobs.launch, help="init client launch (default fork)"
    )
    parser.add_argument(
        "--client-qps",
        type=int,
        default=None,
        help="the real control plane's controller-manager and scheduler client QPS (default: theirs, 20 and 50)",
    )
    parser.add_argument(
        "--kubelet-processes",
        type=int,
        default=Knobs.kubelet_processes,
        help="processes the simulated kubelets run in (default 0: the simulator's own)",
    )
    parser.add_argument(
        "--readiness-period",
        type=int,
        default=None,
        help="the pods' (exec) readiness probe period in simulated seconds, 10 being Kubernetes' default "
        "(default: no probe)",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs of each cell (medians reported)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)


def run_args(args: argparse.Namespace, *, command: str) -> dict[str, object]:
    """Run what the command line asks (`add_arguments`); the results, also written to ``args.out``."""
    logging.basicConfig(level=logging.WARNING)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        raise SystemExit(
            f"unknown configuration(s): {', '.join(sorted(unknown))}; known: {', '.join(CONFIGS)}"
        )
    knobs = Knobs(
        time_scale=args.time_scale,
        deadline_seconds=args.deadline,
        launch=cast(Literal["exec", "fork"], args.launch),
        client_qps=args.client_qps,
        kubelet_processes=args.kubelet_processes,
        readiness_period=args.readiness_period,
    )
    return running.run(
        run(
            scales=[int(s) for s in args.scales.split(",")],
            configs=configs,
            control_plane=args.control_plane,
            knobs=knobs,
            out=args.out,
            command=command,
            runs=max(1, args.runs),
        )
    )


if __name__ == "__main__":
    sys.exit(main())
