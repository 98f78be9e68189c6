"""`make bench` (`python -m tests.benchmarks.report [--out bench] [--skip NAME ...]`): runs stagger's benchmarks and
writes OUT/REPORT.md (the machine, each benchmark's command, its figures against their targets), OUT/results.json
(every number) and the plots the benchmarks draw. Benchmarks measure; they do not assert: a missed target is
written down as missed, with what limits it where the benchmark knows.

The benchmarks, each also runnable on its own:
- lockd on a node (`python -m tests.benchmarks lockd-node`): writes OUT/lockd.json and OUT/lockd.md itself;
- lockd's memory per long-polling waiter (`python -m tests.benchmarks lockd-waiters`);
- the controller's admission (`python -m tests.benchmarks admission`) and group pacing at 10,000 pods
  (`python -m tests.benchmarks groups`);
- what stagger buys on the simulated cluster (`python -m tests.benchmarks buys`): writes OUT/buys.json, OUT/buys.md
  and OUT/buys.png itself.
The real herd (`python -m tests.benchmarks realherd`), the controller at Kubernetes' published limits (`python -m
tests.benchmarks scale`) and the morning scale-up (`python -m tests.benchmarks morning`) are not run: their last
OUT/realherd.md, OUT/scale.md and OUT/morning.md are included, and OUT/goals.md (the goals with their latest
figures, written by hand) heads the report.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.benchmarks import admission_bench, groups_bench, waiter_memory_bench

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Target:
    """One figure against its goal: `measured(results)` reads it (None: not measured)."""

    figure: str
    goal: str
    measured: Callable[[dict[str, Any]], float | None]
    met: Callable[[float], bool]
    unit: str = ""


def _get(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(results: dict[str, Any]) -> float | None:
        value: Any = results
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value) if isinstance(value, int | float) else None

    return read


CONTROLLER_TARGETS = (
    Target(
        "admission server-side p99 at 200 req/s, 20 policies",
        "≤ 3 ms",
        _get("admission", "server p99 (ms)"),
        lambda v: v <= 3.0,
        " ms",
    ),
    Target(
        "controller RSS with 10,000 pods in 1,000 groups",
        "≤ 250 MB",
        _get("groups", "controller RSS with every pod listed (MB)"),
        lambda v: v <= 250,
        " MB",
    ),
    Target(
        "a Ready that frees a place → the next grant, p99",
        "≤ 200 ms",
        _get("groups", "Ready -> wait answered p99 (ms)"),
        lambda v: v <= 200,
        " ms",
    ),
)


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import aiohttp

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "memory (GiB)": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "commit": _commit(),
        "load average at start": [round(x, 2) for x in os.getloadavg()],
    }


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _table(rows: dict[str, Any]) -> list[str]:
    lines = ["| figure | value |", "|---|---|"]
    for key, value in rows.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        lines.append(f"| {key} | {shown} |")
    return lines


def _targets(targets: tuple[Target, ...], results: dict[str, Any]) -> list[str]:
    lines = ["| figure | goal | measured | |", "|---|---|---|---|"]
    for target in targets:
        value = target.measured(results)
        if value is None:
            lines.append(f"| {target.figure} | {target.goal} | not measured | |")
        else:
            verdict = "met" if target.met(value) else "**missed**"
            lines.append(f"| {target.figure} | {target.goal} | {value:g}{target.unit} | {verdict} |")
    return lines


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per figure: the median over the runs where the figure is a number, else the last run's."""
    merged: dict[str, Any] = {}
    for key, last in runs[-1].items():
        values = [run[key] for run in runs if isinstance(run.get(key), int | float)]
        merged[key] = statistics.median(values) if len(values) == len(runs) else last
    merged["runs"] = len(runs)
    return merged


def _run_module(which: str) -> None:
    """A benchmark that writes its own files (lockd-node, buys), as its own process."""
    subprocess.run([sys.executable, "-m", "tests.benchmarks", which], cwd=ROOT, check=True)


def _included(out: Path, name: str) -> list[str]:
    path = out / name
    if not path.exists():
        return [f"(not run: {name} is missing)"]
    return path.read_text().rstrip().splitlines()


