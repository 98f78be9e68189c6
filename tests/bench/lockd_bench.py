"""lockd's memory and throughput, measured against a real `python -m lockd` process on loopback.

- RSS at rest, and with 100 long-polling waiters queued.
- Requests per second on the 423 path (a full node answering "wait"), from an aiohttp load generator
  with 32 concurrent connections in this process (each request asks for one of 200 pod names, wait=0).
- Long-poll hand-off: time from a DELETE freeing the slot to the oldest waiter's 200.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import psutil

CONNECTIONS = 32
WAITERS = 100


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_healthy(session: aiohttp.ClientSession, base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/healthz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("lockd did not become healthy within 30s")


async def _queue_length(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(f"{base}/status") as response:
        return len((await response.json())["queue"])


async def _until_queued(session: aiohttp.ClientSession, base: str, count: int) -> None:
    """lockd has no event for 'n waiters queued' that a client could await: poll /status, bounded."""
    deadline = time.monotonic() + 30
    while await _queue_length(session, base) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} waiters did not queue within 30s")
        await asyncio.sleep(0.01)


async def _hammer(session: aiohttp.ClientSession, base: str, seconds: float) -> tuple[int, dict[int, int]]:
    deadline = time.monotonic() + seconds
    statuses: dict[int, int] = {}

    async def worker(index: int) -> None:
        i = index
        while time.monotonic() < deadline:
            params = {"namespace": "bench", "name": f"p-{i % 200}"}
            async with session.get(f"{base}/v1/lock", params=params) as response:
                await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
            i += CONNECTIONS

    await asyncio.gather(*(worker(i) for i in range(CONNECTIONS)))
    return sum(statuses.values()), statuses


async def run(*, seconds: float = 10.0) -> dict[str, str]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies.yaml"
        policies.write_text(
            "nodePolicies:\n- name: bench\n  holdTimeout: 1h\n  throttleConfig: {maxConcurrent: {value: 1}}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("STAGGER_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "lockd",
            "--standalone",
            "--listen",
            f"127.0.0.1:{port}",
            "--policies",
            str(policies),
            "--log-level",
            "warning",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        info = psutil.Process(proc.pid)
        connector = aiohttp.TCPConnector(limit=CONNECTIONS + WAITERS + 8)
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                await _wait_healthy(session, base)
                await asyncio.sleep(1.0)
                rss_rest = info.memory_info().rss
                async with session.get(
                    f"{base}/v1/lock", params={"namespace": "bench", "name": "holder"}
                ) as r:
                    assert r.status == 200, r.status

                async def waiter(i: int) -> tuple[int, float]:
                    params = {"namespace": "waiters", "name": f"w-{i}", "wait": "60"}
                    async with session.get(f"{base}/v1/lock", params=params) as response:
                        await response.read()
                        return response.status, time.monotonic()

                tasks = []
                for i in range(WAITERS):
                    tasks.append(asyncio.create_task(waiter(i)))
                    if i == 0:
                        # The first waiter queues first, so it is the one the DELETE below hands the slot to.
                        await _until_queued(session, base, 1)
                await _until_queued(session, base, WAITERS)
                rss_waiters = info.memory_info().rss

                total, statuses = await _hammer(session, base, seconds)

                released_at = time.monotonic()
                async with session.delete(
                    f"{base}/v1/lock", params={"namespace": "bench", "name": "holder"}
                ) as r:
                    assert r.status == 200
                status, answered_at = await tasks[0]
                handoff_ms = (answered_at - released_at) * 1000
                for task in tasks[1:]:
                    task.cancel()
                await asyncio.gather(*tasks[1:], return_exceptions=True)
                rss_after = info.memory_info().rss
        finally:
            proc.terminate()
            await proc.wait()
    return {
        "rss at rest": f"{rss_rest / 2**20:.1f} MiB",
        f"rss with {WAITERS} long-polling waiters": f"{rss_waiters / 2**20:.1f} MiB",
        "rss after the 423 run": f"{rss_after / 2**20:.1f} MiB",
        "423-path throughput": f"{total / seconds:.0f} req/s over {seconds:g}s, {CONNECTIONS} connections, aiohttp client",
        "responses by status": ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())),
        "long-poll hand-off (DELETE -> waiter 200)": f"{handoff_ms:.1f} ms (status {status})",
    }
