"""lockd's front door: every connection to lockd's port starts here. The lock ask, `GET /v1/lock` (the init
client's long poll: the request that waits, and the one asked most), and pod-startup-lock's `GET /` are read
and answered here with `lockd.asking`; any other request is handed, with the bytes read so far, to
aiohttp's own protocol, which serves the app's routes (`/status`, `/metrics`, `DELETE /v1/lock`, ...) as
before.

Why: a long poll holds its connection for up to a minute, and a busy node holds hundreds or thousands of
them. Through aiohttp each waiting poll kept about 13 KiB (its parser and message, a request object, a
second task, the middlewares' wrappers); here it keeps the transport, one `Connection` and one task whose
frames are the wait itself (tests/bench/waiter_memory_bench.py measures both).

What is read here is deliberately narrow, and everything else goes to aiohttp unchanged, which answers it as
it answers any request (malformed HTTP with a JSON 400, `serving.json_errors`): a complete head of at most
`MAX_HEAD` bytes, `GET` of `/v1/lock`, `/` or either with `?...` over HTTP/1.1, well-formed header lines
with one `Host`, and none of a body (`Content-Length` other than 0, `Transfer-Encoding`), `Expect` or
`Upgrade`.

The front door also owns what concerns every connection, served here or handed over: at most
`ConnectionLimit.most` open (the oldest idle one closed for a new one, the new one refused when all are
busy, as `serving.ConnectionLimit` says), a head must come within the header timeout, and on shutdown the
long polls in progress are answered (lockd's service answers them at once) before their connections close.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from lockd import asking
from stagger.contracts.lock import RELEASE_TOKEN_HEADER
from stagger.serving import ConnectionLimit

__all__ = ["MAX_HEAD", "Ask", "Connection", "FrontDoor", "parse_head"]

logger = logging.getLogger(__name__)

HEAD_CACHE = 64
"""Response heads kept encoded (`FrontDoor.head`)."""

MAX_HEAD = 8190
"""The longest head read here (aiohttp's own limit for a line); a longer one is aiohttp's to refuse."""

_TARGET = re.compile(rb"/v1/lock(?:\?[\x21-\x7e]*)?")
# pod-startup-lock's anonymous slot, `GET /?duration=S`: asked as often as the lock by its users.
_ANONYMOUS = re.compile(rb"/(?:\?[\x21-\x7e]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
# Headers whose presence means a request this door does not serve (a body, or a protocol switch).
_NOT_HERE = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


@dataclass(frozen=True, slots=True)
class Ask:
    """A lock ask read from a request head: what `asking.answer_ask` needs, and how to answer it."""

    raw_query: str
    authorization: str | None
    keep_alive: bool
    line: str  # the request line, for the access log
    anonymous: bool = False  # `GET /`, not `GET /v1/lock`

    def headers(self) -> Mapping[str, str]:
        return {} if self.authorization is None else {"Authorization": self.authorization}


def parse_head(head: bytes) -> Ask | None:
    """The ask in a request head (without its final blank line), or None when aiohttp should serve it."""
    lines = head.split(b"\r\n")
    method, _, rest = lines[0].partition(b" ")
    target, _, version = rest.partition(b" ")
    anonymous = _ANONYMOUS.fullmatch(target) is not None
    if method != b"GET" or version != b"HTTP/1.1" or (_TARGET.fullmatch(target) is None and not anonymous):
        return None
    authorization: bytes | None = None
    keep_alive = True
    hosts = 0
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        # No name, a space before the colon or a folded line (RFC 9112 5.1/5.2): aiohttp refuses those.
        if not colon or _TOKEN.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            return None
        name, value = name.lower(), value.strip(b" \t")
        if name in _NOT_HERE or (name == b"content-length" and value != b"0"):
            return None
        if name == b"host":
            hosts += 1
        elif name == b"authorization":
            if authorization is not None:
                return None
            authorization = value
        elif name == b"connection":
            options = {option.strip().lower() for option in value.split(b",")}
            if b"upgrade" in options:
                return None
            keep_alive = keep_alive and b"close" not in options
    if hosts != 1:
        return None  # HTTP/1.1 needs exactly one Host (RFC 9112 3.2): aiohttp says so with a 400
    query = target.partition(b"?")[2]
    return Ask(
        raw_query=query.decode("ascii"),
        authorization=None if authorization is None else authorization.decode("latin-1"),
        keep_alive=keep_alive,
        line=lines[0].decode("ascii", "replace"),
        anonymous=anonymous,
    )


@dataclass(eq=False)
class FrontDoor:
    """The connections of lockd's listener (`serving.Front`): makes a `Connection` for each, and keeps
    the limit, the header timeout and the shutdown for all of them."""

    app: web.Application
    aiohttp_protocol: Callable[[], RequestHandler]
    header_timeout: float
    limit: ConnectionLimit | None
    access_log: logging.Logger | None
    closing: bool = False
    # Every connection that came in, in the order it came (the oldest idle one is shed first); handed
    # ones stay until found closed, since their `connection_lost` goes to aiohttp's protocol.
    open: dict[Connection, None] = field(default_factory=dict)
    # Response heads, encoded once: a node's answers are few (423 with one body and Retry-After, mostly),
    # and building one (status phrase, lines, encoding) was a tenth of a 423's cost (tests/bench/lockd.md).
    _heads: dict[tuple[int, int, tuple[tuple[str, str], ...], str, bool], bytes] = field(default_factory=dict)

    def __call__(self) -> Connection:
        return Connection(self)

    def head(self, answer: asking.Answer, *, keep_alive: bool) -> bytes:
        if any(name == RELEASE_TOKEN_HEADER for name, _ in answer.headers):
            return answer.head(keep_alive=keep_alive)  # a first grant's token: a head of its own
        key = (answer.status, len(answer.body), answer.headers, answer.content_type, keep_alive)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= HEAD_CACHE:
                self._heads.clear()
            head = self._heads[key] = answer.head(keep_alive=keep_alive)
        return head

    def admit(self, new: Connection) -> bool:
        """Counts `new` in; over the limit, closes the oldest idle connection for it, or refuses it."""
        self.open[new] = None
        limit = self.limit
        if limit is None or len(self.open) <= limit.most:
            return True
        for gone in [conn for conn in self.open if conn.closed()]:
            del self.open[gone]
        if len(self.open) <= limit.most:
            return True
        idle = next((conn for conn in self.open if conn is not new and conn.idle()), None)
        if idle is not None:
            idle.abort()
            limit.shed("idleClosed")
            return True
        new.abort()
        limit.shed("refused")
        return False

    def pre_shutdown(self) -> None:
        """No new requests on kept-alive connections; those waiting for one close now."""
        self.closing = True
        for conn in list(self.open):
            if conn.idle() and not conn.handed():
                conn.close()

    async def shutdown(self, grace: float | None) -> None:
        """The long polls in progress get `grace` seconds to be answered (lockd's service answers them at once
        when it closes); then every connection served here closes. Handed ones are aiohttp's to close."""
        tasks = [task for conn in self.open if (task := conn.task()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for conn in list(self.open):
            if not conn.handed():
                conn.abort()
        self.open.clear()


class Connection(asyncio.Protocol):
    """One connection: reads a request head; serves a lock ask itself (a task per request, none while it
    waits for the next), hands anything else to aiohttp for the rest of the connection's life."""

    __slots__ = ("_buffer", "_door", "_handed", "_idle_since", "_task", "_timer", "_transport")

    def __init__(self, door: FrontDoor) -> None:
        self._door = door
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._task: asyncio.Task[None] | None = None
        self._handed: RequestHandler | None = None

    # --- what the door asks -----------------------------------------------------------------------

    def idle(self) -> bool:
        """No request in progress: waiting for a head (or, handed over, aiohttp's own flag)."""
        if self._handed is not None:
            return not self._handed._request_in_progress
        return self._task is None

    def handed(self) -> bool:
        return self._handed is not None

    def closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

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
        if self._door.admit(self):
            self._start_timer()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._task is None:
            self._next()
        elif len(self._buffer) > MAX_HEAD:
            # Bytes sent ahead while a poll waits (pipelining) are read after its answer, but not without bound.
            self.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._door.open.pop(self, None)
        self._stop_timer()
        if self._task is not None:
            # The caller went away: its long poll stops, and leaves the queue (`LockService.wait_for_slot`).
            self._task.cancel()

    # --- reading and serving ----------------------------------------------------------------------

    def _start_timer(self) -> None:
        """The header timeout counts from now. A timer already set is kept and re-armed when it fires
        early: a kept-alive connection asking again and again moves one number, not a timer."""
        loop = asyncio.get_running_loop()
        self._idle_since = loop.time()
        if self._timer is None:
            self._timer = loop.call_at(self._idle_since + self._door.header_timeout, self._timed_out)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._task is not None or self._handed is not None:
            return  # a request in progress: the timeout starts again after its answer
        due = self._idle_since + self._door.header_timeout
        if asyncio.get_running_loop().time() >= due:
            self.close()
        else:
            self._timer = asyncio.get_running_loop().call_at(due, self._timed_out)

    def _next(self) -> None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._hand_over()
            return
        ask = parse_head(bytes(self._buffer[:end])) if end <= MAX_HEAD else None
        if ask is None or self._door.closing:
            self._hand_over()
            return
        del self._buffer[: end + 4]
        self._task = asyncio.get_running_loop().create_task(self._serve(ask))

    def _alive(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def _serve(self, ask: Ask) -> None:
        keep_alive = ask.keep_alive
        try:
            if ask.anonymous:
                answer = asking.answer_anonymous(self._door.app, raw_query=ask.raw_query)
            else:
                answer = await asking.answer_ask(
                    self._door.app, raw_query=ask.raw_query, headers=ask.headers(), alive=self._alive
                )
        except Exception:
            logger.exception("error handling %r", ask.line)
            answer, keep_alive = asking.error(500, "internal error (see lockd's log)"), False
        transport = self._transport
        self._task = None
        if transport is None or transport.is_closing():
            return
        keep_alive = keep_alive and not self._door.closing
        transport.write(self._door.head(answer, keep_alive=keep_alive) + answer.body)
        if self._door.access_log is not None:
            peer = transport.get_extra_info("peername")
            remote = peer[0] if isinstance(peer, tuple) else "-"
            self._door.access_log.info('%s "%s" %d %d', remote, ask.line, answer.status, len(answer.body))
        if not keep_alive:
            transport.close()
            return
        self._start_timer()
        if self._buffer:
            self._next()

    def _hand_over(self) -> None:
        """The rest of this connection is aiohttp's: its protocol gets the transport and the bytes so far."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._stop_timer()
        handler = self._door.aiohttp_protocol()
        self._handed = handler
        transport.set_protocol(handler)
        handler.connection_made(transport)
        data, self._buffer = bytes(self._buffer), bytearray()
        if data:
            handler.data_received(data)
