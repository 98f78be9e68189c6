"""`python -m sim chaos`: a randomized herd (Deployments, StatefulSets, Jobs, bare pods; staggering groups in
every mode and a node policy) on a simulated cluster on the API emulator, with faults between stagger and
the API server (errors, 429s, resets, slow answers, watches cut and told 410, the API server down) and lockd
and the controller leader killed and restarted; then the safety, liveness and no-loss checks of
`sim.chaos.run`. Exit 0 when every seed passes, 1 when one fails (its replay command is printed).

`--seeds N` runs seeds SEED..SEED+N-1 one after another, and `--report FILE` writes their table
(`make chaos`: 100 seeds into sim/chaos/REPORT.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sim.chaos.faults import FaultSettings
from sim.chaos.herd import random_herd
from sim.chaos.report import write_report
from sim.chaos.result import ChaosResult, failed_run
from sim.chaos.run import ChaosSettings, run_chaos
from sim.cli.apis import open_api
from sim.cli.options import command_parser

logger = logging.getLogger(__name__)

EPILOG = """\
examples:
  python -m sim chaos --seed 7                    (2 minutes of faults, then up to 2 minutes to settle)
  python -m sim chaos --seed 7 --minutes 0.5 --outage 5s --size small
  python -m sim chaos --seed 1 --seeds 100 --report sim/chaos/REPORT.md
"""


def _seconds(text: str) -> float:
    value = float(text[:-1]) * (60 if text.endswith("m") else 1) if text[-1:] in "sm" else float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("not negative")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim chaos", description=__doc__, epilog=EPILOG)
    parser.add_argument(
        "--seed", type=int, default=1, help="the run's seed (default 1): the herd, faults, kills"
    )
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed (default 1)")
    parser.add_argument("--minutes", type=float, default=2.0, help="minutes of faults per seed (default 2)")
    parser.add_argument(
        "--outage", type=_seconds, default=60.0, help="the API server down this long (default 60s)"
    )
    parser.add_argument("--kills", type=int, default=2, help="process kills per seed (default 2)")
    parser.add_argument("--size", choices=("small", "full"), default="full", help="herd size (default full)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (default 1)")
    parser.add_argument(
        "--control-plane",
        choices=("emulator", "real"),
        default="emulator",
        help="the API server: sim's emulator (default) or the real control plane (make control-plane), a "
        "fresh one per seed",
    )
    parser.add_argument(
        "--fuzz-stats", type=Path, help="fuzz cases per surface for the report (python -m tests.fuzz.stats)"
    )
    parser.add_argument("--report", type=Path, help="write the seeds' table to this Markdown file")
    parser.add_argument("--work-dir", type=Path, help="keep logs here (default: a temporary folder)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the simulator's INFO lines")
    return parser


async def _one(args: argparse.Namespace, work: Path, seed: int) -> ChaosResult:
    settings = ChaosSettings(
        seed=seed,
        minutes=args.minutes,
        faults=replace(FaultSettings(), outage_seconds=args.outage),
        kills=args.kills,
        work_dir=work / f"seed-{seed}",
    )
    herd = random_herd(seed, size=args.size)
    began = time.monotonic()
    try:
        async with open_api(args.control_plane, quiet=True) as api:
            return await run_chaos(settings, herd=herd, api=api.backend)
    except Exception as exc:  # a run that could not finish is a failed seed, not the end of the others
        logger.exception("seed %d: the run failed", seed)
        return failed_run(seed=seed, herd=herd, why=f"the run failed: {exc!r}", began=began)


async def _run(args: argparse.Namespace, work: Path, *, command: str) -> list[ChaosResult]:
    """Every seed, `--jobs` at a time (each on its own emulator and simulated cluster)."""
    results: list[ChaosResult] = []
    slots = asyncio.Semaphore(args.jobs)

    async def seed_run(seed: int) -> None:
        async with slots:
            result = await _one(args, work, seed)
        print(result.summary(), flush=True)
        results.append(result)
        results.sort(key=lambda r: r.seed)
        if args.report is not None:  # after every seed, so that an interrupted run keeps what it did
            fuzz = json.loads(args.fuzz_stats.read_text()) if args.fuzz_stats is not None else None
            write_report(results, path=args.report, command=command, fuzz=fuzz)

    await asyncio.gather(*(seed_run(seed) for seed in range(args.seed, args.seed + args.seeds)))
    return results


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    with tempfile.TemporaryDirectory(prefix="sim-chaos-") as temporary:
        work = args.work_dir or Path(temporary)
        command = " ".join(["python -m sim chaos", *argv])
        results = asyncio.run(_run(args, work, command=command))
        if args.report is not None:
            print(f"wrote {args.report}")
    failed = [r for r in results if not r.ok]
    for result in failed:
        print(
            f"seed {result.seed} FAILED; replay: {result.replay()} --minutes {args.minutes:g} --outage {args.outage:g}s --size {args.size}",
            file=sys.stderr,
        )
    return 1 if failed else 0
