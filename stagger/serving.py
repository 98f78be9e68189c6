"""Serving a stagger process's aiohttp apps: listening sockets, slow and broken clients, signals and
graceful shutdown. lockd and the controller both serve through this.

Their ports face whole clusters (lockd's a host port every pod of the node can reach), so the server
itself is hardened:
- every connection comes in through a `stagger.framing.Door`: one deadline for each whole request, its
  head and body capped before they are buffered, a bounded number of connections, and what a closed
  connection held freed at once;
- a request whose connection closes is cancelled (aiohttp's handler cancellation): a long-polling waiter
  that went away stops at once;
- malformed HTTP gets a JSON 400 like every other error, and one warning line in the log, not a
  traceback (aiohttp answers it before any handler or middleware runs, so its error handler is replaced);
  neither quotes the bytes of the request (a broken header line may be one that carries a token).

`serve` starts one or more listeners (an app on an address, with TLS or without), then on SIGTERM or
SIGINT stops them all together, each finishing its requests within its runner's shutdown timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import ssl
from asyncio import sslproto
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestHandler

from stagger import framing
from stagger.contracts.errors import ErrorBody
from stagger.framing import json_body

__all__ = [
    "PROBE_BOUNDS",
    "ListenError",
    "Listener",
    "Runner",
    "json_body",
    "json_errors",
    "json_response",
    "make_runner",
    "serve",
    "set_tls_read_buffer",
]

logger = logging.getLogger(__name__)


class _JsonErrorHandler(RequestHandler):
    owner = "the server"

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            # A bug in the process, not a bad client: keep the traceback.
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            reason = f"internal error (see {self.owner}'s log)"
        else:
            detail = _without_data(message or str(exc) or "malformed request")
            logger.warning("malformed HTTP request from %s: %r", request.remote, detail)
            reason = f"malformed HTTP request: {detail}"
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already started; cannot send the error")
        response = json_response({"error": reason}, status=status)
        response.force_close()
        return response


_QUOTED = re.compile(r"b?'(?:[^'\\]|\\.)*'" + "|" + r'b?"(?:[^"\\]|\\.)*"')


def _without_data(message: str) -> str:
    """aiohttp's description of what is wrong with a request, without the bytes it quotes ("Invalid
    header value char:\\n\\n  b'Authorization: Bearer ...'", "Invalid HTTP header: b'...'", "Got more
    than 8190 bytes when reading: b'...'"): the line quoted is often a header, and headers carry the
    grant API's bearer token and lockd's release tokens, which must never reach a log."""
    first = _QUOTED.sub("(...)", message.split("\n", 1)[0])
    # A quote left open (a message cut short) still opens data: drop everything from it.
    kept = re.split("['\"]", first, maxsplit=1)[0]
    return kept.rstrip(": ")[:200] or "malformed request"


class _JsonErrorServer(web.Server):
    """aiohttp's server whose connections each start at a `framing.Door` (set by `Runner`)."""

    owner = "the server"
    door: framing.Door | None = None

    def handler(self) -> RequestHandler:
        """aiohttp's protocol for one connection, answering malformed HTTP with JSON."""
        handler = _JsonErrorHandler(self, loop=self._loop, **self._kwargs)
        handler.owner = self.owner
        return handler

    def __call__(self) -> asyncio.Protocol:  # type: ignore[override]
        assert self.door is not None
        return self.door()

    def pre_shutdown(self) -> None:
        if self.door is not None:
            self.door.pre_shutdown()
        super().pre_shutdown()

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - aiohttp's signature
        if self.door is not None:
            await self.door.shutdown(timeout)
        await super().shutdown(timeout)


