"""The herd demo: the same burst of pods without and with stagger, side by side.

``python -m sim herd [--scenario FILE] [--json] [--out DIR] [--time-scale X]`` runs the scenario
(default ``sim/cluster/scenarios/herd.yaml``) twice, each on a fresh API emulator and simulated cluster: once
without stagger and once with lockd on every node. It prints, per run, the simulated time until every
pod was Ready, the container restarts, the largest number of containers starting at once on a node
and the API requests made, and draws both runs' Ready pods over time into a PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sim.cluster.progress import ProgressWatch, Target
from sim.cluster.scenario import Scenario, ScenarioError, expected_pods, load_scenario, with_stagger
from sim.cluster.simcluster import ClusterSettings, SimCluster

logger = logging.getLogger(__name__)

PNG_NAME = "herd-timeline.png"


@dataclass(frozen=True)
class RunResult:
    stagger: bool
    pods: int
    all_ready_seconds: float | None
    """Simulated seconds from applying the workloads until the target was reached; None if it was not."""
    restarts: int
    peak_starting: dict[str, int]
    api_requests: int
    timeline: list[tuple[float, int]]

    @property
    def label(self) -> str:
        return "stagger" if self.stagger else "no stagger"


async def run_once(
    scenario: Scenario, *, stagger: bool, cluster_overrides: dict[str, Any] | None = None
) -> RunResult:
    """One run on a fresh emulator and cluster, torn down before returning."""
    from sim.emulator.server import ApiServer, ApiServerSettings

    scenario = with_stagger(scenario, stagger)
    settings = ClusterSettings.from_scenario(scenario, **(cluster_overrides or {}))
    async with (
        ApiServer(ApiServerSettings(port=0)) as api,
        SimCluster(api_url=api.url, settings=settings) as cluster,
    ):
        return await _measure(
            scenario, cluster=cluster, stagger=stagger, request_count=lambda: api.request_count
        )


async def _measure(
    scenario: Scenario, *, cluster: SimCluster, stagger: bool, request_count: Callable[[], int]
) -> RunResult:
    async with ProgressWatch(client=cluster.client, clock=cluster.clock, target=Target.of(scenario)) as watch:
        await watch.pods.synced.wait()
        requests_before = request_count()
        await cluster.apply_workloads(scenario)
        reached = await watch.wait_done(deadline_seconds=scenario.deadline_seconds)
        return RunResult(
            stagger=stagger,
            pods=expected_pods(scenario),
            all_ready_seconds=watch.done_at if reached else None,
            restarts=watch.restarts,
            peak_starting=cluster.peak_starting(),
            api_requests=request_count() - requests_before,
            timeline=list(watch.timeline),
        )


def format_table(results: Sequence[RunResult]) -> str:
    header = ("run", "pods", "all Ready (sim s)", "restarts", "max starting/node", "API requests")
    rows = [header]
    for r in results:
        peak = max(r.peak_starting.values(), default=0)
        rows.append(
            (
                r.label,
                str(r.pods),
                "not reached" if r.all_ready_seconds is None else f"{r.all_ready_seconds:.1f}",
                str(r.restarts),
                f"{peak} ({', '.join(str(v) for v in r.peak_starting.values())})",
                str(r.api_requests),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def as_json(results: Sequence[RunResult], *, png: Path | None) -> str:
    runs = []
    for r in results:
        data = asdict(r)
        data["run"] = r.label
        data["maxStartingPerNode"] = max(r.peak_starting.values(), default=0)
        runs.append(data)
    return json.dumps({"runs": runs, "timelinePng": str(png) if png else None}, indent=2)


def plot(results: Sequence[RunResult], *, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for r in results:
        times = [0.0] + [t for t, _ in r.timeline]
        counts = [0] + [n for _, n in r.timeline]
        if r.all_ready_seconds is not None:
            times.append(r.all_ready_seconds)
            counts.append(counts[-1])
        ax.step(times, counts, where="post", label=f"{r.label} ({r.restarts} restarts)")
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("pods Ready")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


async def run_demo(scenario: Scenario) -> list[RunResult]:
    results = []
    for stagger in (False, True):
        logger.info("running %s %s stagger", scenario.name, "with" if stagger else "without")
        results.append(await run_once(scenario, stagger=stagger))
    return results


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim herd", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario", type=Path, help="scenario YAML (default: sim/cluster/scenarios/herd.yaml)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--out", type=Path, default=Path("out"), help="directory for the PNG timeline (default out/)"
    )
    parser.add_argument(
        "--time-scale", type=float, help="simulated seconds per wall second (default: the scenario's)"
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        scenario = load_scenario(args.scenario)
        if args.time_scale is not None:
            if args.time_scale <= 0:
                raise ScenarioError(f"--time-scale: must be > 0 (got {args.time_scale})")
            scenario = replace(scenario, time_scale=args.time_scale)
    except ScenarioError as exc:
        print(f"sim herd: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    results = asyncio.run(run_demo(scenario))
    png = plot(results, path=args.out / PNG_NAME, title=f"{scenario.name}: pods Ready over time")
    if args.json:
        print(as_json(results, png=png))
    else:
        print(format_table(results))
        print(f"timeline: {png}")
    return 0 if all(r.all_ready_seconds is not None for r in results) else 1
