"""Serving lockd's app: `stagger.serving` (the listening socket, the door that bounds every request, slow and
broken clients, signals and graceful shutdown) with lockd's name in its errors, its lock asks served at the
door (`lockd.longpoll`), and its probes on a listener of their own.

pod-startup-lock's port (`--pod-startup-lock-port`, `lockd.startuplock`) is served by the same runner with
its own answer at the door and its own small app: the same bounds, a door and a connection limit of its own.

lockd listens on a host port that every pod on the node can reach, so what one caller can make it hold is
bounded (`stagger.framing`): each whole request within `--header-timeout`, heads of at most 8 KiB, bodies of
at most `--max-body`, at most `--max-connections` open. The kubelet's probes go to `--probe-listen`, whose
connections are apart from the lock port's: no flood there can fail them.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from lockd import longpoll
from lockd.metrics import Metrics
from lockd.settings import ServerSettings
from stagger import framing, serving
from stagger.serving import ListenError, Runner

__all__ = ["ListenError", "Runner", "make_probe_runner", "make_runner", "serve"]


def make_runner(
    app: web.Application,
    *,
    settings: ServerSettings,
    metrics: Metrics,
    access_log: logging.Logger | None,
    local: framing.Local | None = None,
) -> Runner:
    """lockd's runner: every connection comes in through the door (`stagger.framing`), which answers the
    lock asks (`lockd.longpoll`; `local` instead, for pod-startup-lock's port: `lockd.startuplock`) and
    passes the rest to aiohttp; the connections the limit closed and the requests it refused are counted
    (`stagger_lockd_connections_shed_total`, `stagger_lockd_requests_refused_total`)."""
    return serving.make_runner(
        app,
        bounds=framing.Bounds(
            request_timeout=settings.header_timeout,
            max_body=settings.max_body,
            max_connections=settings.max_connections,
        ),
        shutdown_timeout=settings.shutdown_timeout,
        access_log=access_log,
        owner="lockd",
        local=longpoll.LockAsks(app) if local is None else local,
        shed=metrics.connections_shed.count,
        refused=metrics.count_refused,
    )


def make_probe_runner(app: web.Application, *, settings: ServerSettings) -> Runner:
    """`/healthz` and `/readyz` on `--probe-listen`, for the kubelet alone."""
    return serving.make_runner(
        app,
        bounds=serving.PROBE_BOUNDS,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=None,
        owner="lockd",
    )


async def serve(*listeners: serving.Listener, started: Any = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully within the runners' shutdown timeout.

    Raises ListenError if an address cannot be bound (nothing was started then)."""
    await serving.serve(
        *listeners,
        started=started,
        stopping="stopping: answering every long poll, then closing",
    )
