"""A small HTTP/1.1 client for the init client's exchanges with lockd: one request per connection
(`Connection: close`), over `socket` (and `ssl` for an https URL), under one deadline for the whole
exchange.

Why not `requests`: its timeouts are per socket operation, so a server that sends a status line and then
one byte every few seconds held the init client until max-wait, past its unreachable bound; and it costs
the init container most of its start-up time and memory. Here every socket operation (name lookup,
connect, TLS handshake, send, each read of the head and body) gets what is left of one deadline, and the
answer is bounded in size: a head over `MAX_HEAD` or a body over `MAX_BODY` is an error, not a read
without end. Proxy variables are never read (lockd is node-local).

The request builder (`build_request`) and the answer's parsers (`parse_head`, `body_length`) are pure
functions of bytes; `exchange` is the I/O around them. Every failure to get a whole answer is an
`HttpError` (`TimedOut` when the deadline passed), with a short text for the log.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import SplitResult, quote, urlencode, urlsplit

from stagger.durations import format_duration

if TYPE_CHECKING:
    import ssl

__all__ = [
    "MAX_BODY",
    "MAX_HEAD",
    "Head",
    "HttpError",
    "Response",
    "Target",
    "TimedOut",
    "body_length",
    "build_request",
    "exchange",
    "parse_head",
    "target_of",
]

logger = logging.getLogger(__name__)

# lockd's answers are a status line, a few headers and a JSON object of a few hundred bytes.
MAX_HEAD = 16 * 1024
MAX_BODY = 256 * 1024
_READ_SIZE = 16 * 1024
_HEAD_END = b"\r\n\r\n"
# Characters that would end a header line early (header injection from a token file, say).
_LINE_BREAKERS = frozenset("\r\n\0")

Method = Literal["GET", "DELETE"]
_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]


class HttpError(Exception):
    """No whole HTTP answer; the message is short, for the log, e.g. "Connection refused"."""


class TimedOut(HttpError):
    """The deadline passed."""


@dataclass(frozen=True)
class Target:
    """Where a URL's requests go."""

    scheme: Literal["http", "https"]
    host: str  # without brackets for IPv6
    port: int
    host_header: str  # as it goes in `Host:`
    path: str  # the URL's own path, without a trailing slash; request paths go after it


@dataclass(frozen=True)
class Head:
    status: int
    reason: str
    headers: Mapping[str, str]  # names lower-cased; a repeated header's values joined with ", "


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes


# ---------------------------------------------------------------------------------------------
# pure: the request's bytes, the answer's head and length


def target_of(url: str) -> Target:
    """The target of an http(s) URL; ValueError when it cannot be one (settings check URLs first)."""
    parts: SplitResult = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    default = (parts.scheme, port) in (("http", 80), ("https", 443))
    return Target(
        scheme="https" if parts.scheme == "https" else "http",
        host=host,
        port=port,
        host_header=shown if default else f"{shown}:{port}",
        path=parts.path.rstrip("/"),
    )


def _checked_line(text: str, *, what: str) -> str:
    if _LINE_BREAKERS.intersection(text):
        raise HttpError(f"{what} has a line break or NUL")
    return text


def build_request(
    *,
    method: Method,
    target: Target,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes = b"",
) -> bytes:
    """The whole request; HttpError when a header would break the request's lines."""
    target_path = quote(f"{target.path}{path}", safe="/%:@!$&'()*+,;=")
    if query:
        target_path += "?" + urlencode(query, quote_via=quote)
    lines = [
        f"{method} {target_path} HTTP/1.1",
        f"Host: {target.host_header}",
        "Accept: application/json",
        "Connection: close",
        "User-Agent: stagger-initclient",
    ]
    if body or method not in ("GET", "DELETE"):
        lines.append(f"Content-Length: {len(body)}")
    for name, value in headers.items():
        lines.append(f"{_checked_line(name, what='a header name')}: {_checked_line(value, what=name)}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError as err:
        raise HttpError(f"a header is not latin-1: {err.reason}") from err
    return head + body


def parse_head(data: bytes) -> Head:
    """The status line and headers of an answer (`data` up to the blank line); HttpError when it is not an
    HTTP/1.x answer head."""
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError as err:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError("not an HTTP answer") from err
    status_line, *header_lines = text.split("\r\n")
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit() or code[0] not in "12345":
        raise HttpError(f"not an HTTP answer: {_shown(status_line)}")
    status = int(code)
    if status < 200:
        # Nothing here asks for an interim answer (no Expect: 100-continue, no upgrade).
        raise HttpError(f"unexpected interim answer: {_shown(status_line)}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise HttpError(f"bad header line: {_shown(line)}")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Head(status=status, reason=reason, headers=headers)


def body_length(head: Head) -> int | None:
    """How many body bytes follow the head; None: up to the end of the connection. HttpError when the
    head does not say it in a way this client reads, or says more than MAX_BODY."""
    if head.status in (204, 304):
        return 0
    if "transfer-encoding" in head.headers:
        # lockd sends Content-Length; a chunked answer is not one of ours.
        raise HttpError(f"unsupported Transfer-Encoding: {_shown(head.headers['transfer-encoding'])}")
    value = head.headers.get("content-length")
    if value is None:
        return None
    values = {item.strip() for item in value.split(",")}
    if len(values) != 1 or not (number := values.pop()).isdigit() or not number.isascii():
        raise HttpError(f"bad Content-Length: {_shown(value)}")
    length = int(number)
    if length > MAX_BODY:
        raise HttpError(f"answer too large: Content-Length {length} is over {MAX_BODY} bytes")
    return length


def _shown(text: str) -> str:
    """A bit of what the server sent, safe and short for a log line."""
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


# ---------------------------------------------------------------------------------------------
# the I/O


class _Deadline:
    def __init__(self, *, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self, *, what: str) -> float:
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise TimedOut(what)
        return remaining


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value < 60 else format_duration(round(value))


def _resolve(target: Target, *, within: float) -> Sequence[_AddrInfo]:
    """The target's addresses; a name is looked up in a thread, since getaddrinfo has no timeout."""
    try:
        ipaddress.ip_address(target.host)
    except ValueError:
        pass
    else:
        try:
            return socket.getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        except OSError as err:  # e.g. an IPv6 address with a zone this host does not have
            raise HttpError(f"cannot use {target.host}: {err.strerror or err}") from err
    found: list[Sequence[_AddrInfo]] = []
    failed: list[OSError] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM))
        except OSError as err:
            failed.append(err)

    thread = threading.Thread(target=lookup, name="resolve", daemon=True)
    thread.start()
    thread.join(within)
    if found:
        return found[0]
    if failed:
        raise HttpError(f"cannot resolve {target.host}: {failed[0].strerror or failed[0]}")
    raise TimedOut(f"no address for {target.host} within {_seconds(within)}")


