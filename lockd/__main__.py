"""`python -m lockd`: start the node lock daemon."""

from __future__ import annotations

import logging
import sys
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from lockd import app as lockd_app
from lockd import appstate, daemon, server
from lockd.settings import Settings, parse_settings
from stagger import kube, serving, startup


def banner(settings: Settings) -> str:
    base = f"http://{settings.server.host}:{settings.server.port}"
    mode = "standalone" if settings.standalone else "cluster"
    # In a cluster only a pod of this node with its uid gets a slot: show a request that can work.
    ident = "namespace=default&name=demo" + ("" if settings.standalone else "&uid=<the pod's metadata.uid>")
    return (
        f"lockd ({mode}) on {base} for node {settings.node.node_name}. Try:\n"
        f"  curl -s '{base}/v1/lock?{ident}'\n"
        f"  curl -s '{base}/status?format=text'"
        + (
            f"\nprobes on http://{settings.server.probe_host}:{settings.server.probe_port} (/healthz /readyz)"
            if settings.server.probe_host is not None
            else ""
        )
        + (
            f"\npod-startup-lock's init clients on http://{settings.server.host}:"
            f"{settings.server.pod_startup_lock_port}/ (GET /)"
            if settings.server.pod_startup_lock_port
            else ""
        )
    )


def serve(settings: Settings, application: web.Application) -> Coroutine[Any, Any, None]:
    """lockd's listener, its probes' when `--probe-listen` is set and pod-startup-lock's with
    `--pod-startup-lock-port`, until SIGTERM or SIGINT."""
    access_log = logging.getLogger("lockd.access") if settings.log_level == "debug" else None
    runner = server.make_runner(
        application, settings=settings.server, metrics=application[appstate.METRICS], access_log=access_log
    )
    listeners = [serving.Listener(runner, settings.server.host, settings.server.port)]
    if settings.server.pod_startup_lock_port:
        from lockd import startuplock  # only with the port: a lockd without it never loads it

        peer = startuplock.make_runner(application, settings=settings, access_log=access_log)
        listeners.append(serving.Listener(peer, settings.server.host, settings.server.pod_startup_lock_port))
    if settings.server.probe_host is not None:
        probes = server.make_probe_runner(lockd_app.make_probe_app(application), settings=settings.server)
        listeners.append(serving.Listener(probes, settings.server.probe_host, settings.server.probe_port))
    return server.serve(*listeners, started=lambda: print(banner(settings), file=sys.stderr, flush=True))


def main(argv: list[str] | None = None) -> int:
    return startup.run(
        "lockd",
        argv=argv,
        parse=parse_settings,
        build=daemon.make_app,
        refusals=[(kube.ConfigError, "cannot reach the cluster (or run with --standalone): ")],
        serve=serve,
    )


if __name__ == "__main__":
    sys.exit(main())
