"""A real lockd process (`python -m lockd --standalone`) whose node policy file has `dependencies`, against
real servers of the test on loopback: an HTTP dependency answering 503 (every ask waits, 423 naming it and
its error; /status and /metrics show it down) then 200 (the waiting long poll is granted at once); a TCP
dependency on a closed port (connection refused) then listening; an HTTP dependency that accepts but never
answers (timed out); a policy reload that names another dependency has it checked at once."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.metrics import by_label
from tests.processes import free_port, running_lockd
from tests.waiting import eventually

# Short enough that a test sees a change within a fraction of a second; the waiting long polls are woken by
# the check's result, so nothing here waits for an interval to run out.
FAST = ("--dependency-interval", "200ms", "--reload-interval", "100ms")


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _policy(tmp_path: Path, dependencies: str) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(f"nodePolicies:\n- name: deps\n  dependencies:\n{dependencies}")
    return path


async def _ask(
    client: aiohttp.ClientSession, port: int, name: str, *, wait: float = 0
) -> tuple[int, dict[str, Any]]:
    params = {"namespace": "deps", "name": name, "wait": f"{wait:g}"}
    async with client.get(f"http://127.0.0.1:{port}/v1/lock", params=params) as response:
        return response.status, await response.json()


async def _reason_is(client: aiohttp.ClientSession, port: int, reason: str, *, name: str = "first") -> None:
    """Until lockd's answer to a plain ask of pod `name` says `reason` (lockd's checks run in the background,
    in another process: there is no event of its to await)."""
    seen: list[str] = []

    async def says() -> bool:
        status, body = await _ask(client, port, name)
        seen.append(body.get("reason", ""))
        return status == 423 and body["reason"] == reason

    try:
        await eventually(says, within=15.0, what=reason, poll=0.05)
    except AssertionError as err:
        raise AssertionError(f"{err}; lockd said {seen[-3:]}") from None


async def _granted_soon(client: aiohttp.ClientSession, port: int, name: str) -> None:
    """A 30 s long poll is granted within a few seconds: woken when the dependency answered."""
    started = time.monotonic()
    status, body = await _ask(client, port, name, wait=30)
    assert status == 200, body
    assert time.monotonic() - started < 10.0


class Health:
    def __init__(self) -> None:
        self.status = 503

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(status=self.status, text="ok" if self.status == 200 else "not yet")


async def test_an_http_dependency_holds_every_grant_until_it_answers_2xx(
    aiohttp_server, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    health = Health()
    app = web.Application()
    app.router.add_get("/healthz", health.healthz)
    server = await aiohttp_server(app, host="127.0.0.1")
    url = str(server.make_url("/healthz"))
    policies = _policy(tmp_path, f"  - http: {url}\n")
    port = free_port()
    with running_lockd("--policies", str(policies), *FAST, port=port) as proc:
        await _reason_is(client, port, f"waiting for dependency {url}: HTTP 503")
        status, body = await _ask(client, port, "second")
        assert (status, body["reason"]) == (423, f"waiting for dependency {url}: HTTP 503")
        async with client.get(f"http://127.0.0.1:{port}/status") as response:
            (shown,) = (await response.json())["dependencies"]
        assert (shown["name"], shown["kind"], shown["up"], shown["error"]) == (url, "http", False, "HTTP 503")
        assert shown["checkedAt"] is not None and shown["checkedSecondsAgo"] < 5
        async with client.get(f"http://127.0.0.1:{port}/status", params={"format": "text"}) as response:
            assert f"dependency {url}: DOWN: HTTP 503 (checked" in await response.text()
        async with client.get(f"http://127.0.0.1:{port}/metrics") as response:
            metrics = await response.text()
        assert by_label(metrics, "stagger_lockd_dependency_up", "dependency") == {url: 0.0}
        assert by_label(metrics, "stagger_lockd_dependency_check_failures_total", "dependency")[url] >= 1
        poll = asyncio.create_task(_granted_soon(client, port, "first"))
        health.status = 200
        await poll
    log = proc.stderr.read() if proc.stderr else ""
    assert f"dependency {url} fails: HTTP 503; lockd grants nothing until it answers" in log
    assert f"dependency {url} answers again: grants resume" in log


async def test_a_tcp_dependency_on_a_closed_port_then_a_listening_one(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    target = free_port()  # nothing listens there yet
    policies = _policy(tmp_path, f"  - tcp: 127.0.0.1:{target}\n    timeout: 1s\n")
    port = free_port()
    with running_lockd("--policies", str(policies), *FAST, port=port):
        await _reason_is(client, port, f"waiting for dependency tcp 127.0.0.1:{target}: connection refused")
        poll = asyncio.create_task(_granted_soon(client, port, "first"))

        async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        async with await asyncio.start_server(close_at_once, "127.0.0.1", target):
            await poll


@pytest.fixture
def silent_port() -> Iterator[int]:
    """Connections to this port are accepted (the kernel's backlog) and never answered."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        yield sock.getsockname()[1]


async def test_a_dependency_that_never_answers_within_its_timeout_has_timed_out(
    client: aiohttp.ClientSession, tmp_path: Path, silent_port: int
) -> None:
    url = f"http://127.0.0.1:{silent_port}/healthz"
    policies = _policy(tmp_path, f"  - http: {url}\n    timeout: 300ms\n")
    port = free_port()
    with running_lockd("--policies", str(policies), *FAST, port=port):
        await _reason_is(client, port, f"waiting for dependency {url}: timed out after 300ms")


async def test_a_reload_naming_another_dependency_has_it_checked_at_once(
    client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async with await asyncio.start_server(close_at_once, "127.0.0.1", 0) as listening:
        up = listening.sockets[0].getsockname()[1]
        closed = free_port()
        policies = _policy(tmp_path, f"  - tcp: 127.0.0.1:{up}\n")
        port = free_port()
        # Checked once an hour: only the reload can start the new dependency's checks this soon.
        hourly = ("--dependency-interval", "1h", "--reload-interval", "100ms")
        with running_lockd("--policies", str(policies), *hourly, port=port):
            await eventually(lambda: _granted(client, port, "first"), within=15.0, what="the first grant")
            _policy(tmp_path, f"  - tcp: 127.0.0.1:{closed}\n")
            # (An ask before the reload would be granted: wait for lockd to have read the new file.)
            await eventually(
                lambda: _depends_on(client, port, f"127.0.0.1:{closed}"), within=15.0, what="the reload"
            )
            await _reason_is(
                client,
                port,
                f"waiting for dependency tcp 127.0.0.1:{closed}: connection refused",
                name="second",
            )


async def _granted(client: aiohttp.ClientSession, port: int, name: str) -> bool:
    status, _ = await _ask(client, port, name)
    return status == 200


async def _depends_on(client: aiohttp.ClientSession, port: int, target: str) -> bool:
    async with client.get(f"http://127.0.0.1:{port}/status") as response:
        return [d["target"] for d in (await response.json())["dependencies"]] == [target]
