"""Hostile callers for the flood tests: many connections over raw sockets, each sending what an attacker
would (a head too large, a body declared and then trickled, a head never ended), while the probes are timed
and the server's memory is read from /proc.

Every connection is bounded in time (`Flood.hold`): the attack stops by itself even if the server does not
close it, and every socket is closed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Flood", "FloodResult", "peak_rss_mib", "rss_mib", "time_gets"]


def _status_kib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def rss_mib(pid: int) -> float:
    """The process's resident memory now."""
    return _status_kib(pid, "VmRSS") / 1024


def peak_rss_mib(pid: int) -> float:
    """The most the process has ever had resident (the kernel's high-water mark)."""
    return _status_kib(pid, "VmHWM") / 1024


@dataclass
class FloodResult:
    """What the attackers saw: each connection's first answer line (or how it ended without one)."""

    endings: Counter[str] = field(default_factory=Counter)
    opened: int = 0


@dataclass
class Flood:
    """`connections` connections to `host`:`port`, each sending `first`, then `trickle` one byte every
    `every` seconds (when set), until the server closes it or `hold` seconds pass. `sources` spread the
    connections over loopback addresses, as callers from many pods. They are not 127.0.0.1: thousands of
    connections take as many local ports of their address, and the servers other tests start at the same
    time listen on 127.0.0.1 ports found free a moment before."""

    host: str
    port: int
    connections: int
    first: bytes
    trickle: bool = False
    every: float = 1.0
    hold: float = 30.0
    sources: Sequence[str] = ("127.0.1.1",)
    ssl_context: ssl.SSLContext | None = None
    opening: int = 256  # connections being opened at once (the listen backlog is finite)
    all_open: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> FloodResult:
        result = FloodResult()
        gate = asyncio.Semaphore(self.opening)
        deadline = time.monotonic() + self.hold
        await asyncio.gather(*(self._one(i, gate, deadline, result) for i in range(self.connections)))
        return result

    async def _one(self, i: int, gate: asyncio.Semaphore, deadline: float, result: FloodResult) -> None:
        source = self.sources[i % len(self.sources)]
        writer: asyncio.StreamWriter | None = None
        try:
            async with gate:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        self.host, self.port, local_addr=(source, 0), ssl=self.ssl_context
                    ),
                    timeout=max(0.1, deadline - time.monotonic()),
                )
                result.opened += 1
                if result.opened == self.connections:
                    self.all_open.set()
                writer.write(self.first)
            ending = await self._feed(reader, writer, deadline)
        except (ConnectionError, OSError, ssl.SSLError) as err:
            ending = f"error: {type(err).__name__}"
        except TimeoutError:
            ending = "not opened in time"
        finally:
            if writer is not None:
                writer.transport.abort()
        result.endings[ending] += 1

    async def _feed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, deadline: float) -> str:
        """Trickles until the server answers or closes; returns its answer's status line, or how it ended."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "held to the end"
            try:
                line = await asyncio.wait_for(reader.readline(), timeout=min(left, self.every))
            except TimeoutError:
                if self.trickle:
                    writer.write(b"x")
                continue
            return line.decode("latin-1").strip() or "closed without an answer"


async def time_gets(host: str, port: int, path: str, *, count: int) -> list[float]:
    """Seconds each of `count` plain GETs of `path` took, one after the other, each on a new connection,
    from connecting to the whole answer; every answer must be 200."""
    took = []
    for _ in range(count):
        started = time.perf_counter()
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=10)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n".encode())
            answer = await asyncio.wait_for(reader.read(), timeout=10)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        took.append(time.perf_counter() - started)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    return took
