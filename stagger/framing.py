"""Every connection of lockd and the controller starts here: each request is framed and bounded before any
handler, aiohttp's included, sees a byte of it.

Both ports face hostile callers (lockd's is a host port every pod on the node can reach; the controller's
webhook port every pod of the cluster), and aiohttp alone bounds neither a request's time nor its head as a
whole (it limits each header line, not how many, and its timers count idle time, not a slow request). So a
`Door` per listener owns what concerns every connection:

- **one deadline for the whole request**, head and body: `Bounds.request_timeout` from the request's first
  byte (from the connection's start for its first request). A request that has not fully arrived by then
  gets 408 and its connection closes. Once a request is whole the deadline stops: the answer takes as long
  as the app says (a long poll waits up to a minute);
- **sizes capped before anything is buffered**: a head over `Bounds.max_head` bytes gets 431, a body
  declared over `Bounds.max_body` gets 413, a chunked body (no length to check first) 411, all without
  reading the rest; and the bodies being received at once hold at most `Bounds.body_budget` bytes, a
  quarter of it per caller address (503 with Retry-After beyond), so that many slow bodies cannot add up;
- **at most `Bounds.max_connections` open**: the oldest one with no request being served (a flood's idle
  or slow connection, a keep-alive one between requests) is closed for a new one; when every one is being
  served (long polls: pods waiting keep their places), the new one is refused (`ConnectionLimit`);
- **what a closed connection held is freed at once**: the door stays each connection's protocol, so its
  `connection_lost` drops the connection from the table, its buffer and its reservation, and then tells
  aiohttp's protocol, which frees its own;
- a process may serve some requests itself, before aiohttp (`Local`: lockd's lock asks, its most frequent
  and longest requests, which cost far less this way); everything else goes to aiohttp's protocol, whole
  heads and bodies only, as the bytes arrive.

The door's own answers (408, 411, 413, 431, 503) are JSON like every other error (`ErrorBody`), with
`Connection: close`; where aiohttp is answering an earlier request on the same connection, the door closes
it without an answer instead of writing into that answer.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp.web_protocol import RequestHandler

from stagger.contracts.errors import ErrorBody

__all__ = [
    "MAX_HEAD",
    "Bounds",
    "Connection",
    "ConnectionLimit",
    "Door",
    "Framed",
    "Local",
    "Refusal",
    "Reply",
    "frame_head",
    "json_body",
]

logger = logging.getLogger(__name__)

MAX_HEAD = 8190
"""The longest request head taken, request line and headers together (aiohttp's limit for one line)."""

PEER_SHARE = 4
"""One caller address may hold at most 1/PEER_SHARE of the body budget."""

LINGER = 2.0
"""After a refusal, the seconds the door goes on reading (and dropping) what the caller still sends before
it closes: a caller still sending its body then reads the refusal instead of a reset connection."""


@dataclass(frozen=True)
class Bounds:
    """What one listener takes from its callers."""

    request_timeout: float
    max_body: int
    max_connections: int | None = None
    max_head: int = MAX_HEAD
    # Bytes of bodies being received at once, all connections together; None: max_connections * max_body
    # is bound enough (lockd, whose bodies are a few KiB at most).
    body_budget: int | None = None


@dataclass
class ConnectionLimit:
    """At most `most` connections open at once; each connection closed or refused for the limit is
    reported to `shed` ("idleClosed", "refused")."""

    most: int
    shed: Callable[[str], None] = lambda why: None


@dataclass(frozen=True, slots=True)
class Framed:
    """A request head that may go on: how many body bytes follow it."""

    content_length: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request head that goes no further: the door's answer."""

    status: int
    reason: str
    retry_after: int | None = None


def frame_head(head: bytes, *, max_body: int) -> Framed | Refusal:
    """How long the body after `head` (without its final blank line) is, or why the request is refused.

    Only the framing is read here (RFC 9112 6: a body has a Content-Length, or is chunked, or is absent);
    everything else in the head is aiohttp's to check. A request that declares a body it may not send is
    refused before a byte of it is read."""
    lengths: list[bytes] = []
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue  # aiohttp refuses it with a 400
        name = name.strip().lower()
        if name == b"transfer-encoding":
            return Refusal(411, "a request body needs a Content-Length (chunked bodies are not taken)")
        if name == b"content-length":
            lengths.append(value.strip(b" \t"))
    if not lengths:
        return Framed(0)
    if len(set(lengths)) > 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        return Refusal(400, "malformed HTTP request: bad Content-Length")
    length = int(lengths[0])
    if length > max_body:
        return Refusal(413, f"request body too large: at most {max_body} bytes")
    return Framed(length)


@dataclass(frozen=True, slots=True)
class Reply:
    """A request the door's `Local` served: its whole answer, encoded with and without keep-alive."""

    status: int
    keep_alive_head: bytes
    close_head: bytes
    body: bytes
    keep_alive: bool
    line: str  # the request line, for the access log


class Local(Protocol):
    """Requests a process serves before aiohttp (lockd's lock asks)."""

    def __call__(self, head: bytes, *, peer: str, alive: Callable[[], bool]) -> Awaitable[Reply] | None:
        """The answer to the request with this head (it has no body), or None for aiohttp to serve.
        `alive()` says whether the caller is still there while the answer waits."""
        ...


def _error_response(refusal: Refusal) -> bytes:
    error: ErrorBody = {"error": refusal.reason}
    body = json_body(error)
    lines = [
        f"HTTP/1.1 {refusal.status} {http.HTTPStatus(refusal.status).phrase}",
        "Content-Type: application/json; charset=utf-8",
        f"Content-Length: {len(body)}",
        *([f"Retry-After: {refusal.retry_after}"] if refusal.retry_after is not None else []),
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def json_body(body: object) -> bytes:
    """A JSON answer's bytes: UTF-8, ending in a newline, so that two answers printed by `curl` one after
    the other do not run together on one line (JSON readers skip the trailing whitespace). Every JSON answer
    of lockd and the controller, the door's own included (`stagger.serving` serves it from here)."""
    return json.dumps(body).encode() + b"\n"


@dataclass(eq=False)
class Door:
    """The connections of one listener: makes a `Connection` for each (it is the listener's protocol
    factory) and keeps the limits, the body budget and the shutdown for all of them."""

    bounds: Bounds
    aiohttp_protocol: Callable[[], RequestHandler]
    limit: ConnectionLimit | None = None
    local: Local | None = None
    access_log: logging.Logger | None = None
    # Counts what the door refused, by status ("408", "431", ...): the process's metric.
    refused: Callable[[int], None] = lambda status: None
    closing: bool = False
    # Every open connection, in the order it came (the oldest idle one is shed first).
    open: dict[Connection, None] = field(default_factory=dict)
    body_bytes: int = 0
    peer_body_bytes: dict[str, int] = field(default_factory=dict)

    def __call__(self) -> Connection:
        return Connection(self)

    def admit(self, new: Connection) -> bool:
        """Counts `new` in; over the limit, closes the oldest idle connection for it, or refuses it."""
        self.open[new] = None
        limit = self.limit
        if limit is None or len(self.open) <= limit.most:
            return True
        idle = next((conn for conn in self.open if conn is not new and conn.idle()), None)
        if idle is not None:
            idle.abort()
            limit.shed("idleClosed")
            return True
        new.abort()
        limit.shed("refused")
        return False

    def reserve(self, peer: str, size: int) -> Refusal | None:
        """Room for a body of `size` bytes from `peer`, or why there is none now."""
        budget = self.bounds.body_budget
        if budget is None or size == 0:
            return None
        held = self.peer_body_bytes.get(peer, 0)
        if self.body_bytes + size > budget or held + size > budget // PEER_SHARE:
            return Refusal(503, "too many request bodies being received at once; try again", retry_after=1)
        self.body_bytes += size
        self.peer_body_bytes[peer] = held + size
        return None

    def release(self, peer: str, size: int) -> None:
        if size == 0 or self.bounds.body_budget is None:
            return
        self.body_bytes -= size
        left = self.peer_body_bytes.get(peer, 0) - size
        if left > 0:
            self.peer_body_bytes[peer] = left
        else:
            self.peer_body_bytes.pop(peer, None)

    def pre_shutdown(self) -> None:
        """No new requests on kept-alive connections; those waiting for one close now."""
        self.closing = True
        for conn in list(self.open):
            if conn.idle() and not conn.handed():
                conn.close()

    async def shutdown(self, grace: float | None) -> None:
        """The requests served here get `grace` seconds to be answered (lockd's service answers its long
        polls at once when it closes); then every connection not handed to aiohttp closes (aiohttp closes
        its own)."""
        tasks = [task for conn in self.open if (task := conn.task()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for conn in list(self.open):
            if not conn.handed():
                conn.abort()


class Connection(asyncio.Protocol):
    """One connection: reads each request's head, then serves it (`Local`) or passes it, and its body as
    it arrives, to aiohttp's protocol, which has the connection from then on for its answers."""

    __slots__ = (
        "_body_left",
        "_buffer",
        "_door",
        "_handler",
        "_lingering",
        "_peer",
        "_reserved",
        "_task",
        "_timer",
        "_transport",
    )

    def __init__(self, door: Door) -> None:
        self._door = door
        self._transport: asyncio.Transport | None = None
        self._peer = "-"
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._handler: RequestHandler | None = None
        self._body_left = 0
        self._reserved = 0
        self._lingering = False

    # --- what the door asks -----------------------------------------------------------------------

    def idle(self) -> bool:
        """No request being served: none asked yet, or one still arriving, or between two."""
        if self._task is not None:
            return False
        return self._handler is None or not self._handler._request_in_progress

    def handed(self) -> bool:
        return self._handler is not None

    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # --- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) else "-"
        if self._door.admit(self):
            self._start_deadline()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # refused: what follows is dropped until the connection closes
        if self._body_left:
            data = self._pass_body(data)
            if not data:
                return
        self._buffer += data
        if self._task is None:
            self._next()
        elif len(self._buffer) > self._door.bounds.max_head:
            # Bytes sent ahead while a request is served here (pipelining) wait for its answer, within bounds.
            self.abort()

    def eof_received(self) -> None:
        # None: the transport closes itself, as it does for aiohttp's protocol (whose eof_received is a no-op).
        return None

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._door.open.pop(self, None)
        self._stop_deadline()
        self._done_receiving()
        self._buffer = bytearray()
        self._transport = None
        if self._task is not None:
            # The caller went away: a long poll stops, and leaves its queue.
            self._task.cancel()
        if self._handler is not None:
            handler, self._handler = self._handler, None
            handler.connection_lost(exc)

    # --- the deadline -----------------------------------------------------------------------------

    def _start_deadline(self) -> None:
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(loop.time() + self._door.bounds.request_timeout, self._timed_out)

    def _stop_deadline(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._buffer or self._body_left:
            self._door.refused(408)
            self._refuse(Refusal(408, "the request did not arrive in time"))
        else:
            self.close()  # no request begun: an idle connection closes quietly

    # --- reading ----------------------------------------------------------------------------------

    def _next(self) -> None:
        """Takes the requests whose heads are whole, one after the other, until one is served here or its
        body has yet to arrive."""
        bounds = self._door.bounds
        while self._buffer and self._task is None and not self._body_left and self._transport is not None:
            self._start_deadline()
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0 or end > bounds.max_head:
                if end > bounds.max_head or len(self._buffer) > bounds.max_head:
                    self._door.refused(431)
                    self._refuse(Refusal(431, f"request head too large: at most {bounds.max_head} bytes"))
                return
            head = bytes(self._buffer[:end])
            del self._buffer[: end + 4]
            if self._serve_here(head):
                return
            framed = frame_head(head, max_body=bounds.max_body)
            if isinstance(framed, Framed):
                framed = self._door.reserve(self._peer, framed.content_length) or framed
            if isinstance(framed, Refusal):
                self._door.refused(framed.status)
                self._refuse(framed)
                return
            self._reserved = self._body_left = framed.content_length
            self._pass(head + b"\r\n\r\n")
            rest, self._buffer = bytes(self._buffer), bytearray()
            rest = self._pass_body(rest) if self._body_left else rest
            self._buffer += rest
            if not self._body_left:
                self._done_receiving()

    def _pass_body(self, data: bytes) -> bytes:
        """Passes what belongs to the current request's body to aiohttp; returns the bytes after it."""
        take = min(len(data), self._body_left)
        self._body_left -= take
        self._pass(data[:take])
        if not self._body_left:
            self._done_receiving()
        return data[take:]

    def _done_receiving(self) -> None:
        """The request is whole (or the connection gone): its deadline and its reservation end."""
        if self._body_left == 0:
            self._stop_deadline()
        if self._reserved:
            self._door.release(self._peer, self._reserved)
            self._reserved = 0

    def _pass(self, data: bytes) -> None:
        if not data:
            return
        handler = self._handler
        if handler is None:
            handler = self._handler = self._door.aiohttp_protocol()
            assert self._transport is not None
            handler.connection_made(self._transport)
        handler.data_received(data)

    def _refuse(self, refusal: Refusal) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._handler is not None and not self.idle():
            transport.abort()  # aiohttp is answering an earlier request on this connection
            return
        transport.write(_error_response(refusal))
        self._stop_deadline()
        self._done_receiving()
        self._body_left = 0
        self._buffer = bytearray()
        self._lingering = True
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + min(LINGER, self._door.bounds.request_timeout), self.close)

    # --- serving here -----------------------------------------------------------------------------

    def _serve_here(self, head: bytes) -> bool:
        local = self._door.local
        if local is None or self._handler is not None or self._door.closing:
            return False
        answer = local(head, peer=self._peer, alive=self._alive)
        if answer is None:
            return False
        self._stop_deadline()
        self._task = asyncio.get_running_loop().create_task(self._answer(answer))
        return True

    def _alive(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def _answer(self, answer: Awaitable[Reply]) -> None:
        try:
            reply = await answer
        finally:
            self._task = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        keep_alive = reply.keep_alive and not self._door.closing
        transport.write((reply.keep_alive_head if keep_alive else reply.close_head) + reply.body)
        if self._door.access_log is not None:
            self._door.access_log.info('%s "%s" %d %d', self._peer, reply.line, reply.status, len(reply.body))
        if not keep_alive:
            transport.close()
            return
        self._start_deadline()  # the next request, or the idle keep-alive connection's end
        self._next()
