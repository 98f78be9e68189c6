"""Serving lockd's app: the listening socket, slow and broken clients, signals and graceful shutdown.

lockd listens on a host port that every pod on the node can reach, so the server itself is hardened:
- a connection must send a whole request within `--header-timeout` (aiohttp's keep-alive timer, which
  also runs from the moment a connection is made), so a slow client cannot hold connections open;
- a request whose connection closes is cancelled (aiohttp's handler cancellation): a long-polling waiter
  that went away leaves the queue at once;
- malformed HTTP gets a JSON 400 like every other error, and one warning line in the log, not a
  traceback (aiohttp answers it before any handler or middleware runs, so its error handler is replaced).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

logger = logging.getLogger(__name__)


class _JsonErrorHandler(RequestHandler):
    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            # A bug in lockd, not a bad client: keep the traceback.
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            reason = "internal error (see lockd's log)"
        else:
            detail = (message or str(exc) or "malformed request")[:200]
            logger.warning("malformed HTTP request from %s: %r", request.remote, detail)
            reason = f"malformed HTTP request: {detail}"
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already started; cannot send the error")
        response = web.json_response({"error": reason}, status=status)
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    """An AppRunner whose connections answer malformed HTTP with JSON (see the module docstring)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer
        return server


def make_runner(
    app: web.Application, *, header_timeout: float, shutdown_timeout: float, access_log: logging.Logger | None
) -> Runner:
    return Runner(
        app,
        handler_cancellation=True,
        keepalive_timeout=header_timeout,
        shutdown_timeout=shutdown_timeout,
        access_log=access_log,
    )


class ListenError(OSError):
    """The address cannot be served (in use, not ours); the message says which and why."""


async def serve(runner: Runner, *, host: str, port: int, started: Any = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully within the runner's shutdown timeout.

    Raises ListenError if the address cannot be bound (nothing was started then)."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as err:
        await runner.cleanup()
        raise ListenError(err.errno, f"cannot listen on {host}:{port}: {err.strerror or err}") from err
    if started is not None:
        started()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
        logger.info("stopping: answering every long poll, then closing")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)
        await runner.cleanup()
