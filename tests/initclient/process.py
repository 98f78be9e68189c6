"""`python -m initclient` as a real process for the tests: a small aiohttp server playing lockd (scripted
answers, then the last one again), a port where nothing listens, the environment the process runs with,
and the process started (`spawn`) or run to its end (`run`, its exit code, stderr lines and time)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

REPO = Path(__file__).resolve().parents[2]
BUSY = "2 of 2 slots in use (maxConcurrent)"
RUN_LIMIT = 20.0  # seconds; no run here should come near it


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, object]
    retry_after: str | None = None
    hang: bool = False  # never answer (until the test ends)


def locked(reason: str = BUSY, position: int = 1, retry_after: str = "0") -> Answer:
    return Answer(423, {"granted": False, "reason": reason, "position": position}, retry_after)


GRANTED = Answer(
    200, {"granted": True, "namespace": "ns", "name": "pod", "grantedAt": "2024-01-01T00:00:00Z"}
)
HANG = Answer(0, {}, hang=True)


@dataclass
class FakeLockd:
    """Plays the scripted answers in order, then repeats the last one."""

    script: list[Answer] = field(default_factory=lambda: [GRANTED])
    queries: list[dict[str, str]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.queries.append(dict(request.query))
        self.authorizations.append(request.headers.get("Authorization"))
        self.asked.set()
        answer = self.script[min(len(self.queries), len(self.script)) - 1]
        if answer.hang:
            await asyncio.wait_for(self.release.wait(), timeout=RUN_LIMIT)
        headers = {"Retry-After": answer.retry_after} if answer.retry_after is not None else {}
        return web.json_response(answer.body, status=answer.status or 503, headers=headers)


@pytest.fixture
async def lockd(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> AsyncIterator[FakeLockd]:
    fake = FakeLockd()
    app = web.Application()
    app.router.add_get("/v1/lock", fake.handle)
    server = await aiohttp_server(app)
    fake.url = str(server.make_url("")).rstrip("/")
    yield fake
    fake.release.set()  # let hanging handlers end so the server can shut down


@pytest.fixture
def closed_url() -> Iterator[str]:
    # Bound but not listening: connections are refused, and no other test can take the port meanwhile.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@dataclass(frozen=True)
class Run:
    code: int
    lines: list[str]  # of stderr
    stdout: str
    elapsed: float


def environment(url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGGER_", "POD_"))}
    env["PYTHONPATH"] = str(REPO)
    if url is not None:
        env.update({"STAGGER_LOCKD_URL": url, "POD_NAMESPACE": "ns", "POD_NAME": "pod"})
    env.update(extra)
    return env


async def spawn(*args: str, env: Mapping[str, str] | Mapping[bytes, bytes]) -> asyncio.subprocess.Process:
    """`python -m initclient *args` from this checkout, with exactly `env`, its stdout and stderr piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "initclient",
        *args,
        env=env,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(process: asyncio.subprocess.Process, started: float) -> Run:
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=RUN_LIMIT)
    elapsed = asyncio.get_running_loop().time() - started
    assert process.returncode is not None
    return Run(process.returncode, stderr.decode().splitlines(), stdout.decode(), elapsed)


async def run(env: dict[str, str], *args: str) -> Run:
    started = asyncio.get_running_loop().time()
    return await finish(await spawn(*args, env=env), started)
