"""lockd's long-poll front door (lockd/longpoll.py), over raw sockets against lockd's own runner: a lock ask is
answered there (200, 423, 400 alike with aiohttp's), several on one kept-alive connection and pipelined ones in
order, `Connection: close` honoured; whatever it does not serve (another route, POST, HTTP/1.0, a body, a
malformed head) is handed to aiohttp on the same connection, bytes read so far included, and answered as
before; a long poll's answer comes on its own connection when the slot frees. pod-startup-lock's `GET /?duration=S` is answered there too, in text. `parse_head` is total: any bytes give an
ask or None, never an error, and an ask only for a plain GET of /v1/lock or / over HTTP/1.1."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given
from hypothesis import strategies as st

from lockd.longpoll import parse_head
from tests.policies import limit_policy

ASK = "GET /v1/lock?namespace=default&name={name}{extra} HTTP/1.1\r\nHost: lockd\r\n{headers}\r\n"
# Header lines that send a request to aiohttp: a body, an upgrade, or a head parse_head does not take.
NOT_SERVED_HERE = (
    b"Content-Length: 5",
    b"Transfer-Encoding: chunked",
    b"Expect: 100-continue",
    b"Connection: Upgrade",
    b" folded",
    b"No-Colon",
    b"Sp ace: x",
)


async def _open(lockd) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    server = lockd.client.server
    return await asyncio.open_connection(server.host, server.port)


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await asyncio.wait_for(reader.readline(), timeout=10)
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def ask(name: str, *, extra: str = "", headers: str = "") -> bytes:
    return ASK.format(name=name, extra=extra, headers=headers).encode()


async def test_asks_on_one_kept_alive_connection_pipelined_or_not(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    reader, writer = await _open(lockd)
    writer.write(ask("a"))
    status, headers, body = await _answer(reader)
    assert status == 200 and headers["connection"] == "keep-alive" and body.endswith(b"}\n")
    assert json.loads(body)["releaseToken"] == headers["x-stagger-release-token"]
    # Two asks sent at once: answered in order on the same connection.
    writer.write(ask("b") + ask("", extra=""))
    status_b, headers_b, body_b = await _answer(reader)
    status_bad, _, body_bad = await _answer(reader)
    assert status_b == 423 and json.loads(body_b)["position"] == 1 and headers_b["retry-after"]
    assert status_bad == 400 and "name" in json.loads(body_bad)["error"]
    writer.write(ask("c", headers="Connection: close\r\n"))
    status_c, headers_c, _ = await _answer(reader)
    assert status_c == 423 and headers_c["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), timeout=10) == b"", "closed after Connection: close"
    writer.close()


async def test_pod_startup_locks_anonymous_ask_is_answered_at_the_door_in_text(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    reader, writer = await _open(lockd)
    writer.write(b"GET /?duration=30 HTTP/1.1\r\nHost: lockd\r\n\r\n" * 2)
    status, headers, body = await _answer(reader)
    assert (status, body) == (200, b"Lock acquired")
    assert headers["content-type"] == "text/plain; charset=utf-8" and headers["x-stagger-duration"] == "30"
    status, headers, body = await _answer(reader)
    assert (status, body) == (423, b"Locked") and int(headers["retry-after"]) >= 1
    writer.write(b"GET /?duration=soon HTTP/1.1\r\nHost: lockd\r\n\r\n")
    status, headers, body = await _answer(reader)
    assert status == 400 and "duration" in json.loads(body)["error"]
    writer.close()


async def test_what_the_door_does_not_serve_is_handed_to_aiohttp(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    cases = [
        (b"GET /status HTTP/1.1\r\nHost: lockd\r\n\r\n", 200, b'"node"'),
        (b"GET /v1/lock?namespace=default&name=old HTTP/1.0\r\n\r\n", 200, b'"granted": true'),
        (
            b"POST /v1/lock?namespace=default&name=poster HTTP/1.1\r\nHost: l\r\nContent-Length: 2\r\n\r\n{}",
            423,
            b"granted",
        ),
        (
            b"GET /v1/lock?namespace=default&name=x HTTP/1.1\r\nHost: l\r\nBad Header: y\r\n\r\n",
            400,
            b"malformed HTTP",
        ),
        (b"GET /v1/lockx HTTP/1.1\r\nHost: l\r\n\r\n", 404, b'"error"'),
        (b"GET /v1/lock?namespace=default&name=nohost HTTP/1.1\r\n\r\n", 400, b"Missing"),
    ]
    for request, status, seen in cases:
        reader, writer = await _open(lockd)
        # In pieces: the door reads the head as it comes, and hands aiohttp every byte.
        for piece in (request[:7], request[7:25], request[25:]):
            writer.write(piece)
            await writer.drain()
        got, _, body = await _answer(reader)
        assert (got, seen in body) == (status, True), (request, got, body)
        writer.close()


async def test_a_long_poll_is_answered_when_the_slot_frees(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    reader, writer = await _open(lockd)
    writer.write(ask("waiter", extra="&wait=30"))
    await writer.drain()
    for _ in range(200):
        if [entry["name"] for entry in (await lockd.status())["queue"]] == ["waiter"]:
            break
        await asyncio.sleep(0.01)
    assert (await lockd.release("holder")).status == 200
    status, _, body = await _answer(reader)
    assert status == 200 and json.loads(body)["name"] == "waiter"
    writer.close()


@given(st.binary(max_size=300))
def test_any_head_gives_an_ask_or_none(head: bytes) -> None:
    found = parse_head(head)
    if found is not None:
        line = head.split(b"\r\n", 1)[0]
        assert line.startswith(b"GET /") and line.endswith(b" HTTP/1.1")
        assert found.anonymous == (not line.startswith(b"GET /v1/lock"))


@given(
    st.lists(
        st.sampled_from(
            [
                b"Host: lockd",
                b"Authorization: Bearer abc",
                b"Connection: close",
                b"Content-Length: 0",
                *NOT_SERVED_HERE,
                b"User-Agent: python-requests/2.32",
            ]
        ),
        max_size=6,
    ),
    st.sampled_from([b"GET", b"POST", b"get"]),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0"]),
    st.sampled_from([b"/v1/lock?namespace=a&name=b", b"/?namespace=a&name=b"]),
)
def test_only_a_plain_get_over_http11_is_served_here(
    headers: list[bytes], method: bytes, version: bytes, target: bytes
) -> None:
    head = b"\r\n".join([method + b" " + target + b" " + version, *headers])
    found = parse_head(head)
    expected_here = (
        method == b"GET"
        and version == b"HTTP/1.1"
        and not any(h in headers for h in NOT_SERVED_HERE)
        and headers.count(b"Authorization: Bearer abc") <= 1
        and headers.count(b"Host: lockd") == 1
    )
    assert (found is not None) == expected_here, (head, found)
    if found is not None:
        assert found.raw_query == "namespace=a&name=b" and found.anonymous == (target[1:2] == b"?")
        assert found.keep_alive == (b"Connection: close" not in headers)
        assert found.authorization == ("Bearer abc" if b"Authorization: Bearer abc" in headers else None)
