"""sim/chaos/REPORT.md: one row per seed, then the totals (faults by kind, pods started, limit violations,
fail-opens by cause, the slowest pod against its bound, crashes, and the fuzz cases run per surface)."""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.chaos.result import ChaosResult

__all__ = ["render_report", "write_report"]


def render_report(
    results: Sequence[ChaosResult], *, command: str, fuzz: Mapping[str, Any] | None = None
) -> str:
    """The report; `fuzz`: what `python -m tests.fuzz.stats` wrote (fuzz cases per surface), if given."""
    faults: Counter[str] = Counter()
    fail_opens: Counter[str] = Counter()
    for result in results:
        faults.update(result.faults)
        fail_opens.update(result.fail_opens)
    rows = [
        "| seed | pods | started | faults | kills | group violations | node peaks over limit | fail-opens | "
        "slowest pod (s) | bound (s) | crashes | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        wait = "-" if r.slowest is None else f"{r.slowest[1]:.1f}"
        rows.append(
            f"| {r.seed} | {r.pods} | {r.started} | {sum(r.faults.values())} | {len(r.kills)} | "
            f"{sum(r.group_violations.values())} | {len(r.node_violations)} | {sum(r.fail_opens.values())} | "
            f"{wait} | {r.bound_seconds:.0f} | {r.crashes} | {'ok' if r.ok else 'FAILED: ' + '; '.join(r.problems)} |"
        )
    slowest = max((r.slowest for r in results if r.slowest is not None), key=lambda s: s[1], default=None)
    failed = [r for r in results if not r.ok]
    summary = [
        "| what | count |",
        "|---|---|",
        *(f"| faults injected: {kind} | {count} |" for kind, count in sorted(faults.items())),
        f"| process kills | {sum(len(r.kills) for r in results)} |",
        f"| pods started | {sum(r.started for r in results)} of {sum(r.pods for r in results)} created |",
        f"| group limit violations | {sum(sum(r.group_violations.values()) for r in results)} |",
        f"| node limit exceeded without a fail-open | {sum(1 for r in results for v in r.node_violations.values() if 'fail-open' not in v)} |",
        *(f"| fail-open: {cause} | {count} |" for cause, count in sorted(fail_opens.items())),
        "| slowest pod against its bound | "
        + (
            "-"
            if slowest is None
            else f"{slowest[0]}: {slowest[1]:.1f} s (bound {results[0].bound_seconds:.0f} s)"
        )
        + " |",
        f"| crashes (tracebacks in lockd or controller logs) | {sum(r.crashes for r in results)} |",
        f"| seeds failed | {len(failed)} of {len(results)} |",
    ]
    if fuzz is not None:
        surfaces = fuzz.get("surfaces") or {}
        summary += [
            *(
                f"| fuzz cases: {surface} | {numbers.get('cases', 0)} ({numbers.get('tests', 0)} tests) |"
                for surface, numbers in surfaces.items()
            ),
            f"| fuzz tests failing (pytest's exit code) | {fuzz.get('exitCode')} |",
        ]
    return "\n".join(
        [
            "# Chaos report",
            "",
            f"`{command}` on {platform.machine()} Linux, Python {platform.python_version()}: "
            f"{len(results)} seeds. A failing seed replays with `python -m sim chaos --seed N` "
            "(and the same --minutes, --outage, --size).",
            "",
            *rows,
            "",
            "## Totals",
            "",
            *summary,
            "",
        ]
    )


def write_report(
    results: Sequence[ChaosResult], *, path: Path, command: str, fuzz: Mapping[str, Any] | None = None
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(results, command=command, fuzz=fuzz))
