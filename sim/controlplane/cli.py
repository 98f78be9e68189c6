"""The `controlplane` command: start a real control plane, say when it is ready, stop it on SIGTERM/SIGINT.

stdout gets exactly one line, once the apiserver is ready and the admin kubeconfig is written:
    control plane ready: https://127.0.0.1:PORT (kubernetes v1.36.3), kubeconfig FILE
Everything else goes to stderr. Exit status: 0 after a signal, 1 if a component died or did not get
ready (naming it, with the last lines of its log), 2 for a usage error or missing binaries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from sim.controlplane.launcher import (
    DEFAULT_BIN_DIR,
    ControlPlane,
    ControlPlaneError,
    MissingBinaries,
    missing_binaries,
)

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
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    starting = asyncio.create_task(plane.start_async())
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait({starting, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        print("stopping before the control plane was ready", file=sys.stderr)
        starting.cancel()  # start_async stops what it started
        with contextlib.suppress(asyncio.CancelledError, ControlPlaneError):
            await starting
        return 0
    stop_wait.cancel()
    error = starting.exception()
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
    while not stopping.is_set():
        try:
            plane.check()
        except ControlPlaneError as err:
            print(f"error: {err}", file=sys.stderr)
            plane.stop(remove_data=False)
            print(f"data and logs kept in {plane.data_dir}", file=sys.stderr)
            return 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), 0.5)
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
