"""`python -m sim groups`: the staggering-group demo. The seed scenario (sim/cluster/scenarios/groups.yaml:
two Deployments in two namespaces, one image, 40 pods in one image-pull group paced exponentially 4/4/16)
runs on a simulated cluster with the real controller, lockd and init clients, once per mode (`lock`,
`gate`, `evict` with `hold: nodeSelector`, `evict-stub`: evict with `hold: stub`). Printed per run: the
simulated time until every pod was Ready, container restarts, the most pods started while 0, 1..3 and
4..15 were Ready, whether the pods started ever exceeded the pacer's allowance, in evict mode how many pods
admission held (each evicted once its pacer allowed, and replaced), and the API requests the whole
cluster made per pod of the group (the emulator's count, every client; by verb and resource with
`--json`); drawn into OUT/groups-timeline.png: started and Ready pods of the group over time, one panel per mode, with
the pacer's allowance."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sim.cli.apis import open_api
from sim.cli.options import add_log_level_option, add_report_options, command_parser, set_up_logging
from sim.cluster.measure.grouprun import GroupRun, run_group
from sim.cluster.scenario import Scenario, ScenarioError, load_scenario
from stagger.policy import PolicyError, parse_policy_text

PNG_NAME = "groups-timeline.png"
MODES = ("lock", "gate", "evict", "evict-stub")
DEFAULT = Path(__file__).parents[1] / "cluster" / "scenarios" / "groups.yaml"

EPILOG = """\
examples:
  python -m sim groups                       (sim/cluster/scenarios/groups.yaml, every mode)
  python -m sim groups --mode gate --json
  python -m sim groups --scenario my.yaml --out /tmp/groups
"""


def with_mode(scenario: Scenario, mode: str) -> Scenario:
    """Every staggering policy of the scenario in `mode` (the file says `mode: lock`); `evict-stub` is
    evict mode with `hold: stub`."""
    policies = scenario.stagger.policies
    if not re.search(r"^\s*mode: lock$", policies, flags=re.MULTILINE):
        raise ScenarioError(
            "stagger.policies: the staggering policies must say `mode: lock` to be run in each mode"
        )
    if mode == "evict-stub":
        changed = re.sub(r"^(\s*)mode: lock$", r"\1mode: evict\n\1hold: stub", policies, flags=re.MULTILINE)
    else:
        changed = re.sub(r"^(\s*)mode: lock$", rf"\1mode: {mode}", policies, flags=re.MULTILINE)
    return replace(scenario, stagger=replace(scenario.stagger, policies=changed))


@dataclass(frozen=True)
class ModeRun:
    """One mode's run and the API requests the whole simulated cluster made during it."""

    mode: str
    run: GroupRun
    api_requests: int
    # The same requests by "VERB resource[/sub]" ("CREATE events", "PATCH pods"): where they go.
    api_requests_by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def requests_per_pod(self) -> float:
        return self.api_requests / max(1, self.run.pods)


async def run_mode(scenario: Scenario, *, mode: str) -> ModeRun:
    scenario = with_mode(scenario, mode)
    scenario = replace(scenario, stagger=replace(scenario.stagger, enabled=True, host_port=0))
    async with open_api("emulator", quiet=True) as api:
        before, kinds_before = await api.request_count(), await api.request_counts()
        run = await run_group(scenario, api=api.backend)
        kinds = {kind: n - kinds_before.get(kind, 0) for kind, n in (await api.request_counts()).items()}
        return ModeRun(
            mode=mode,
            run=run,
            api_requests=await api.request_count() - before,
            api_requests_by_kind={kind: n for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]) if n},
        )


def format_table(runs: Sequence[ModeRun]) -> str:
    header = (
        "mode",
        "pods",
        "all Ready (sim s)",
        "restarts",
        "most started: 0 Ready",
        "1-3 Ready",
        "4-15 Ready",
        "over the pacer",
        "held",
        "API requests/pod",
    )
    rows = [
        (
            m.mode,
            str(r.pods),
            "not reached" if r.all_ready_seconds is None else f"{r.all_ready_seconds:.1f}",
            str(r.restarts),
            str(r.most_started(0, 0)),
            str(r.most_started(1, 3)),
            str(r.most_started(4, 15)),
            "never" if not r.violations else f"{len(r.violations)} times",
            str(len(r.held())),
            f"{m.requests_per_pod:.1f}",
        )
        for m in runs
        for r in [m.run]
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in [header, *rows]
    )


def plot(runs: Sequence[ModeRun], *, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False, sharey=True)
    for ax, mode_run in zip(axes[0], runs, strict=True):
        run = mode_run.run
        times = [p.at for p in run.timeline]
        ax.step(times, [p.started for p in run.timeline], where="post", label="started (granted)")
        ax.step(times, [p.ready for p in run.timeline], where="post", label="Ready")
        limit = [run.pods if p.allowance is None else min(p.allowance, run.pods) for p in run.timeline]
        ax.step(times, limit, where="post", linestyle="--", color="grey", label="pacer allowance")
        ax.set_title(f"{mode_run.mode} mode")
        ax.set_xlabel("simulated seconds")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("pods of the group")
    axes[0][0].legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim groups", description=__doc__, epilog=EPILOG)
    parser.add_argument(
        "--scenario",
        type=Path,
        default=DEFAULT,
        help="scenario YAML (default: sim/cluster/scenarios/groups.yaml)",
    )
    parser.add_argument(
        "--mode", choices=MODES, action="append", help="run only this mode (repeatable; default: every mode)"
    )
    add_report_options(parser)
    add_log_level_option(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        scenario = load_scenario(args.scenario)
        for mode in args.mode or MODES:
            with_mode(scenario, mode)
        parse_policy_text(scenario.stagger.policies)
    except (ScenarioError, PolicyError) as exc:
        print(f"sim groups: {exc}", file=sys.stderr)
        return 2
    set_up_logging(level=args.log_level)
    runs = []
    for mode in args.mode or MODES:
        print(f"{mode} mode: scenario {scenario.name} ...", file=sys.stderr, flush=True)
        runs.append(asyncio.run(run_mode(scenario, mode=mode)))
    png = plot(
        runs, path=args.out / PNG_NAME, title=f"{scenario.name}: one staggering group, started vs Ready"
    )
    if args.json:
        documents = [
            {
                **asdict(m.run),
                "mode": m.mode,
                "apiRequests": m.api_requests,
                "apiRequestsPerPod": m.requests_per_pod,
                "apiRequestsByKind": m.api_requests_by_kind,
            }
            for m in runs
        ]
        print(json.dumps({"runs": documents, "png": str(png)}, indent=2, default=str))
    else:
        print(format_table(runs))
        print(f"timeline plot written to {png}")
    ok = all(m.run.all_ready_seconds is not None and not m.run.violations for m in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
