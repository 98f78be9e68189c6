"""lockd's lock asks, served at the door (`stagger.framing.Door`, through which every connection to
lockd's port comes): the lock ask, `GET /v1/lock` (the init client's long poll: the request that waits, and
the one asked most), and pod-startup-lock's `GET /` are read and answered here with `lockd.asking`; any other
request goes on to aiohttp's own protocol, which serves the app's routes (`/status`, `/metrics`,
`DELETE /v1/lock`, ...).

Why: a long poll holds its connection for up to a minute, and a busy node holds hundreds or thousands of
them. Through aiohttp each waiting poll kept about 13 KiB (its parser and message, a request object, a
second task, the middlewares' wrappers); here it keeps the transport, the door's `Connection` and one task
whose frames are the wait itself (tests/benchmarks/waiter_memory_bench.py measures both).

What is read here is deliberately narrow, and everything else goes to aiohttp unchanged, which answers it as
it answers any request (malformed HTTP with a JSON 400, `serving.json_errors`): `GET` of `/v1/lock`, `/` or
either with `?...` over HTTP/1.1, well-formed header lines with one `Host`, and none of a body
(`Content-Length` other than 0, `Transfer-Encoding`), `Expect` or `Upgrade`. The door has already bounded
the head (`framing.MAX_HEAD`) and the time it took to arrive.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web

from lockd import asking
from stagger.contracts.lock import RELEASE_TOKEN_HEADER
from stagger.framing import Reply

__all__ = ["Ask", "Asks", "LockAsks", "lock_port", "parse_head"]

logger = logging.getLogger(__name__)

HEAD_CACHE = 64
"""Response heads kept encoded (`FrontDoor.head`)."""

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


Asks = Callable[[web.Application, Ask, str, Callable[[], bool]], Awaitable[asking.Answer]]
"""What answers the asks a door serves: (lockd's app, the ask, the caller's address, whether it is still there)."""


async def lock_port(app: web.Application, ask: Ask, peer: str, alive: Callable[[], bool]) -> asking.Answer:
    """The lock port's asks: `GET /v1/lock` (`asking.answer_ask`) and pod-startup-lock's `GET /`
    (`asking.answer_anonymous`)."""
    if ask.anonymous:
        return asking.answer_anonymous(app, raw_query=ask.raw_query)
    return await asking.answer_ask(
        app, raw_query=ask.raw_query, headers=ask.headers(), alive=alive, peer=peer
    )


@dataclass(eq=False)
class LockAsks:
    """lockd's `framing.Local`: the lock asks (and pod-startup-lock's `GET /`) the door serves itself,
    answered by `answer`; any other request is aiohttp's. Pod-startup-lock's own port
    (`lockd.startuplock`) passes its answer and `root_only`: there `GET /v1/lock` is aiohttp's too (404)."""

    app: web.Application
    answer: Asks = lock_port
    root_only: bool = False
    # Response heads, encoded once: a node's answers are few (423 with one body and Retry-After, mostly),
    # and building one (status phrase, lines, encoding) was a tenth of a 423's cost (tests/benchmarks/lockd.md).
    _heads: dict[tuple[int, int, tuple[tuple[str, str], ...], str, bool], bytes] = field(default_factory=dict)

    def __call__(self, head: bytes, *, peer: str, alive: Callable[[], bool]) -> Awaitable[Reply] | None:
        ask = parse_head(head)
        if ask is None or (self.root_only and not ask.anonymous):
            return None
        return self._serve(ask, peer=peer, alive=alive)

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

    async def _serve(self, ask: Ask, *, peer: str, alive: Callable[[], bool]) -> Reply:
        keep_alive = ask.keep_alive
        try:
            answer = await self.answer(self.app, ask, peer, alive)
        except Exception:
            logger.exception("error handling %r", ask.line)
            answer, keep_alive = asking.error(500, "internal error (see lockd's log)"), False
        return Reply(
            status=answer.status,
            keep_alive_head=self.head(answer, keep_alive=True) if keep_alive else b"",
            close_head=self.head(answer, keep_alive=False),
            body=answer.body,
            keep_alive=keep_alive,
            line=ask.line,
        )
