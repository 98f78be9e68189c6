"""One check of a dependency against real servers on loopback, and the checker that runs them in the
background: HTTP answers (2xx up; 503 down; a redirect not followed), TCP (a closed port refused; a
listening one accepted and the connection closed at once, nothing sent), a server that accepts but never
answers (timed out), TLS verified (a certificate of an unknown CA refused with a clear reason); a dependency that
is down checked once per interval however many pods ask; a new set of dependencies checked at once."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
import trustme
from aiohttp import web

from lockd import ledger
from lockd.dependencies import DependencyChecks, check
from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.service import LockService
from stagger import policy, throttles
from tests.processes import free_port
from tests.waiting import eventually

pytestmark = pytest.mark.slow  # real servers on loopback


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as opened:
        yield opened


class Health:
    """An HTTP server's /healthz that answers `status`, counting the requests it got."""

    def __init__(self) -> None:
        self.status = 503
        self.requests = 0
        self.paths: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/moved", self.moved)
        app.router.add_get("/elsewhere", self.healthz)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.paths.append(request.path)
        return web.Response(status=self.status, text="x" * 100_000)

    async def moved(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        raise web.HTTPFound("/elsewhere")


def _http(url: str, timeout: float = 2.0) -> policy.Dependency:
    return policy.Dependency(kind="http", target=url, timeout=timeout)


def _tcp(port: int, timeout: float = 2.0) -> policy.Dependency:
    return policy.Dependency(kind="tcp", target=f"127.0.0.1:{port}", timeout=timeout)


async def test_http_is_up_on_a_2xx_and_down_with_the_status_otherwise(
    aiohttp_server, session: aiohttp.ClientSession
) -> None:
    health = Health()
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    dependency = _http(str(server.make_url("/healthz")))
    assert (await check(dependency, session=session)).error == "HTTP 503"
    health.status = 204
    result = await check(dependency, session=session)
    assert result.ok and result.error == ""
    health.status = 404
    assert (await check(dependency, session=session)).error == "HTTP 404"


async def test_a_redirect_is_not_followed(aiohttp_server, session: aiohttp.ClientSession) -> None:
    health = Health()
    health.status = 200
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    result = await check(_http(str(server.make_url("/moved"))), session=session)
    assert result.error == (
        "HTTP 302 redirect to /elsewhere: redirects are not followed (name the final URL)"
    )
    assert health.paths == ["/moved"]


async def test_tcp_refused_on_a_closed_port_then_accepted_and_closed_at_once() -> None:
    port = free_port()
    dependency = _tcp(port)
    async with aiohttp.ClientSession() as unused:
        assert (await check(dependency, session=unused)).error == "connection refused"
        closed = asyncio.Event()
        received: list[bytes] = []

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            received.append(await reader.read())  # until the checker closes its end
            closed.set()
            writer.close()

        server = await asyncio.start_server(connected, "127.0.0.1", port)
        async with server:
            assert (await check(dependency, session=unused)).ok
            await asyncio.wait_for(closed.wait(), timeout=5.0)
        assert received == [b""]  # nothing sent: the connection was only opened and closed


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections are accepted (by the kernel's backlog) and never answered."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


async def test_a_server_that_accepts_but_never_answers_times_out(
    silent_port: int, session: aiohttp.ClientSession
) -> None:
    result = await check(_http(f"http://127.0.0.1:{silent_port}/healthz", timeout=0.3), session=session)
    assert result.error == "timed out after 300ms"


def _untrusted(ca: trustme.CA) -> ssl.SSLContext:
    """A server context for 127.0.0.1 signed by a CA of this test's own (trustme), which lockd does not trust."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


async def test_https_with_a_certificate_of_an_untrusted_ca_fails_naming_the_certificate(
    aiohttp_server, session: aiohttp.ClientSession
) -> None:
    health = Health()
    health.status = 200
    server = await aiohttp_server(health.app(), host="127.0.0.1", ssl=_untrusted(trustme.CA()))
    url = f"https://127.0.0.1:{server.port}/healthz"
    result = await check(_http(url), session=session)
    assert result.error == "TLS certificate not trusted: unable to get local issuer certificate"
    assert health.requests == 0


# --- the checker --------------------------------------------------------------------------------------


async def _checking(checks: DependencyChecks, session: aiohttp.ClientSession) -> asyncio.Task[None]:
    return asyncio.create_task(checks.run(session=session, on_change=lambda: None))


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_dependency_that_is_down_is_checked_once_per_interval_however_many_ask(
    aiohttp_server, session: aiohttp.ClientSession
) -> None:
    health = Health()
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    dependency = _http(str(server.make_url("/healthz")))
    checks = DependencyChecks(interval=60.0, metrics=Metrics())
    checks.want((dependency,))
    service = LockService(
        active=ActivePolicy(policy.NodePolicy(name="deps", dependencies=(dependency,)), "test", "test"),
        cores=1,
        metrics=checks.metrics,
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
        dependencies=checks.get,
    )
    task = await _checking(checks, session)
    try:
        await eventually(lambda: _has(checks, dependency), what="the first check")
        for i in range(50):
            outcome = await service.ask(namespace="t", name=f"p{i}", uid="")
            assert isinstance(outcome, ledger.Denied)
            assert outcome.reason.endswith(": HTTP 503")
        assert health.requests == 1
    finally:
        await _stop(task)


async def _has(checks: DependencyChecks, dependency: policy.Dependency) -> bool:
    return dependency in checks.results


async def test_a_new_set_of_dependencies_is_checked_at_once(session: aiohttp.ClientSession) -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    first = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    second = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    async with first, second:
        one = _tcp(first.sockets[0].getsockname()[1])
        other = _tcp(second.sockets[0].getsockname()[1])
        checks = DependencyChecks(interval=60.0, metrics=Metrics())
        checks.want((one,))
        task = await _checking(checks, session)
        try:
            await eventually(lambda: _has(checks, one), what="the first dependency's check")
            checks.want((other,))
            # Checked now, not after the 60 s interval of the old set.
            await eventually(lambda: _has(checks, other), within=5.0, what="the new dependency's check")
            assert list(checks.results) == [other]
            assert checks.results[other].ok
        finally:
            await _stop(task)
