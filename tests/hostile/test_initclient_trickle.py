"""A lockd that answers slowly or badly (issue 36, item 8), against the real `python -m initclient`: a
server on loopback that sends a status line and then one byte every few seconds (a hostile or broken
process on lockd's host port, or a lockd stuck mid-write), and the other ways a server can misbehave:
nothing listening, silent, garbage, closed mid-answer, a 5xx, a head without end, a body too large.

The bound: the unreachable bound (`--unreachable-wait`) counts a slow answer as no answer. Each request has
one deadline for the whole exchange (connect, send, the whole head and body: `initclient.http`), not a
timeout per socket read, so a server that keeps sending a byte now and then cannot hold the pod past the
bound; with `--unreachable-wait 10s` and `--max-wait 10m` the client lets its pod start (exit 0, cause
`lockdUnreachable` in its termination message, one warning naming what the server did) within 25 s, and
hangs up on the server. Why: before, requests' read timeout applied per read and only max-wait (10 m)
ended such a wait; a lockd that cannot answer must cost a new pod the unreachable bound, not its max-wait.
Every other misbehaviour ends the same way at the bound, and a slow but whole answer within the
deadline is still a grant (the deadline is not too eager).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stagger.contracts.failopen import read_outcome
from tests.initclient.process import environment, spawn

pytestmark = pytest.mark.slow

TRICKLE_EVERY = 3.0  # seconds between bytes: well under the 10 s per-read timeout the client once had
EXIT_WITHIN = 25.0  # seconds, from the issue, for --unreachable-wait 10s

_GRANT_BODY = json.dumps(
    {"granted": True, "namespace": "ns", "name": "pod", "grantedAt": "2024-01-01T00:00:00Z"}
)


@dataclass
class Misbehaving:
    """A TCP server on loopback that reads each request's head, then does `behave` until the client hangs
    up (or the behaviour ends, closing the connection)."""

    behave: Callable[[Misbehaving, asyncio.StreamWriter], Awaitable[None]]
    connections: int = 0
    trickled: int = 0  # bytes sent one at a time by the trickle
    hang_ups: int = 0  # connections the client closed while the server was still at it
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            behaviour = asyncio.create_task(self.behave(self, writer))
            closed = asyncio.create_task(reader.read())  # b"" once the client hangs up
            await asyncio.wait({behaviour, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not behaviour.done():
                self.hang_ups += 1
                self.hung_up.set()
            for task_ in (behaviour, closed):
                task_.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await task_
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.handlers.discard(task)


@contextlib.asynccontextmanager
async def serving(
    behave: Callable[[Misbehaving, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[tuple[Misbehaving, str]]:
    fake = Misbehaving(behave)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield fake, f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for handler in list(fake.handlers):
            handler.cancel()
        await asyncio.gather(*fake.handlers, return_exceptions=True)
        await server.wait_closed()


# --- what the server does after reading a request --------------------------------------------------------


async def trickle(fake: Misbehaving, writer: asyncio.StreamWriter) -> None:
    """A status line at once, then a header one byte every TRICKLE_EVERY seconds, never ending."""
    writer.write(b"HTTP/1.1 200 OK\r\n")
    await writer.drain()
    for byte in itertools.cycle(b"X-Slow: aaaaaaaa"):
        await asyncio.sleep(TRICKLE_EVERY)  # the pace is the attack
        writer.write(bytes([byte]))
        await writer.drain()
        fake.trickled += 1


async def silent(fake: Misbehaving, writer: asyncio.StreamWriter) -> None:
    await asyncio.Event().wait()


def sends(data: bytes, *, then_close: bool) -> Callable[[Misbehaving, asyncio.StreamWriter], Awaitable[None]]:
    async def behave(fake: Misbehaving, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        if not then_close:
            await asyncio.Event().wait()

    return behave


def endless(first: bytes, more: bytes) -> Callable[[Misbehaving, asyncio.StreamWriter], Awaitable[None]]:
    """`first`, then `more` as fast as the client takes it, forever."""

    async def behave(fake: Misbehaving, writer: asyncio.StreamWriter) -> None:
        writer.write(first)
        while True:
            await writer.drain()
            writer.write(more)

    return behave


async def trickled_grant(fake: Misbehaving, writer: asyncio.StreamWriter) -> None:
    """A whole, well-formed grant, one byte every 10 ms: slow, but well within the deadline."""
    answer = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(_GRANT_BODY)}\r\n\r\n"
        f"{_GRANT_BODY}"
    ).encode()
    for index in range(len(answer)):
        writer.write(answer[index : index + 1])
        await writer.drain()
        await asyncio.sleep(0.01)  # the pace is what is tested
    await asyncio.Event().wait()


# --- running the client ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    code: int
    lines: list[str]
    elapsed: float
    outcome: dict[str, str]


async def run_client(url: str, tmp_path: Path, *, unreachable_wait: str, within: float) -> Ended:
    log = tmp_path / "termination-log"
    log.write_text("")  # as the kubelet does before the container starts
    env = environment(url, STAGGER_TERMINATION_LOG=str(log))
    loop = asyncio.get_running_loop()
    started = loop.time()
    process = await spawn("--unreachable-wait", unreachable_wait, "--max-wait", "10m", env=env)
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=within)
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(
            f"the init client was still waiting after {within:g}s (unreachable-wait {unreachable_wait})"
        )
    assert process.returncode is not None
    outcome = read_outcome(log.read_text())
    assert outcome is not None, log.read_text()
    return Ended(process.returncode, stderr.decode().splitlines(), loop.time() - started, dict(outcome))


def assert_failed_open(ended: Ended, *, says: str, bound: str) -> None:
    assert ended.code == 0, ended
    warnings = [line for line in ended.lines if line.startswith("stagger: warning: ")]
    assert len(warnings) == 1, ended.lines
    assert warnings[0] == ended.lines[-1]
    assert warnings[0].startswith(
        "stagger: warning: proceeding without a start-up slot for ns/pod: lockd at "
    )
    assert says in warnings[0], warnings[0]
    assert f"unreachable-wait {bound})" in warnings[0] and warnings[0].endswith("(fail-open)")
    assert ended.outcome["slot"] == "none" and ended.outcome["cause"] == "lockdUnreachable", ended.outcome
    assert ended.outcome["reason"] == warnings[0].removeprefix("stagger: warning: ")


# --- the tests ---------------------------------------------------------------------------------------------


async def test_a_trickling_lockd_costs_the_unreachable_bound_not_max_wait(tmp_path: Path) -> None:
    async with serving(trickle) as (fake, url):
        ended = await run_client(url, tmp_path, unreachable_wait="10s", within=EXIT_WITHIN)
        # The client left the connection itself (not the server ending it), while bytes still came.
        await asyncio.wait_for(fake.hung_up.wait(), timeout=5.0)
    assert_failed_open(
        ended, says="could not be reached all along: answer not complete within 10.0s", bound="10s"
    )
    assert fake.connections == 1 and fake.hang_ups == 1
    assert fake.trickled >= 2, fake  # each byte came well within a per-read timeout of 10 s
    print(f"trickle: the init client exited after {ended.elapsed:.1f}s (bound 10s; limit {EXIT_WITHIN:g}s)")


def _closed_port() -> Callable[[], contextlib.AbstractAsyncContextManager[tuple[Misbehaving | None, str]]]:
    @contextlib.asynccontextmanager
    async def closed() -> AsyncIterator[tuple[Misbehaving | None, str]]:
        # Bound but not listening: connections are refused, and nothing else can take the port meanwhile.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            yield None, f"http://127.0.0.1:{sock.getsockname()[1]}"

    return closed


def _server(
    behave: Callable[[Misbehaving, asyncio.StreamWriter], Awaitable[None]],
) -> Callable[[], contextlib.AbstractAsyncContextManager[tuple[Misbehaving | None, str]]]:
    return lambda: serving(behave)


_HEAD_500 = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
)


@pytest.mark.parametrize(
    ("server", "says"),
    [
        pytest.param(_closed_port(), "could not be reached all along: Connection refused", id="refused"),
        pytest.param(_server(silent), "could not be reached all along: no answer within 3.0s", id="silent"),
        pytest.param(
            _server(sends(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", then_close=False)),
            "could not be reached all along: not an HTTP answer: 'SSH-2.0-OpenSSH_9.6'",
            id="garbage",
        ),
        pytest.param(
            _server(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b'{"gran', then_close=True)),
            "could not be reached all along: closed mid-answer (6 of 100 body bytes)",
            id="closed mid-answer",
        ),
        pytest.param(
            _server(sends(b"HTTP/1.1 200 OK\r\nContent-Len", then_close=True)),
            "could not be reached all along: closed mid-answer (head, 28 bytes)",
            id="closed mid-head",
        ),
        pytest.param(
            _server(sends(_HEAD_500 + b'{"error":"boom"}', then_close=False)),
            "kept failing all along: HTTP 500: boom",
            id="5xx",
        ),
        pytest.param(
            _server(endless(b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n")),
            "could not be reached all along: answer head over 16384 bytes",
            id="head without end",
        ),
        pytest.param(
            _server(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{", then_close=False)),
            "could not be reached all along: answer too large: Content-Length 1000000000000 is over 262144 bytes",
            id="body declared too large",
        ),
        pytest.param(
            _server(endless(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"[" * 4096)),
            "could not be reached all along: answer body over 262144 bytes",
            id="body without length or end",
        ),
    ],
)
async def test_each_misbehaving_server_ends_at_the_unreachable_bound(
    server: Callable[[], contextlib.AbstractAsyncContextManager[tuple[Misbehaving | None, str]]],
    says: str,
    tmp_path: Path,
) -> None:
    async with server() as (fake, url):
        ended = await run_client(url, tmp_path, unreachable_wait="3s", within=20.0)
    assert_failed_open(ended, says=says, bound="3s")
    if fake is not None:
        assert fake.connections >= 1  # it asked again within the bound, each time meeting the same server


async def test_a_slow_but_whole_answer_within_the_deadline_is_a_grant(tmp_path: Path) -> None:
    async with serving(trickled_grant) as (fake, url):
        ended = await run_client(url, tmp_path, unreachable_wait="10s", within=EXIT_WITHIN)
    assert ended.code == 0 and ended.outcome == {"slot": "granted"}, ended
    assert ended.lines[-1].startswith("stagger: granted start-up slot for ns/pod after "), ended.lines
    assert fake.connections == 1
