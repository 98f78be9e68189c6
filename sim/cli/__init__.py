"""`python -m sim COMMAND`: the command line, on top of the emulator, the simulated cluster and the real
control plane.

Each command lives in its own module (`sim.cli.apiserver`, `sim.cli.cluster`, `sim.cli.herd`,
`sim.controlplane.cli`); the cli modules are the only place that starts an API server (the emulator or a
real control plane) and a cluster together. They are imported only when chosen, so `python -m sim
apiserver` does not pay for the cluster's or the plot's imports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sim.cli.options import command_parser

COMMANDS: dict[str, str] = {
    "apiserver": "the Kubernetes API server emulator alone, until interrupted",
    "controlplane": "a real control plane (etcd, kube-apiserver, -controller-manager, -scheduler) on loopback",
    "cluster": "a simulated cluster (nodes, kubelets, lockd per node) on the emulator or the real control plane",
    "herd": "the herd demo: a burst of pods without and with stagger, as a table and a PNG timeline",
    "groups": "the staggering-group demo: one group of 40 pods paced 4/4/16, in lock and gate mode, with a plot",
    "chaos": "a randomized herd under injected faults (API errors, outages, killed processes), then checked",
    "realcluster": "a real cluster on this machine: the control plane and real nodes (containerd, kubelet, kube-proxy)",
}

EPILOG = """\
examples:
  python -m sim apiserver --listen 127.0.0.1:6443 --kubeconfig /tmp/sim.kubeconfig
  python -m sim controlplane --kubeconfig /tmp/real.kubeconfig     (needs `make control-plane`)
  python -m sim realcluster --nodes 2 --kubeconfig kc --load-image localhost/stagger:dev   (root; make node-tools)
  python -m sim cluster --nodes 3 --cores 4 --stagger
  python -m sim cluster --control-plane real --stagger --kubeconfig /tmp/real.kubeconfig
  python -m sim herd --out out
  python -m sim groups --out out
  python -m sim chaos --seed 7 --minutes 1
  python -m sim herd --help          (each command has its own --help)
"""


DESCRIPTION = """\
A Kubernetes API server emulator, a real control plane built from Kubernetes' Go modules (`make
control-plane`), and a simulated cluster that runs the real stagger processes (lockd per node, the init
client in every opted-in pod) on either: a test bed and a demo, no real cluster needed.

commands:
""" + "\n".join(f"  {name:<12} {summary}" for name, summary in COMMANDS.items())


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help=", ".join(COMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's options (see COMMAND --help)")
    return parser


def _command(name: str) -> Callable[[Sequence[str]], int]:
    if name == "apiserver":
        from sim.cli import apiserver

        return apiserver.main
    if name == "cluster":
        from sim.cli import cluster

        return cluster.main
    if name == "controlplane":
        from sim.controlplane import cli as controlplane

        return lambda argv: controlplane.main(list(argv))
    if name == "realcluster":
        from sim.realcluster import cli as realcluster

        return lambda argv: realcluster.main(list(argv))
    if name == "groups":
        from sim.cli import groups

        return groups.main
    if name == "chaos":
        from sim.cli import chaos

        return chaos.main
    from sim.cli import herd

    return herd.main


_OWN_PACKAGES = frozenset({"sim", "stagger", "lockd", "webhook", "initclient", "tests"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    given = list(sys.argv[1:] if argv is None else argv)
    if not given:
        parser.error(f"which command? one of {', '.join(COMMANDS)} (--help says what each does)")
    args = parser.parse_args(given)
    try:
        command = _command(args.command)
    except ModuleNotFoundError as missing:
        # `make run` installs what lockd needs, not the test bed's extras (cryptography, trustme, psutil, ...):
        # say what to do instead of a traceback. A module of the project itself missing is a bug: raised.
        package = (missing.name or "").split(".")[0]
        if package in _OWN_PACKAGES:
            raise
        parser.exit(
            2,
            # The package, as pip names it (`cryptography`, not the `cryptography.exceptions` imported).
            f"python -m sim {args.command}: the Python module {package!r} is not installed; the test bed "
            "needs the test extras: run `make venv` (or `.venv/bin/pip install -e '.[test]'`)\n",
        )
    return command(args.args)
