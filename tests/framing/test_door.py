"""The door (`stagger.framing`) in front of a real aiohttp app on loopback, over raw sockets: requests with
bodies pipelined on one kept-alive connection reach the app whole and in order; the body budget refuses a
caller past its share (503, Retry-After) and gives the room back once the body arrived; a connection that
closes mid-body leaves nothing behind in the door (its table, its reservation)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from aiohttp import web

from stagger import framing, serving


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(text=f"{request.path} {len(body)}")


@dataclass
class Served:
    port: int
    runner: serving.Runner

    @property
    def door(self) -> framing.Door:
        assert self.runner.door is not None
        return self.runner.door


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    app = web.Application()
    app.router.add_post("/{name}", _echo)
    app.router.add_get("/{name}", _echo)
    bounds = framing.Bounds(request_timeout=5.0, max_body=4096, max_connections=64, body_budget=16384)
    runner = serving.make_runner(app, bounds=bounds, shutdown_timeout=1.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield Served(port=int(runner.addresses[0][1]), runner=runner)
    finally:
        await runner.cleanup()


async def _until(check: Callable[[], object]) -> None:
    """The door reads in this same loop and has no event to await: look until `check()` holds (5 s at most)."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)


def _post(path: str, body: bytes) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


async def _read_answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, bytes]]:
    answers = []
    for _ in range(count):
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answers.append((status, await reader.readexactly(length)))
    return answers


async def test_pipelined_requests_with_bodies_reach_the_app_whole_and_in_order(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    stream = (
        _post("/a", b"x" * 3000)
        + _post("/b", b"")
        + b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n"
        + _post("/d", b"y" * 7)
    )
    # Sent in pieces that cut heads and bodies anywhere.
    for start in range(0, len(stream), 777):
        writer.write(stream[start : start + 777])
        await writer.drain()
    answers = await asyncio.wait_for(_read_answers(reader, 4), timeout=10)
    writer.close()
    assert answers == [(200, b"/a 3000"), (200, b"/b 0"), (200, b"/c 0"), (200, b"/d 7")]


async def test_a_caller_past_its_share_of_the_body_budget_waits_and_gets_its_room_back(
    served: Served,
) -> None:
    # A quarter of 16,384 per caller address: one 4,000-byte body may be on its way, not a second.
    first_reader, first = await asyncio.open_connection("127.0.0.1", served.port)
    first.write(_post("/slow", b"z" * 4000)[:-100])
    await first.drain()
    await _until(lambda: served.door.body_bytes)
    assert served.door.body_bytes == 4000
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(_post("/second", b"q" * 100))
    answer = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in answer
    first.write(b"z" * 100)  # the rest of the first body: its room is given back
    [(status, body)] = await asyncio.wait_for(_read_answers(first_reader, 1), timeout=10)
    assert (status, body) == (200, b"/slow 4000")
    assert served.door.body_bytes == 0 and served.door.peer_body_bytes == {}
    first.close()


async def test_a_connection_closed_mid_body_leaves_nothing_in_the_door(served: Served) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(_post("/gone", b"g" * 2000)[:-500])
    await writer.drain()
    await _until(lambda: served.door.body_bytes)
    assert len(served.door.open) == 1 and served.door.body_bytes == 2000
    writer.transport.abort()
    await _until(lambda: not served.door.open)
    assert served.door.open == {} and served.door.body_bytes == 0
