"""`python -m sim apiserver`: the Kubernetes API server emulator alone, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sys
from collections.abc import Sequence
from types import MappingProxyType

from sim.cli.options import command_parser
from sim.emulator.server import ApiServer, ApiServerSettings
from stagger.addresses import parse_host_port

DESCRIPTION = """\
Run the Kubernetes API server emulator (plain HTTP, JSON; CRUD, watch, selectors, patch, validation,
graceful deletion, eviction, binding, mutating webhooks, discovery, kubectl tables) until SIGINT or
SIGTERM. It prints "apiserver listening on URL" once it listens, so --listen may use port 0."""

EPILOG = """\
examples:
  python -m sim apiserver --listen 127.0.0.1:6443 --kubeconfig /tmp/sim.kubeconfig
  kubectl --kubeconfig /tmp/sim.kubeconfig get pods -A
  python -m sim apiserver --service webhooks/hook:443=127.0.0.1:9443 --request-log
"""


def _service(value: str) -> tuple[str, str]:
    key, sep, address = value.partition("=")
    if not sep or "/" not in key or ":" not in key or ":" not in address:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME:PORT=HOST:PORT, got {value!r}")
    return key, address


def _minor(value: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]{0,2}\.[0-9]{1,3}", value):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR such as 1.29, got {value!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(prog="python -m sim apiserver", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the server here")
    parser.add_argument(
        "--watch-history",
        type=int,
        default=ApiServerSettings.watch_history,
        help="events kept per resource for watch resumption (older: 410 Gone)",
    )
    parser.add_argument("--request-log", action="store_true", help="log every request at INFO")
    parser.add_argument(
        "--graceful-deletion-slack",
        type=float,
        default=ApiServerSettings.graceful_deletion_slack,
        help="seconds after a pod's deletionTimestamp at which the server finishes its deletion itself",
    )
    parser.add_argument(
        "--service",
        type=_service,
        action="append",
        default=[],
        metavar="NS/NAME:PORT=HOST:PORT",
        help="where a webhook clientConfig.service is reached (repeatable)",
    )
    parser.add_argument(
        "--kubernetes-version",
        type=_minor,
        default=None,
        metavar="MAJOR.MINOR",
        help="the version GET /version answers, e.g. 1.29 (default: the emulator's own); nothing else changes",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def parse_args(argv: Sequence[str]) -> tuple[ApiServerSettings, str | None, str]:
    parser = _parser()
    args = parser.parse_args(list(argv))
    try:
        host, port = parse_host_port(args.listen, name="--listen")
    except ValueError as err:
        parser.error(str(err))
    if args.watch_history < 1:
        parser.error("--watch-history must be at least 1")
    settings = ApiServerSettings(
        host=host,
        port=port,
        watch_history=args.watch_history,
        request_log=args.request_log,
        graceful_deletion_slack=args.graceful_deletion_slack,
        service_resolver=MappingProxyType(dict(args.service)),
        kubernetes_version=args.kubernetes_version,
    )
    return settings, args.kubeconfig, args.log_level


async def _serve(settings: ApiServerSettings, kubeconfig_path: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with ApiServer(settings) as server:
        if kubeconfig_path:
            server.write_kubeconfig(kubeconfig_path)
        print(f"apiserver listening on {server.url}", flush=True)
        await stop.wait()


def main(argv: Sequence[str]) -> int:
    settings, kubeconfig_path, level = parse_args(argv)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        asyncio.run(_serve(settings, kubeconfig_path))
    except OSError as err:
        print(f"apiserver: cannot listen on {settings.host}:{settings.port}: {err}", file=sys.stderr)
        return 1
    return 0
