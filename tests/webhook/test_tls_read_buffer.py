"""`serving.set_tls_read_buffer` (the controller's `--tls-read-buffer`): a TLS connection accepted after it
reads with a buffer of that size instead of asyncio's 256 KiB, a body many times that size still arrives
whole, and a size under 1024 is refused without changing anything."""

from __future__ import annotations

import ssl
from asyncio import sslproto
from collections.abc import Iterator

import aiohttp
import pytest
import trustme
from aiohttp import web

from stagger import serving


@pytest.fixture
def restore_buffer() -> Iterator[None]:
    before = sslproto.SSLProtocol.max_size
    yield
    sslproto.SSLProtocol.max_size = before


async def test_connections_read_with_the_buffer_set(restore_buffer: None) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    buffers: list[int] = []

    async def echo(request: web.Request) -> web.Response:
        # The accepted connection's own buffer (CPython's sslproto, which the setting changes).
        protocol = request.transport._ssl_protocol  # type: ignore[union-attr]
        buffers.append(len(protocol._ssl_buffer))
        return web.json_response({"length": len(await request.read())})

    serving.set_tls_read_buffer(4096)
    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context)) as session,
            session.post(f"https://127.0.0.1:{port}/", data=b"x" * 300_000) as response,
        ):
            assert response.status == 200
            assert await response.json() == {"length": 300_000}
    finally:
        await runner.cleanup()
    assert buffers == [4096]


def test_a_buffer_under_1024_bytes_is_refused(restore_buffer: None) -> None:
    before = sslproto.SSLProtocol.max_size
    with pytest.raises(ValueError, match="too small"):
        serving.set_tls_read_buffer(512)
    assert sslproto.SSLProtocol.max_size == before
