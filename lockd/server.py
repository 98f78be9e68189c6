"""Serving lockd's app: `stagger.serving` (the listening socket, slow and broken clients, signals and
graceful shutdown) with lockd's name in its errors.

lockd listens on a host port that every pod on the node can reach, so the server itself is hardened:
- a connection must send a whole request within `--header-timeout` (aiohttp's keep-alive timer, which
  also runs from the moment a connection is made), so a slow client cannot hold connections open;
- a request whose connection closes is cancelled (aiohttp's handler cancellation): a long-polling waiter
  that went away leaves the queue at once;
- malformed HTTP gets a JSON 400 like every other error, and one warning line in the log, not a
  traceback (aiohttp answers it before any handler or middleware runs, so its error handler is replaced).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from lockd import longpoll
from lockd.metrics import Metrics
from lockd.settings import ServerSettings
from stagger import serving
from stagger.serving import ListenError, Runner

__all__ = ["ListenError", "Runner", "make_runner", "serve"]


def make_runner(
    app: web.Application, *, settings: ServerSettings, metrics: Metrics, access_log: logging.Logger | None
) -> Runner:
    """lockd's runner: every connection comes in through the long-poll front door (`lockd.longpoll`),
    which answers the lock asks and hands the rest to aiohttp; at most `--max-connections` open
    (`serving.ConnectionLimit`: the oldest idle one closed for a new one, a new one refused when all are
    busy), each counted in `stagger_lockd_connections_shed_total`."""
    limit = serving.ConnectionLimit(most=settings.max_connections, shed=metrics.connections_shed.count)

    def front(aiohttp_protocol: Callable[[], RequestHandler]) -> longpoll.FrontDoor:
        return longpoll.FrontDoor(
            app=app,
            aiohttp_protocol=aiohttp_protocol,
            header_timeout=settings.header_timeout,
            limit=limit,
            access_log=access_log,
        )

    return serving.make_runner(
        app,
        header_timeout=settings.header_timeout,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=access_log,
        owner="lockd",
        front=front,
    )


async def serve(runner: Runner, *, host: str, port: int, started: Any = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully within the runner's shutdown timeout.

    Raises ListenError if the address cannot be bound (nothing was started then)."""
    await serving.serve(
        serving.Listener(runner, host, port),
        started=started,
        stopping="stopping: answering every long poll, then closing",
    )
