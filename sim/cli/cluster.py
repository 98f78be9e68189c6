"""`python -m sim cluster`: a simulated cluster on the API server emulator or a real control plane (started
here, or running already), until interrupted or for a while, optionally with a scenario's workloads
applied."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sim.cli.apis import (
    ApiUnavailable,
    ControlPlaneKind,
    add_control_plane_option,
    check_control_plane,
    open_api,
)
from sim.cli.options import add_log_level_option, command_parser, set_up_logging
from sim.cluster.scenario import Scenario, ScenarioError, load_scenario
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.kube import ApiError

DESCRIPTION = """\
Run a simulated cluster: nodes with their kubelets and, with --stagger, a real lockd per node (each node
has its own loopback address, 127.0.1.N). On the Kubernetes API server emulator started here (the
default) sim's own scheduler and workload controllers run too; on a real control plane
(--control-plane real, after `make control-plane`, or --api-kubeconfig for one already running) the
real kube-scheduler and kube-controller-manager do that work, and the nodes register, renew their
Leases in kube-node-lease and post their status as a kubelet does. It prints the API server and the
nodes, applies the scenario's workloads if one is given, and runs until SIGINT or SIGTERM (or for
--duration seconds)."""

EPILOG = """\
examples:
  python -m sim cluster --nodes 3 --cores 4 --stagger --kubeconfig /tmp/sim.kubeconfig
  python -m sim cluster --scenario sim/cluster/scenarios/herd.yaml --stagger --duration 60
  python -m sim cluster --control-plane real --stagger --kubeconfig /tmp/real.kubeconfig
  python -m sim cluster --api-kubeconfig /tmp/real.kubeconfig   (a `python -m sim controlplane` running)
  python -m sim cluster --api-url http://127.0.0.1:6443 --no-stagger   (an emulator running)
"""


@dataclass(frozen=True)
class CliSettings:
    cluster: ClusterSettings
    scenario: Scenario | None
    control_plane: ControlPlaneKind
    api_url: str | None
    api_kubeconfig: Path | None
    api_port: int
    kubeconfig: Path | None
    duration: float | None


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim cluster", description=DESCRIPTION, epilog=EPILOG)
    add = parser.add_argument
    add(
        "--scenario",
        type=Path,
        help="scenario YAML: node pool, model, stagger and workloads (which are applied)",
    )
    add("--nodes", type=int, help="number of nodes (default 4, or the scenario's)")
    add("--cores", type=float, help="cores per node (default 4, or the scenario's)")
    add("--memory", help="memory per node, e.g. 16Gi (default 16Gi, or the scenario's)")
    add("--time-scale", type=float, help="simulated seconds per wall second (default 10, or the scenario's)")
    stagger = parser.add_mutually_exclusive_group()
    stagger.add_argument(
        "--stagger", dest="stagger", action="store_true", default=None, help="run lockd per node"
    )
    stagger.add_argument("--no-stagger", dest="stagger", action="store_false", help="no lockd")
    add("--policies", type=Path, help="lockd policy file (with --stagger)")
    add("--host-port", type=int, help="lockd port on every node address (default 9400; 0 picks a free one)")
    add_control_plane_option(parser)
    attach = parser.add_mutually_exclusive_group()
    attach.add_argument(
        "--api-url",
        help="use the emulator (or unauthenticated API server) at this URL instead of starting one",
    )
    attach.add_argument(
        "--api-kubeconfig",
        type=Path,
        help="use the real cluster this kubeconfig points to (e.g. `python -m sim controlplane`'s)",
    )
    add(
        "--api-port", type=int, default=0, help="port of the API server started here (default: any free port)"
    )
    add("--kubeconfig", type=Path, help="write a kubeconfig for the API server started here")
    add("--duration", type=float, help="stop after this many wall seconds (default: run until interrupted)")
    add_log_level_option(parser, default="info")
    return parser


def parse_cli(argv: Sequence[str]) -> tuple[CliSettings, str]:
    """Settings from the command line; raises ScenarioError (or exits via argparse) for bad input."""
    args = _parser().parse_args(list(argv))
    scenario = load_scenario(args.scenario) if args.scenario else None
    base = ClusterSettings.from_scenario(scenario) if scenario else ClusterSettings()
    nodes = base.nodes
    if args.nodes is not None:
        if args.nodes < 1:
            raise ScenarioError(f"--nodes: must be at least 1 (got {args.nodes})")
        nodes = replace(nodes, count=args.nodes)
    if args.cores is not None:
        if args.cores <= 0:
            raise ScenarioError(f"--cores: must be > 0 (got {args.cores})")
        nodes = replace(nodes, cores=args.cores)
    if args.memory is not None:
        nodes = replace(nodes, memory=args.memory)
    stagger = base.stagger
    if args.stagger is not None:
        stagger = replace(stagger, enabled=args.stagger)
    if args.policies is not None:
        try:
            stagger = replace(stagger, policies=args.policies.read_text())
        except OSError as exc:
            raise ScenarioError(f"--policies: cannot read {args.policies} ({exc.strerror})") from None
    if args.host_port is not None:
        if not 0 <= args.host_port <= 65535:
            raise ScenarioError(f"--host-port: not a port number (got {args.host_port})")
        stagger = replace(stagger, host_port=args.host_port)
    time_scale = base.time_scale
    if args.time_scale is not None:
        if args.time_scale <= 0:
            raise ScenarioError(f"--time-scale: must be > 0 (got {args.time_scale})")
        time_scale = args.time_scale
    if args.duration is not None and args.duration <= 0:
        raise ScenarioError(f"--duration: must be > 0 (got {args.duration})")
    cluster = replace(base, nodes=nodes, stagger=stagger, time_scale=time_scale)
    return (
        CliSettings(
            cluster=cluster,
            scenario=scenario,
            control_plane=args.control_plane,
            api_url=args.api_url,
            api_kubeconfig=args.api_kubeconfig,
            api_port=args.api_port,
            kubeconfig=args.kubeconfig,
            duration=args.duration,
        ),
        args.log_level,
    )


async def _serve(settings: CliSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        api = await stack.enter_async_context(
            open_api(
                settings.control_plane,
                port=settings.api_port,
                kubeconfig=settings.kubeconfig,
                api_url=settings.api_url,
                api_kubeconfig=settings.api_kubeconfig,
            )
        )
        cluster = await stack.enter_async_context(SimCluster(api=api.backend, settings=settings.cluster))
        print(f"API server: {api.description}", flush=True)
        for i, name in enumerate(cluster.kubelets):
            lockd = cluster.lockds.get(name)
            print(
                f"  {name}  {cluster.node_ip(i)}" + (f"  lockd {lockd.spec.url}" if lockd else ""), flush=True
            )
        if settings.scenario is not None:
            try:
                await cluster.apply_workloads(settings.scenario)
                print(f"applied the workloads of scenario {settings.scenario.name!r}", flush=True)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # Run again on a cluster that lives on (--api-kubeconfig, --api-url): its pods are
                # recreated on the new nodes by their controllers.
                print(f"the workloads of scenario {settings.scenario.name!r} exist already: kept", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=settings.duration)
        print(f"stopping; peak containers starting at once per node: {cluster.peak_starting()}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings, log_level = parse_cli(sys.argv[1:] if argv is None else argv)
        if settings.api_url is None and settings.api_kubeconfig is None:
            check_control_plane(settings.control_plane)
    except (ScenarioError, ApiUnavailable) as exc:
        print(f"sim cluster: {exc}", file=sys.stderr)
        return 2
    set_up_logging(level=log_level)
    asyncio.run(_serve(settings))
    return 0
