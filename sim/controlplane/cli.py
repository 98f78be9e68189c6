"""The `controlplane` command: start a real control plane, say when it is ready, stop it on SIGTERM/SIGINT.

stdout gets exactly one line, once the apiserver is ready and the admin kubeconfig is written:
    control plane ready: https://127.0.0.1:PORT (kubernetes v1.36.3), kubeconfig FILE
Everything else goes to stderr. Exit status: 0 after a signal, 1 if a component died or did not get
ready (naming it, with the last lines of its log), 2 for a usage error or missing binaries.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from sim.controlplane.launcher import (
    DEFAULT_BIN_DIR,
    ControlPlane,
    ControlPlaneError,
    MissingBinaries,
    missing_binaries,
)
from sim.running import check_until, start_unless_stopped

EPILOG = """\
examples:
  python -m sim controlplane --kubeconfig /tmp/real.kubeconfig --port 6443   (after `make control-plane`)
  .tools/bin/kubectl --kubeconfig /tmp/real.kubeconfig version
  python -m sim cluster --api-kubeconfig /tmp/real.kubeconfig --stagger   (simulated nodes on it)
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sim controlplane",
        description="Run etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 "
        "(binaries from `make control-plane`) until SIGTERM or SIGINT. One line on stdout once ready: "
        "control plane ready: URL (kubernetes VERSION), kubeconfig FILE. It has no nodes: "
        "`python -m sim cluster --api-kubeconfig FILE` adds simulated ones.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", required=True, type=Path, help="where to write the admin kubeconfig")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="certificates, etcd data, kubeconfigs and logs/ (default: a temporary dir, removed at exit)",
    )
    parser.add_argument("--port", type=int, help="the apiserver's port (default: a free one)")
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR, help="where the binaries are")
    parser.add_argument(
        "--ready-timeout", type=float, default=90.0, help="seconds each component may take to get ready"
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    plane = ControlPlane(
        kubeconfig=args.kubeconfig,
        data_dir=args.data_dir,
        port=args.port,
        bin_dir=args.bin_dir,
        ready_timeout=args.ready_timeout,
    )
    started = await start_unless_stopped(
        plane.start_async(), what="the control plane", cleans_up=(ControlPlaneError,)
    )
    if started is None:
        return 0
    stopping, error = started
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        if isinstance(error, ControlPlaneError):
            print(f"data and logs kept in {plane.data_dir}", file=sys.stderr)
            return 1
        raise error

    print(
        f"control plane ready: {plane.server} (kubernetes {plane.version}), kubeconfig {plane.kubeconfig}",
        flush=True,
    )
    print(f"started in {plane.startup_seconds:.1f}s; logs in {plane.data_dir / 'logs'}", file=sys.stderr)
    died = await check_until(stopping, plane.check, fails=(ControlPlaneError,), every=0.5)
    if died is not None:
        print(f"error: {died}", file=sys.stderr)
        plane.stop(remove_data=False)
        print(f"data and logs kept in {plane.data_dir}", file=sys.stderr)
        return 1
    print("stopping the control plane", file=sys.stderr)
    plane.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = missing_binaries(args.bin_dir)
    if missing:
        print(f"error: {MissingBinaries(args.bin_dir, missing)}", file=sys.stderr)
        return 2
    return asyncio.run(run(args))
