"""`python -m tests.benchmarks [lockd] [lockd-cluster] [lockd-queue] [lockd-waiters] [admission] [groups] [buys] [--json]`: stagger's benchmarks. Each prints a table of measured numbers; `buys` (what stagger buys, on the simulated cluster) also writes bench/buys.json, buys.md and buys.png (its options: `python -m tests.benchmarks.buys_bench --help`). `python -m tests.benchmarks realherd [...]`: the real herd on 2 real nodes (root, `make control-plane node-tools image`; not in the default set), bench/realherd.{json,md,png}; `realherd --help` for its options. `python -m tests.benchmarks lockd-idle [--minutes 10]`: lockd's idle CPU and RSS on 2 real nodes (root; not in the default set), bench/lockd_idle.{json,md}. `python -m tests.benchmarks scale [--pods 150000 --nodes 5000 ...] [--json]`: the controller at Kubernetes' published limits, on the emulator (not in the default set: minutes at full size); `scale --help` for its options. `python -m tests.benchmarks morning [--deployments 40 --replicas 25 --nodes 20 ...]`: a morning scale-up of many Deployments from 0 at once, without stagger, with a fixed-time lock and with stagger's node policy, on the simulated cluster (not in the default set: minutes a configuration), bench/morning.{json,md}; `morning --help` for its options."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from tests.benchmarks import (
    admission_bench,
    buys_bench,
    groups_bench,
    lockd_bench,
    lockd_idle_bench,
    lockd_node_bench,
    morning_bench,
    realherd_bench,
    scale_bench,
    waiter_memory_bench,
)

KNOWN = (
    "lockd",
    "lockd-cluster",
    "lockd-queue",
    "lockd-waiters",
    "lockd-node",
    "admission",
    "groups",
    "buys",
)


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["realherd"]:
        return realherd_bench.main(given[1:])
    if given[:1] == ["lockd-idle"]:
        return lockd_idle_bench.main(given[1:])
    if given[:1] == ["scale"]:
        return scale_bench.main(given[1:])
    if given[:1] == ["morning"]:
        return morning_bench.main(given[1:])
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__)
    parser.add_argument("which", nargs="*", help=f"benchmarks to run: {', '.join(KNOWN)} (default: all)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each throughput run")
    buys_bench.add_arguments(parser)
    args = parser.parse_args(argv)
    args.which = args.which or list(KNOWN)
    unknown = set(args.which) - set(KNOWN)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}; known: {', '.join(KNOWN)}")
    results = {}
    for name in args.which:
        if name == "lockd-node":
            # Writes tests/benchmarks/lockd.json and tests/benchmarks/lockd.md (medians of 3 runs, against a bare aiohttp handler).
            lockd_node_bench.main([])
            continue
        if name == "buys":
            results[name] = buys_bench.run_args(
                args, command="python -m tests.benchmarks " + " ".join(argv or sys.argv[1:])
            )
        elif name == "groups":
            results[name] = asyncio.run(groups_bench.run())
        elif name == "admission":
            results[name] = asyncio.run(admission_bench.run(seconds=args.seconds))
        elif name == "lockd-waiters":
            # RSS per long-polling waiter (2,000 and 5,000); `python -m tests.benchmarks.waiter_memory_bench --traced`
            # also lists where it goes.
            results[name] = asyncio.run(waiter_memory_bench.measure())
        elif name == "lockd-queue":
            results[name] = asyncio.run(lockd_bench.queue_scaling(seconds=min(args.seconds, 5.0)))
        else:
            mode: lockd_bench.Mode = "cluster" if name == "lockd-cluster" else "standalone"
            results[name] = asyncio.run(lockd_bench.run(seconds=args.seconds, mode=mode))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for name, rows in results.items():
            print(f"\n== {name} ==")
            width = max(len(k) for k in rows)
            for key, value in rows.items():
                print(f"  {key.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