class Runner(web.AppRunner):
    """An AppRunner whose every connection comes in through a `framing.Door` with `bounds` (see the
    module docstring of `stagger.framing`), and answers malformed HTTP with JSON. `owner` names the
    process in the reason of a 500 ("see lockd's log")."""

    def __init__(
        self,
        app: web.Application,
        *,
        bounds: framing.Bounds,
        owner: str = "the server",
        local: framing.Local | None = None,
        shed: Callable[[str], None] | None = None,
        refused: Callable[[int], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._owner = owner
        self._local = local
        self._shed = shed
        self._refused = refused
        self.bounds = bounds
        self.door: framing.Door | None = None

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _JsonErrorServer
        ours = cast(_JsonErrorServer, server)
        ours.owner = self._owner
        most = self.bounds.max_connections
        self.door = ours.door = framing.Door(
            bounds=self.bounds,
            aiohttp_protocol=ours.handler,
            limit=None if most is None else framing.ConnectionLimit(most=most, shed=self._shed or _no_shed),
            local=self._local,
            access_log=self._kwargs.get("access_log"),
            refused=self._refused or _no_refusal,
        )
        return server


PROBE_BOUNDS = framing.Bounds(request_timeout=5.0, max_body=1024, max_connections=64)
"""A probe listener's (`--probe-listen`): the kubelet and Prometheus ask now and then, with no body."""


def _no_shed(why: str) -> None:
    pass


def _no_refusal(status: int) -> None:
    pass


def make_runner(
    app: web.Application,
    *,
    bounds: framing.Bounds,
    shutdown_timeout: float,
    access_log: logging.Logger | None,
    owner: str = "the server",
    local: framing.Local | None = None,
    shed: Callable[[str], None] | None = None,
    refused: Callable[[int], None] | None = None,
) -> Runner:
    """The runner of one listener: `shed` and `refused` count the connections the limit closed and the
    requests the door refused (by status), for the process's metrics."""
    return Runner(
        app,
        bounds=bounds,
        owner=owner,
        local=local,
        shed=shed,
        refused=refused,
        handler_cancellation=True,
        # aiohttp closes a connection idle this long after its answer; the door bounds each request.
        keepalive_timeout=bounds.request_timeout,
        shutdown_timeout=shutdown_timeout,
        access_log=access_log,
    )


def set_tls_read_buffer(size: int) -> None:
    """Let asyncio's TLS connections of this process read with a buffer of `size` bytes.

    asyncio allocates a read buffer of `SSLProtocol.max_size` (256 KiB) for every TLS connection, client or
    server (Lib/asyncio/sslproto.py: `self._ssl_buffer = bytearray(self.max_size)`), and a documented
    setting to change it there is not: it is a class attribute. The controller holds one long poll open per
    node, so at 5,000 nodes that buffer alone is 1.25 GiB (tests/benchmarks REPORT.md, section 5). A TLS record
    carries at most 16 KiB of data, so a buffer of one record loses nothing but a few more reads of a large
    body. Process-wide by necessity: called from a `__main__`, never by a library."""
    if size < 1024:
        raise ValueError(f"a TLS read buffer of {size} bytes is too small (at least 1024)")
    sslproto.SSLProtocol.max_size = size


class ListenError(OSError):
    """The address cannot be served (in use, not ours); the message says which and why."""


@dataclass(frozen=True)
class Listener:
    """One app served on one address; with `ssl_context`, over TLS."""

    runner: web.AppRunner
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None

    def bound(self) -> tuple[str, int]:
        """The address actually listened on (port 0 asks the system for a free port); after `serve` started."""
        address = self.runner.addresses[0]
        return str(address[0]), int(address[1])


class _Site(web.TCPSite):
    """aiohttp's TCPSite, with a bound on the TLS handshake: asyncio's default is 60 s, and a connection
    still shaking hands is not yet the door's to bound, so a flood of slow handshakes would hold that long."""

    def __init__(self, listener: Listener, *, handshake_timeout: float) -> None:
        super().__init__(
            listener.runner,
            listener.host,
            listener.port,
            ssl_context=listener.ssl_context,
            reuse_address=True,
        )
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner, as TCPSite.start does first
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            ssl_handshake_timeout=self._handshake_timeout if self._ssl_context is not None else None,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


async def _start(listener: Listener) -> None:
    runner = listener.runner
    timeout = runner.bounds.request_timeout if isinstance(runner, Runner) else 60.0
    site = _Site(listener, handshake_timeout=timeout)
    try:
        await site.start()
    except OSError as err:
        raise ListenError(
            err.errno, f"cannot listen on {listener.host}:{listener.port}: {err.strerror or err}"
        ) from err


async def _cleanup(listeners: Sequence[Listener]) -> None:
    # Together: the shutdown takes as long as the slowest runner's timeout, not their sum.
    await asyncio.gather(*(listener.runner.cleanup() for listener in listeners))


async def serve(
    *listeners: Listener,
    started: Callable[[], object] | None = None,
    stopping: str = "stopping",
) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully within the runners' shutdown timeout;
    `started` is called once every listener listens, `stopping` is logged on the signal.

    Raises ListenError if an address cannot be bound (nothing is left running then)."""
    # Signals first: a SIGTERM that comes as soon as `started` has told the world stops us gracefully.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running: list[Listener] = []
    try:
        for listener in listeners:
            await listener.runner.setup()
            running.append(listener)
            await _start(listener)
        if started is not None:
            started()
        await stop.wait()
        logger.info("%s", stopping)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)
        await _cleanup(running)


def json_response(
    body: object, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """Every JSON answer of lockd and the controller (`web.json_response`, with `json_body`'s newline)."""
    return web.Response(
        body=json_body(body), status=status, headers=headers, content_type="application/json", charset="utf-8"
    )


# What an error answer keeps of the exception's headers: what a client needs to go on.
_KEPT_HEADERS = ("allow", "retry-after")


def json_errors(*, max_body: int, read_first: bool) -> Middleware:
    """The middleware that makes every error answer JSON with a reason (`ErrorBody`; 404, 405 and 413
    included), keeping `Allow` and `Retry-After`. A body over `max_body` (the app's `client_max_size`) is
    a 413 that says the limit. With `read_first`, the body is read before the handler runs, so that limit
    holds for chunked bodies too and before any handler sees the request (lockd's, whose handlers read
    only the query); without it the handlers read the body themselves."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if read_first and request.body_exists:
                await request.read()  # enforces client_max_size (413) also for chunked bodies
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            reason = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
            if exc.status == 413:
                reason = f"request body too large: at most {max_body} bytes"
            headers = {k: v for k, v in exc.headers.items() if k.lower() in _KEPT_HEADERS}
            body: ErrorBody = {"error": reason}
            return json_response(body, status=exc.status, headers=headers)

    return middleware


def background(
    name: str, run: Callable[[web.Application], Coroutine[Any, Any, None]]
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A `cleanup_ctx` entry (aiohttp's documented way to run a background task): `run(app)` runs as the
    task `name` while the app does, and is cancelled, and awaited, when the app shuts down."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(run(app), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context
