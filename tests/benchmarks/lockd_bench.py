"""lockd's memory and throughput, measured against a real `python -m lockd` process on loopback, in
standalone mode and in cluster mode (watching the pods of its node on the sim API emulator, a process too).

- RSS at rest, and with 100 long-polling waiters queued.
- Requests per second on the 423 path (a full node answering "wait"), from an aiohttp load generator
  with 32 concurrent connections in this process, cycling over 100 other pods (wait=0).
- Long-poll hand-off: time from a DELETE freeing the slot to the oldest waiter's 200.
- Queue scaling (standalone): 423-path requests per second with 10 and with 10,000 pods queued (each ask
  is a re-ask of a queued pod), `/healthz` latency and `/status` size with the long queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
import psutil

from sim.kubeclient import client_for_url
from stagger.kube import NAMESPACES, NODES, PODS
from tests.processes import clean_env, free_port

CONNECTIONS = 32
WAITERS = 100
HAMMER_PODS = 100
NODE = "bench-node"
# One slot on the node, held for as long as a run lasts.
POLICY = "nodePolicies:\n- name: bench\n  holdTimeout: 1h\n  throttleConfig: {maxConcurrent: {value: 1}}\n"
Mode = Literal["standalone", "cluster"]


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str = ""

    def query(self, **extra: str) -> dict[str, str]:
        query = {"namespace": self.namespace, "name": self.name, **extra}
        if self.uid:
            query["uid"] = self.uid
        return query


async def wait_ok(session: aiohttp.ClientSession, url: str, *, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{what} did not answer 200 at {url} within 30s")


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


async def _hammer(
    session: aiohttp.ClientSession, base: str, pods: list[Pod], seconds: float
) -> tuple[int, dict[int, int]]:
    deadline = time.monotonic() + seconds
    statuses: dict[int, int] = {}

    async def worker(index: int) -> None:
        i = index
        while time.monotonic() < deadline:
            async with session.get(f"{base}/v1/lock", params=pods[i % len(pods)].query()) as response:
                await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
            i += CONNECTIONS

    await asyncio.gather(*(worker(i) for i in range(CONNECTIONS)))
    return sum(statuses.values()), statuses


async def _process(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv, env=clean_env(), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )


@contextlib.asynccontextmanager
async def _running(proc: asyncio.subprocess.Process) -> AsyncIterator[asyncio.subprocess.Process]:
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def _cluster_pods(session: aiohttp.ClientSession, api_url: str, names: list[str]) -> list[Pod]:
    """The node and its pods in the emulator, as the scheduler would have bound them."""
    client = client_for_url(session=session, base_url=api_url)
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    pods = []
    for name in names:
        created = await client.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "bench"},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "example/app:1"}]},
            },
            namespace="bench",
        )
        pods.append(Pod("bench", name, created["metadata"]["uid"]))
    return pods


async def run(*, seconds: float = 10.0, mode: Mode = "standalone") -> dict[str, str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    names = ["holder"] + [f"w-{i}" for i in range(WAITERS)] + [f"p-{i}" for i in range(HAMMER_PODS)]
    connector = aiohttp.TCPConnector(limit=CONNECTIONS + WAITERS + 8)
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies.yaml"
        policies.write_text(POLICY)
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
            lockd_mode = ["--standalone"]
            pods = [Pod("bench", name) for name in names]
            if mode == "cluster":
                api_port = free_port()
                kubeconfig = Path(tmp) / "kubeconfig"
                await stack.enter_async_context(
                    _running(
                        await _process(
                            sys.executable,
                            "-m",
                            "sim",
                            "apiserver",
                            "--listen",
                            f"127.0.0.1:{api_port}",
                            "--kubeconfig",
                            str(kubeconfig),
                        )
                    )
                )
                api_url = f"http://127.0.0.1:{api_port}"
                await wait_ok(session, f"{api_url}/version", what="the API emulator")
                pods = await _cluster_pods(session, api_url, names)
                lockd_mode = ["--kubeconfig", str(kubeconfig), "--node-name", NODE, "--no-events"]
            proc = await stack.enter_async_context(
                _running(
                    await _process(
                        sys.executable,
                        "-m",
                        "lockd",
                        *lockd_mode,
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--policies",
                        str(policies),
                        "--log-level",
                        "warning",
                    )
                )
            )
            info = psutil.Process(proc.pid)
            await wait_ok(session, f"{base}/readyz", what="lockd")
            await asyncio.sleep(1.0)
            rss_rest = info.memory_info().rss
            holder, waiters, others = pods[0], pods[1 : WAITERS + 1], pods[WAITERS + 1 :]
            async with session.get(f"{base}/v1/lock", params=holder.query()) as r:
                assert r.status == 200, r.status
                token = r.headers["X-Stagger-Release-Token"]

            async def wait(pod: Pod) -> tuple[int, float]:
                async with session.get(f"{base}/v1/lock", params=pod.query(wait="60")) as response:
                    await response.read()
                    return response.status, time.monotonic()

            tasks = []
            for i, pod in enumerate(waiters):
                tasks.append(asyncio.create_task(wait(pod)))
                if i == 0:
                    # The first waiter queues first, so it is the one the DELETE below hands the slot to.
                    await _until_queued(session, base, 1)
            await _until_queued(session, base, WAITERS)
            rss_waiters = info.memory_info().rss

            total, statuses = await _hammer(session, base, others, seconds)

            released_at = time.monotonic()
            async with session.delete(
                f"{base}/v1/lock", params=holder.query(), headers={"X-Stagger-Release-Token": token}
            ) as r:
                assert r.status == 200, r.status
            status, answered_at = await tasks[0]
            handoff_ms = (answered_at - released_at) * 1000
            for task in tasks[1:]:
                task.cancel()
            await asyncio.gather(*tasks[1:], return_exceptions=True)
            rss_after = info.memory_info().rss
    pods_note = f", {len(names)} pods on the node" if mode == "cluster" else ""
    return {
        "mode": mode + pods_note,
        "rss at rest": f"{rss_rest / 2**20:.1f} MiB",
        f"rss with {WAITERS} long-polling waiters": f"{rss_waiters / 2**20:.1f} MiB",
        "rss after the 423 run": f"{rss_after / 2**20:.1f} MiB",
        "423-path throughput": f"{total / seconds:.0f} req/s over {seconds:g}s, {CONNECTIONS} connections, aiohttp client",
        "responses by status": ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())),
        "long-poll hand-off (DELETE -> waiter 200)": f"{handoff_ms:.1f} ms (status {status})",
    }


async def _fill_queue(session: aiohttp.ClientSession, base: str, names: list[str]) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)

    async def worker() -> None:
        while not queue.empty():
            name = queue.get_nowait()
            async with session.get(f"{base}/v1/lock", params={"namespace": "bench", "name": name}) as r:
                await r.read()
                assert r.status == 423, r.status

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))


async def queue_scaling(*, seconds: float = 5.0) -> dict[str, str]:
    """423-path req/s with a short and a long queue: every ask must cost O(log n) in the queue's length."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    short, long = 10, 10_000
    connector = aiohttp.TCPConnector(limit=CONNECTIONS + 8)
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies.yaml"
        policies.write_text(POLICY)
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
            args = ["--standalone", "--policies", str(policies), "--max-queue", str(long + 10)]
            args += ["--waiter-idle-timeout", "1h", "--log-level", "warning", "--listen", f"127.0.0.1:{port}"]
            await stack.enter_async_context(_running(await _process(sys.executable, "-m", "lockd", *args)))
            await wait_ok(session, f"{base}/readyz", what="lockd")
            async with session.get(f"{base}/v1/lock", params={"namespace": "bench", "name": "holder"}) as r:
                assert r.status == 200, r.status
            names = [f"q-{i:05d}" for i in range(long)]
            results: dict[int, float] = {}
            await _fill_queue(session, base, names[:short])
            total, _ = await _hammer(session, base, [Pod("bench", n) for n in names[:short]], seconds)
            results[short] = total / seconds
            await _fill_queue(session, base, names[short:])
            # Re-asks spread over the whole queue, the head and the tail alike.
            total, _ = await _hammer(session, base, [Pod("bench", n) for n in names[::97]], seconds)
            results[long] = total / seconds
            started = time.monotonic()
            async with session.get(f"{base}/healthz") as r:
                await r.read()
            healthz_ms = (time.monotonic() - started) * 1000
            async with session.get(f"{base}/status") as r:
                status_bytes = len(await r.read())
    return {
        "mode": "standalone, queue scaling",
        f"423-path throughput, {short} waiters": f"{results[short]:.0f} req/s",
        f"423-path throughput, {long:,} waiters": f"{results[long]:.0f} req/s",
        "ratio (short / long queue; goal <= 1.5)": f"{results[short] / results[long]:.2f}",
        f"/healthz with {long:,} waiters": f"{healthz_ms:.1f} ms",
        f"/status size with {long:,} waiters": f"{status_bytes / 1024:.1f} KiB (first 100 listed)",
    }
