"""The init client's small HTTP/1.1 client (`initclient.http`), its pure parts: the request's bytes (query,
headers, the Host of IPv6 and default ports, a URL's own path, no header injection), the answer's head
(status line, headers, what is not HTTP) and how long its body is (Content-Length, to the end, what is
refused: chunked, two lengths, over the cap). And `fetch_lock` on a loopback socket that answers with a
body that is not JSON or nests without end: a Reply without fields, never an exception; and an https URL
(TLS with the certificate checked against the trusted CAs). The misbehaving servers against the real
process are tests/hostile/test_initclient_trickle.py."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from initclient.client import Failure, Reply, Request, fetch_lock
from initclient.http import (
    MAX_BODY,
    Head,
    HttpError,
    Target,
    body_length,
    build_request,
    parse_head,
    target_of,
)
from stagger.contracts.lock import LockParams

LOCKD = target_of("http://10.0.0.5:9400")


# --- the request -------------------------------------------------------------------------------------------


def test_a_lock_request_is_one_get_with_its_query_and_token() -> None:
    request = build_request(
        method="GET",
        target=LOCKD,
        path="/v1/lock",
        query={"namespace": "ns", "name": "web-0", "uid": "u-1", "wait": "30"},
        headers={"Authorization": "Bearer eyJ.a.b"},
    )
    assert request == (
        b"GET /v1/lock?namespace=ns&name=web-0&uid=u-1&wait=30 HTTP/1.1\r\n"
        b"Host: 10.0.0.5:9400\r\n"
        b"Accept: application/json\r\n"
        b"Connection: close\r\n"
        b"User-Agent: stagger-initclient\r\n"
        b"Authorization: Bearer eyJ.a.b\r\n"
        b"\r\n"
    )


def test_query_values_are_percent_encoded() -> None:
    request = build_request(
        method="GET", target=LOCKD, path="/v1/lock", query={"name": "a b&c=d/é"}, headers={}
    )
    assert request.startswith(b"GET /v1/lock?name=a%20b%26c%3Dd%2F%C3%A9 HTTP/1.1\r\n")


def test_a_delete_with_a_body_says_its_length() -> None:
    request = build_request(
        method="DELETE", target=LOCKD, path="/v1/lock", query={}, headers={}, body=b'{"a":1}'
    )
    assert request.startswith(b"DELETE /v1/lock HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 7\r\n" in request and request.endswith(b'\r\n\r\n{"a":1}')


@pytest.mark.parametrize(
    ("url", "target"),
    [
        pytest.param("http://10.0.0.5", Target("http", "10.0.0.5", 80, "10.0.0.5", ""), id="default port"),
        pytest.param(
            "http://[fd00::5]:9400", Target("http", "fd00::5", 9400, "[fd00::5]:9400", ""), id="IPv6"
        ),
        pytest.param(
            "https://lockd.local/prefix/",
            Target("https", "lockd.local", 443, "lockd.local", "/prefix"),
            id="https with a path",
        ),
    ],
)
def test_where_a_url_goes(url: str, target: Target) -> None:
    assert target_of(url) == target


def test_a_url_path_goes_before_the_request_path() -> None:
    request = build_request(
        method="GET", target=target_of("http://h:1/a%20b"), path="/v1/lock", query={}, headers={}
    )
    assert request.startswith(b"GET /a%20b/v1/lock HTTP/1.1\r\nHost: h:1\r\n")


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Authorization": "Bearer a\r\nX-Injected: 1"}, id="CRLF in a value"),
        pytest.param({"Authorization": "Bearer a\nb"}, id="LF in a value"),
        pytest.param({"X-A\r\nB": "1"}, id="CRLF in a name"),
        pytest.param({"Authorization": "Bearer \u2603"}, id="not latin-1"),
    ],
)
def test_a_header_that_would_break_the_request_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(HttpError):
        build_request(method="GET", target=LOCKD, path="/v1/lock", query={}, headers=headers)


# --- the answer --------------------------------------------------------------------------------------------


def test_a_head_is_read_with_lower_cased_names() -> None:
    head = parse_head(
        b"HTTP/1.1 423 Locked\r\nContent-Type: application/json\r\nRetry-After:  5 \r\n"
        b"Vary: a\r\nVary: b\r\nContent-Length: 10"
    )
    assert head == Head(
        status=423,
        reason="Locked",
        headers={
            "content-type": "application/json",
            "retry-after": "5",
            "vary": "a, b",
            "content-length": "10",
        },
    )
    assert body_length(head) == 10


@pytest.mark.parametrize(
    ("data", "says"),
    [
        pytest.param(b"SSH-2.0-OpenSSH_9.6", "not an HTTP answer: 'SSH-2.0-OpenSSH_9.6'", id="not HTTP"),
        pytest.param(b"HTTP/2 200 OK", "not an HTTP answer", id="HTTP/2"),
        pytest.param(b"HTTP/1.1 2000 OK", "not an HTTP answer", id="four digits"),
        pytest.param(b"HTTP/1.1 600 Odd", "not an HTTP answer", id="status over 599"),
        pytest.param(b"HTTP/1.1 100 Continue", "unexpected interim answer", id="1xx"),
        pytest.param(b"HTTP/1.1 200 OK\r\nno colon here", "bad header line: 'no colon here'", id="no colon"),
        pytest.param(b"HTTP/1.1 200 OK\r\nA: 1\r\n folded", "bad header line", id="obs-fold"),
        pytest.param(b"HTTP/1.1 200 OK\r\nA : 1", "bad header line", id="space before the colon"),
        pytest.param(b"\x16\x03\x01" + b"x" * 200, "...'", id="TLS hello, cut short in the log"),
    ],
)
def test_what_is_not_an_answer_head_is_an_error(data: bytes, says: str) -> None:
    with pytest.raises(HttpError) as raised:
        parse_head(data)
    assert says in str(raised.value) and len(str(raised.value)) < 200


@pytest.mark.parametrize(
    ("head", "length"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 0", 0, id="empty"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5", 5, id="the same length twice"),
        pytest.param(b"HTTP/1.1 200 OK\r\nConnection: close", None, id="no length: to the end"),
        pytest.param(b"HTTP/1.1 204 No Content\r\nContent-Length: 9", 0, id="204 has no body"),
        pytest.param(f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_BODY}".encode(), MAX_BODY, id="at the cap"),
    ],
)
def test_how_long_a_body_is(head: bytes, length: int | None) -> None:
    assert body_length(parse_head(head)) == length


@pytest.mark.parametrize(
    ("head", "says"),
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked", "unsupported Transfer-Encoding", id="chunked"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6", "bad Content-Length", id="two"
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: +5", "bad Content-Length", id="signed"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: \xd9\xa5", "bad Content-Length", id="not ASCII"),
        pytest.param(
            f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_BODY + 1}".encode(),
            "answer too large",
            id="over the cap",
        ),
    ],
)
def test_a_body_length_this_client_does_not_read_is_an_error(head: bytes, says: str) -> None:
    with pytest.raises(HttpError, match=says):
        body_length(parse_head(head))


# --- fetch_lock on a loopback socket -----------------------------------------------------------------------


@contextlib.contextmanager
def answering(answer: bytes, *, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """A one-connection server on loopback (https with `tls`) that reads the request's head and sends
    `answer`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        raw, _ = listener.accept()
        try:
            connection = tls.wrap_socket(raw, server_side=True) if tls is not None else raw
        except (ssl.SSLError, OSError):  # the client refused our certificate
            raw.close()
            return
        with connection:
            data = b""
            while b"\r\n\r\n" not in data and (chunk := connection.recv(4096)):
                data += chunk
            connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>proxy error</html>", id="not JSON"),
        pytest.param(b"\xff\xfe\x00", id="not text"),
        pytest.param(b"[" * 200_000, id="nested without end"),
        pytest.param(b'["granted", true]', id="JSON but not an object"),
    ],
)
def test_a_body_that_is_no_lock_answer_is_a_reply_without_fields(body: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nRetry-After: 2\r\n\r\n%s" % (len(body), body)
    params: LockParams = {"namespace": "ns", "name": "pod", "wait": "0"}
    with answering(answer) as url:
        outcome = fetch_lock(
            lockd_url=url,
            request=Request(params=params, connect_timeout=2.0, timeout=5.0),
            wall_now=time.time(),
        )
        assert outcome == Reply(status=200, body={}, retry_after=2.0)


_GRANTED = b'{"granted": true, "namespace": "ns", "name": "pod", "grantedAt": "2024-01-01T00:00:00Z"}'


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trusted", "outcome"),
    [
        pytest.param(True, Reply(status=200, body={"granted": True}), id="a CA the client trusts"),
        pytest.param(
            False, Failure("TLS: CERTIFICATE_VERIFY_FAILED"), id="a certificate no CA signed for it"
        ),
    ],
)
def test_an_https_lockd_url_speaks_tls_and_checks_the_certificate(
    trusted: bool, outcome: Reply | Failure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    bundle = tmp_path / "ca.pem"
    (ca if trusted else trustme.CA()).cert_pem.write_to_path(str(bundle))
    # The system's CAs, as the image's; here one file instead (OpenSSL reads SSL_CERT_FILE).
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(_GRANTED), _GRANTED)
    params: LockParams = {"namespace": "ns", "name": "pod", "wait": "0"}
    with answering(answer, tls=server) as url:
        got = fetch_lock(
            lockd_url=url,
            request=Request(params=params, connect_timeout=2.0, timeout=5.0),
            wall_now=time.time(),
        )
    assert got == outcome