def _connect(target: Target, *, deadline: _Deadline, connect_timeout: float) -> socket.socket:
    """A connected socket, trying each address in turn, within `connect_timeout` and the deadline."""
    bound = min(connect_timeout, deadline.seconds)
    connecting = _Deadline(seconds=bound)
    no_connection = f"no connection within {_seconds(bound)}"
    last: OSError | None = None
    for family, kind, proto, _, address in _resolve(target, within=bound):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(connecting.left(what=no_connection))
            sock.connect(address)
        except TimeoutError as err:
            sock.close()
            raise TimedOut(no_connection) from err
        except OSError as err:
            sock.close()
            last = err
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    if last is None:
        raise HttpError(f"no address for {target.host}")
    raise HttpError(last.strerror or str(last))


def _tls(sock: socket.socket, target: Target, *, deadline: _Deadline) -> socket.socket:
    # Imported here: only an https URL needs it, and it is a large part of a small client's start.
    import ssl

    context: ssl.SSLContext = ssl.create_default_context()
    sock.settimeout(deadline.left(what=f"no TLS session within {_seconds(deadline.seconds)}"))
    try:
        return context.wrap_socket(sock, server_hostname=target.host)
    except TimeoutError as err:
        raise TimedOut(f"no TLS session within {_seconds(deadline.seconds)}") from err
    except ssl.SSLError as err:
        raise HttpError(f"TLS: {err.reason or err}") from err


def _read_answer(sock: socket.socket, *, deadline: _Deadline) -> Response:
    """The answer's head and body, each read given what is left of the deadline."""
    data = bytearray()
    no_answer = f"no answer within {_seconds(deadline.seconds)}"

    def more() -> bytes:
        what = no_answer if not data else f"answer not complete within {_seconds(deadline.seconds)}"
        sock.settimeout(deadline.left(what=what))
        try:
            return sock.recv(_READ_SIZE)
        except TimeoutError as err:
            raise TimedOut(what) from err

    while (end := data.find(_HEAD_END)) < 0:
        if len(data) > MAX_HEAD:
            raise HttpError(f"answer head over {MAX_HEAD} bytes")
        chunk = more()
        if not chunk:
            raise HttpError(
                "connection closed before an answer"
                if not data
                else f"closed mid-answer (head, {len(data)} bytes)"
            )
        data += chunk
    if end > MAX_HEAD:
        raise HttpError(f"answer head over {MAX_HEAD} bytes")
    head = parse_head(bytes(data[:end]))
    length = body_length(head)
    body = data[end + len(_HEAD_END) :]
    while length is None or len(body) < length:
        if len(body) > MAX_BODY:
            raise HttpError(f"answer body over {MAX_BODY} bytes")
        chunk = more()
        if not chunk:
            if length is None:
                break
            raise HttpError(f"closed mid-answer ({len(body)} of {length} body bytes)")
        body += chunk
    if length is not None and len(body) > length:
        del body[length:]  # a server that sends more than it said: the rest is not ours to read
    if len(body) > MAX_BODY:
        raise HttpError(f"answer body over {MAX_BODY} bytes")
    return Response(status=head.status, headers=head.headers, body=bytes(body))


def exchange(
    *,
    url: str,
    method: Method,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    timeout: float,
    connect_timeout: float,
    body: bytes = b"",
) -> Response:
    """One request and its whole answer within `timeout` seconds (a connection within `connect_timeout` of
    them); HttpError (TimedOut) when there is no whole answer by then."""
    try:
        target = target_of(url)
    except ValueError as err:  # settings check the URL; this is for any other caller
        raise HttpError(str(err)) from err
    request = build_request(method=method, target=target, path=path, query=query, headers=headers, body=body)
    deadline = _Deadline(seconds=timeout)
    sock = _connect(target, deadline=deadline, connect_timeout=connect_timeout)
    try:
        if target.scheme == "https":
            sock = _tls(sock, target, deadline=deadline)
        view = memoryview(request)
        while view:
            what = f"could not send the request within {_seconds(timeout)}"
            sock.settimeout(deadline.left(what=what))
            try:
                sent = sock.send(view)
            except TimeoutError as err:
                raise TimedOut(what) from err
            view = view[sent:]
        return _read_answer(sock, deadline=deadline)
    except OSError as err:
        raise HttpError(err.strerror or type(err).__name__) from err
    finally:
        sock.close()
