"""A morning scale-up (issue 26): many Deployments, created overnight at 0 replicas, all scaled up at once
on the simulated cluster (real init client processes and a real lockd per node; the real control plane
or sim's API emulator), in each configuration of `buys` without the controller:

- `none`: without stagger;
- `fixed`: a fixed-time lock at the node limit, as pod-startup-lock does (every slot lasts exactly the
  pod's start-up time at one core, whatever the pod does);
- `node`: stagger's node policy `maxConcurrent: K` (a slot ends when its pod is Ready).

The cluster and the pods are `buys`' (tests/benchmarks/buys_bench.py: nodes of CORES cores, node limit K = CORES,
each pod CPU_SECONDS CPU-seconds to start, liveness deadline LIVENESS_SECONDS), with DEPLOYMENTS
Deployments of REPLICAS replicas on NODES nodes (default 40 x 25 = 1,000 pods on 20 nodes, 50 a node).
The Deployments are created at 0 replicas and their ReplicaSets awaited before the measurement; the
measurement starts with every Deployment's `spec.replicas` patched at once.

Per configuration: simulated seconds from the scale-up until every pod is Ready (or how many were Ready
at the deadline), container restarts, the ideal makespan for the node limit (`sim.cluster.measure.makespan`,
all pods spread evenly and present at 0; also given each pod's arrival on its node) and the ratio to it
(`none` and `fixed` against the node limit's ideal), API requests per pod (the API server's count during
the run) and the most containers starting at once on a node.

`python -m tests.benchmarks morning [--deployments 40] [--replicas 25] [--nodes 20] [--configs none,fixed,node]
[--control-plane real|emulator] [--runs N] [--time-scale 2] [--deadline 600] [--out bench]` writes
OUT/morning.json (every run) and OUT/morning.md (per configuration the median of its runs). Measures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal, cast

from sim.cli.apis import ControlPlaneKind
from sim.cluster.measure.makespan import ideal_makespan
from sim.cluster.scenario import Scenario
from sim.cluster.simcluster import SimCluster
from sim.cluster.startup import ModelSettings
from stagger.kube import DEPLOYMENTS, REPLICASETS
from tests.benchmarks import buys_bench, running
from tests.benchmarks.buys_bench import (
    CORES,
    CPU_SECONDS,
    LIVENESS_SECONDS,
    Knobs,
    Row,
    cell_medians,
    machine,
)

DEPLOYMENTS_COUNT = 40
REPLICAS = 25
NODES = 20
CONFIGS = ("none", "fixed", "node")
NAMESPACE = "morning"
DEADLINE_SECONDS = 600.0
"""Simulated seconds (buys' 300 s, doubled: at 60 pods a node `fixed` needed 243-275 s in buys)."""
SETTLE_SECONDS = 60.0
"""Wall seconds the Deployment controller has to create the ReplicaSets at 0 replicas."""


@dataclass(frozen=True)
class Shape:
    deployments: int = DEPLOYMENTS_COUNT
    replicas: int = REPLICAS
    nodes: int = NODES

    @property
    def pods(self) -> int:
        return self.deployments * self.replicas


def scenario(config: str, *, shape: Shape, knobs: Knobs) -> Scenario:
    """buys' scenario for `config` (its node pool, pod and policies), with `shape`'s Deployments and nodes."""
    base = buys_bench.scenario(config, shape.pods, knobs)
    (app,) = base.workloads
    width = len(str(shape.deployments - 1))
    return replace(
        base,
        name=f"morning-{config}-{shape.pods}",
        nodes=replace(base.nodes, count=shape.nodes),
        workloads=tuple(
            replace(app, name=f"app-{i:0{width}d}", namespace=NAMESPACE, replicas=shape.replicas)
            for i in range(shape.deployments)
        ),
    )


def ideal(*, shape: Shape, came: list[list[float]] | None = None) -> float:
    """The node limit's ideal makespan: the pods spread evenly over the nodes, all there at 0 (or at
    `came`, each node's arrivals)."""
    return ideal_makespan(
        nodes=shape.nodes,
        cores=CORES,
        limit=buys_bench.K,
        pods_per_node=math.ceil(shape.pods / shape.nodes),
        cpu_seconds=CPU_SECONDS,
        penalty=ModelSettings().penalty,
        arrivals=came,
    )


def at_zero(scen: Scenario) -> Scenario:
    return replace(scen, workloads=tuple(replace(w, replicas=0) for w in scen.workloads))


async def create_at_zero(cluster: SimCluster, *, scen: Scenario) -> None:
    """The night before: every Deployment at 0 replicas, and its ReplicaSet created."""
    await cluster.apply_workloads(at_zero(scen))
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        listed = await cluster.client.list(REPLICASETS, namespace=NAMESPACE)
        if len(listed.get("items") or []) >= len(scen.workloads):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ReplicaSets of {len(scen.workloads)} Deployments not created in time")
        await asyncio.sleep(0.2)


async def scale_up(cluster: SimCluster, *, scen: Scenario) -> None:
    """The morning: every Deployment's replicas set at once."""
    await asyncio.gather(
        *(
            cluster.client.patch(
                DEPLOYMENTS, name=w.name, namespace=w.namespace, patch={"spec": {"replicas": w.replicas}}
            )
            for w in scen.workloads
        )
    )


async def run_config(config: str, *, shape: Shape, control_plane: ControlPlaneKind, knobs: Knobs) -> Row:
    scen = scenario(config, shape=shape, knobs=knobs)

    async def prepare(cluster: SimCluster) -> None:
        await create_at_zero(cluster, scen=scen)

    async def start(cluster: SimCluster) -> None:
        await scale_up(cluster, scen=scen)

    return await buys_bench.run_config(
        config,
        shape.pods,
        control_plane=control_plane,
        knobs=knobs,
        scen=scen,
        ideal_of=lambda came: ideal(shape=shape, came=came),
        prepare=prepare,
        start=start,
    )


def _ready(row: Row, *, deadline: float) -> str:
    if row.all_ready_seconds is not None:
        return f"{row.all_ready_seconds:.1f}"
    return f"{row.ready_at_end} of {row.pods} by {deadline:.0f} s"


def _optional(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(rows: Sequence[Row], *, command: str, shape: Shape, knobs: Knobs) -> str:
    cells = cell_medians(rows)
    most = max((len(runs) for _, runs in cells), default=1)
    lines = [
        "# A morning scale-up",
        "",
        f"Machine: {machine()}. Command: `{command}`.",
        "",
        f"{shape.deployments} Deployments of {shape.replicas} replicas ({shape.pods} pods), created at 0 "
        f"replicas and scaled up at once, on {shape.nodes} nodes of {CORES} cores; node limit {buys_bench.K}, "
        f"{CPU_SECONDS:g} CPU-seconds to start, liveness {LIVENESS_SECONDS:g} s; deadline "
        f"{knobs.deadline_seconds:g} s; all times simulated seconds from the scale-up. Ideal: the node limit's, "
        "every slot reused the instant its pod is Ready (`sim.cluster.measure.makespan`), the pods spread "
        "evenly; given arrivals: each pod on its node when the kubelet saw it.",
        "",
        f"Each row: the median of its runs (up to {most}; each run's all-Ready time in brackets), the worst "
        "run's restarts and most starting per node.",
        "",
        "| configuration | all Ready (s) | ideal (s) | ratio | ideal given arrivals (s) | ratio "
        "| last pod on its node (s) | restarts | max starting/node | API requests/pod | control plane "
        "| time scale | wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r, runs in cells:
        ready = _ready(r, deadline=knobs.deadline_seconds)
        if len(runs) > 1:
            ready += f" [{', '.join(_ready(x, deadline=knobs.deadline_seconds) for x in runs)}]"
        lines.append(
            f"| {r.config} | {ready} | {r.ideal_seconds:.1f} | {_optional(r.ratio, '.3f')} "
            f"| {_optional(r.ideal_given_arrivals_seconds, '.1f')} | {_optional(r.ratio_given_arrivals, '.3f')} "
            f"| {_optional(r.last_arrival_seconds, '.1f')} | {r.restarts} | {r.max_starting_per_node} "
            f"| {r.api_requests_per_pod:.1f} | {r.control_plane} | {r.time_scale:g} | {r.wall_seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"


def write(rows: Sequence[Row], *, out: Path, command: str, shape: Shape, knobs: Knobs) -> None:
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine(),
        "command": command,
        "knobs": asdict(knobs),
        "shape": asdict(shape),
        "cores": CORES,
        "nodeLimit": buys_bench.K,
        "cpuSeconds": CPU_SECONDS,
        "livenessSeconds": LIVENESS_SECONDS,
        "rows": [asdict(r) for r in rows],
    }
    (out / "morning.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "morning.md").write_text(markdown(rows, command=command, shape=shape, knobs=knobs))


async def run(
    *,
    shape: Shape,
    configs: Sequence[str],
    control_plane: ControlPlaneKind | None,
    knobs: Knobs,
    out: Path | None,
    command: str,
    runs: int,
) -> list[Row]:
    """Every configuration once, then again (`runs` times), so that a busy minute falls on no one
    configuration's runs; the files are written after each run."""
    kind = control_plane or buys_bench.default_control_plane()
    rows: list[Row] = []
    for config in [c for _ in range(runs) for c in configs]:
        print(
            f"morning: {config}, {shape.deployments} x {shape.replicas} on {shape.nodes} nodes, "
            f"the {kind} control plane ...",
            file=sys.stderr,
            flush=True,
        )
        row = await run_config(config, shape=shape, control_plane=kind, knobs=knobs)
        print(f"morning:   {row}", file=sys.stderr, flush=True)
        rows.append(row)
        if out is not None:
            write(rows, out=out, command=command, shape=shape, knobs=knobs)
    return rows


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmarks morning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--deployments", type=int, default=DEPLOYMENTS_COUNT)
    p.add_argument("--replicas", type=int, default=REPLICAS, help="of each Deployment")
    p.add_argument("--nodes", type=int, default=NODES)
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    p.add_argument(
        "--control-plane", choices=("real", "emulator"), default=None, help="default: real when built"
    )
    p.add_argument(
        "--time-scale", type=float, default=Knobs.time_scale, help="simulated seconds a wall second"
    )
    p.add_argument("--deadline", type=float, default=DEADLINE_SECONDS, help="simulated seconds")
    p.add_argument("--launch", choices=("exec", "fork"), default=Knobs.launch, help="init client launch")
    p.add_argument(
        "--client-qps",
        type=int,
        default=None,
        help="the real control plane's controller-manager and scheduler client QPS (default: theirs, 20 and 50)",
    )
    p.add_argument("--runs", type=int, default=1, help="runs of each configuration (medians reported)")
    p.add_argument("--out", type=Path, default=Path(__file__).parent)
    return p


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    cli = parser()
    args = cli.parse_args(given)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        cli.error(f"unknown configuration(s): {', '.join(sorted(unknown))}; known: {', '.join(CONFIGS)}")
    if min(args.deployments, args.replicas, args.nodes, args.runs) < 1:
        cli.error("--deployments, --replicas, --nodes and --runs must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    knobs = Knobs(
        time_scale=args.time_scale,
        deadline_seconds=args.deadline,
        launch=cast(Literal["exec", "fork"], args.launch),
        client_qps=args.client_qps,
    )
    shape = Shape(deployments=args.deployments, replicas=args.replicas, nodes=args.nodes)
    command = ("python -m tests.benchmarks morning " + shlex.join(given)).strip()
    rows = running.run(
        run(
            shape=shape,
            configs=configs,
            control_plane=args.control_plane,
            knobs=knobs,
            out=args.out,
            command=command,
            runs=args.runs,
        )
    )
    print(markdown(rows, command=command, shape=shape, knobs=knobs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
