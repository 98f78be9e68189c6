"""`python -m sim herd`: the herd demo, the same burst of pods without and with stagger, side by side."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.cli.apis import (
    ApiUnavailable,
    ControlPlaneKind,
    add_control_plane_option,
    check_control_plane,
    open_api,
)
from sim.cli.options import add_log_level_option, add_report_options, command_parser, set_up_logging
from sim.cluster.measure.herd import PNG_NAME, RunResult, as_json, format_table, measure, plot
from sim.cluster.scenario import Scenario, ScenarioError, load_scenario, with_stagger
from sim.cluster.simcluster import ClusterSettings, SimCluster

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Run a scenario twice, each time on a fresh API server (the emulator, or with --control-plane real a real
control plane from `make control-plane`) and simulated cluster: once without stagger, once with lockd on
every node. Print, per run, the simulated time until every pod was Ready, the container restarts, the
largest number of containers starting at once on a node and the API requests made (on a real control
plane these include its own controllers' and the nodes' heartbeats); draw both runs' Ready pods over
time into OUT/herd-timeline.png. Exit 1 when a run did not reach its target before the scenario's
deadline."""

EPILOG = """\
examples:
  python -m sim herd                                   (sim/cluster/scenarios/herd.yaml: 60 pods, 4 nodes)
  python -m sim herd --json --out /tmp/herd
  python -m sim herd --control-plane real              (the real scheduler and controllers; `make control-plane`)
  python -m sim herd --scenario my.yaml --time-scale 5 (slower simulated time: less load on this machine)
"""


async def run_once(
    scenario: Scenario,
    *,
    stagger: bool,
    control_plane: ControlPlaneKind = "emulator",
    cluster_overrides: dict[str, Any] | None = None,
) -> RunResult:
    """One run on a fresh API server (emulator or real control plane) and cluster, torn down before
    returning."""
    scenario = with_stagger(scenario, stagger)
    settings = ClusterSettings.from_scenario(scenario, **(cluster_overrides or {}))
    async with (
        open_api(control_plane, quiet=True) as api,
        SimCluster(api=api.backend, settings=settings) as cluster,
    ):
        return await measure(scenario, cluster=cluster, stagger=stagger, request_count=api.request_count)


async def _heartbeat(label: str, started: float) -> None:
    # A run takes tens of seconds of wall time: say it is still going rather than sit silent.
    while True:
        await asyncio.sleep(10)
        print(f"  {label}: still running ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)


async def run_demo(scenario: Scenario, *, control_plane: ControlPlaneKind = "emulator") -> list[RunResult]:
    results = []
    for index, stagger in enumerate((False, True), start=1):
        label = f"run {index} of 2, {'with' if stagger else 'without'} stagger"
        print(f"{label}: scenario {scenario.name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        ticker = asyncio.create_task(_heartbeat(label, started))
        try:
            result = await run_once(scenario, stagger=stagger, control_plane=control_plane)
        finally:
            ticker.cancel()
        ready = (
            "not all Ready"
            if result.all_ready_seconds is None
            else f"all Ready at {result.all_ready_seconds:.1f} sim s"
        )
        print(
            f"{label}: done in {time.monotonic() - started:.0f}s wall, {ready}", file=sys.stderr, flush=True
        )
        results.append(result)
    return results


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim herd", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--scenario", type=Path, help="scenario YAML (default: sim/cluster/scenarios/herd.yaml)"
    )
    add_report_options(parser)
    parser.add_argument(
        "--time-scale", type=float, help="simulated seconds per wall second (default: the scenario's)"
    )
    add_control_plane_option(parser)
    add_log_level_option(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        scenario = load_scenario(args.scenario)
        if args.time_scale is not None:
            if args.time_scale <= 0:
                raise ScenarioError(f"--time-scale: must be > 0 (got {args.time_scale})")
            scenario = replace(scenario, time_scale=args.time_scale)
        check_control_plane(args.control_plane)
    except (ScenarioError, ApiUnavailable) as exc:
        print(f"sim herd: {exc}", file=sys.stderr)
        return 2
    set_up_logging(level=args.log_level)
    results = asyncio.run(run_demo(scenario, control_plane=args.control_plane))
    where = "" if args.control_plane == "emulator" else " (real control plane)"
    png = plot(results, path=args.out / PNG_NAME, title=f"{scenario.name}{where}: pods Ready over time")
    if args.json:
        print(as_json(results, png=png))
    else:
        print(format_table(results))
        print(f"timeline plot written to {png}")
    return 0 if all(r.all_ready_seconds is not None for r in results) else 1
