"""The herd demo's measurements: one run of a scenario on a simulated cluster (the simulated time until
every pod was Ready, the container restarts, the largest number of containers starting at once on a
node, the API requests made, the Ready pods over time), and the runs side by side as a table, as JSON
and as a PNG timeline. The command that runs the scenario without and with stagger is ``sim.cli.herd``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sim.cluster.measure.progress import ProgressWatch, Target
from sim.cluster.scenario import Scenario, expected_pods
from sim.cluster.simcluster import SimCluster

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


async def measure(
    scenario: Scenario,
    *,
    cluster: SimCluster,
    stagger: bool,
    request_count: Callable[[], Awaitable[int]],
    start: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    """Apply the scenario's workloads on a running cluster and watch them until done (or the deadline).

    ``request_count`` reads the API server's request counter (the requests made during the run are
    reported), ``stagger`` only labels the result. ``start``: what sets the herd going instead of
    creating the workloads (scaling up Deployments created earlier with fewer replicas); the target is
    still the scenario's workloads."""
    async with ProgressWatch(client=cluster.client, clock=cluster.clock, target=Target.of(scenario)) as watch:
        await watch.pods.synced.wait()
        requests_before = await request_count()
        await (start() if start is not None else cluster.apply_workloads(scenario))
        reached = await watch.wait_done(deadline_seconds=scenario.deadline_seconds)
        await cluster.refresh_node_stats()
        return RunResult(
            stagger=stagger,
            pods=expected_pods(scenario),
            all_ready_seconds=watch.done_at if reached else None,
            restarts=watch.restarts,
            peak_starting=cluster.peak_starting(),
            api_requests=await request_count() - requests_before,
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