def write_report(out: Path, results: dict[str, Any]) -> Path:
    lines = [
        "# stagger benchmarks",
        "",
        "Written by `make bench` (`python -m tests.benchmarks.report`). The machine below is that run's, for sections 1",
        "and 2; sections 3 to 6 include each benchmark's own file, which names its machine, date and command.",
        "Benchmarks measure, they do not assert; tests/lockd/test_cost_guard.py guards against tenfold",
        "regressions in `make test`.",
        "",
        "## Goals",
        "",
        "Issue 26's goals, each with its latest figure, the command that made it and, where missed, by how much",
        "and what limits it (tests/benchmarks/goals.md, written by hand from the sections below).",
        "",
        *_included(out, "goals.md"),
        "",
        "## Machine",
        "",
        *_table(results["machine"]),
        "",
        "## 1. lockd on a node",
        "",
        "Command: `python -m tests.benchmarks lockd-node` (its own table follows).",
        "",
        *_included(out, "lockd.md"),
        "",
        "### Memory per long-polling waiter",
        "",
        "Command: `python -m tests.benchmarks lockd-waiters` (goal: <= 8 KiB a waiter; where it goes:",
        "`python -m tests.benchmarks.waiter_memory_bench --traced`).",
        "",
        *(_table(results["lockd-waiters"]) if "lockd-waiters" in results else ["(not run)"]),
        "",
        "### lockd idle on real nodes",
        "",
        # Its file's own heading left out: a subsection here.
        *_included(out, "lockd_idle.md")[2:],
        "",
        "## 2. The controller",
        "",
        "Commands: `python -m tests.benchmarks admission` and `python -m tests.benchmarks groups`.",
        "",
        *_targets(CONTROLLER_TARGETS, results),
        "",
    ]
    for name in ("admission", "groups"):
        if name in results:
            lines += [
                f"### {name}",
                "",
                f"Module docstring: tests/benchmarks/{name}_bench.py.",
                "",
                *_table(results[name]),
                "",
            ]
    lines += [
        "## 3. What stagger buys",
        "",
        "Command: `python -m tests.benchmarks buys` (its own table follows; the plot is buys.png).",
        "",
        *_included(out, "buys.md"),
        "",
        "## 4. The real herd, on real nodes",
        "",
        "Command: `python -m tests.benchmarks realherd` (root, after `make control-plane node-tools image`; not",
        "run by `make bench`, which includes its last realherd.md; the plot is realherd.png).",
        "",
        *_included(out, "realherd.md"),
        "",
        "## 5. The controller at Kubernetes' published limits",
        "",
        "Command: `python -m tests.benchmarks scale --pods 150000 --nodes 5000` (not run by `make bench`, which",
        "includes its last scale.md, written by hand from that run and its profile).",
        "",
        *_included(out, "scale.md"),
        "",
        "## 6. A morning scale-up",
        "",
        "Command: `python -m tests.benchmarks morning` (not run by `make bench`, which includes its last morning.md:",
        "minutes a configuration).",
        "",
        *_included(out, "morning.md"),
        "",
    ]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.report", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "bench", help="where to write (default bench/)")
    parser.add_argument(
        "--skip", action="append", default=[], choices=["lockd-node", "lockd-waiters", "admission", "groups", "buys"],
        help="a benchmark not to run (its last files, if any, are still included)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", type=int, default=3, help="runs of each controller benchmark (medians reported)"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine()}
    if "lockd-node" not in args.skip:
        _run_module("lockd-node")
    if "lockd-waiters" not in args.skip:
        results["lockd-waiters"] = asyncio.run(waiter_memory_bench.measure())
    if "admission" not in args.skip:
        runs = [asyncio.run(admission_bench.run(seconds=10.0)) for _ in range(args.runs)]
        results["admission"], results["admission runs"] = medians(runs), runs
    if "groups" not in args.skip:
        runs = [asyncio.run(groups_bench.run()) for _ in range(args.runs)]
        results["groups"], results["groups runs"] = medians(runs), runs
    if "buys" not in args.skip:
        _run_module("buys")
    for name in ("lockd", "buys"):
        path = out / f"{name}.json"
        if path.exists():
            results[name] = json.loads(path.read_text())
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {write_report(out, results)} and {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
