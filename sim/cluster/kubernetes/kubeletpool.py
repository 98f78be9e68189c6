"""Simulated kubelets in processes of their own (``ClusterSettings.kubelet_processes``).

At 3,000 pods on 50 nodes, one event loop ran every kubelet (each with its pod watch, its start-up model
and its status writes) and was busy most of the run: a kubelet's reaction to an init client's exit or a
container's readiness waited behind the other nodes', and each such wait lengthened that node's slots
(tests/benchmarks/buys.md). A pool process runs the kubelets of some of the nodes: the same `Kubelet` class,
with an HTTP session of its own, launching init clients through the cluster's fork server. Simulated time
is the same in every process: the pool's clock is given the cluster clock's start, and Linux's
CLOCK_MONOTONIC is one clock for every process on the machine.

Protocol over the pool process's stdin and stdout, a line each way: it prints ``ready`` once its kubelets
run; ``stats`` is answered with one line of JSON, ``{node: NodeStats.to_json()}``; the end of its input
(or SIGTERM) stops its kubelets, each stopping its init clients first, and then the process.

Run: ``python -m sim.cluster.kubernetes.kubeletpool SPEC`` (SPEC: a pickle of `PoolSpec`, written by
`KubeletPool.start`; both ends are this module).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import pickle
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from sim.cluster.backend import ApiBackend
from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.kubelet import Kubelet
from sim.cluster.kubernetes.kubeletstate import KubeletSettings, NodeStats
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import LaunchGate
from sim.running import report_crash

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSpec:
    """What a pool process needs to run its kubelets."""

    backend: ApiBackend
    kubelets: tuple[KubeletSettings, ...]
    time_scale: float
    clock_start: float
    """The cluster clock's ``monotonic()`` at simulated second 0."""
    clock_base: dt.datetime
    request_timeout_seconds: float
    connection_limit: int
    fork_socket: Path | None
    """The cluster's init client fork server; None: exec'd init clients behind a launch gate of this
    process's own (``launch_concurrency``, ``launch_hold_seconds``)."""
    launch_concurrency: int = 1
    launch_hold_seconds: float = 0.25
    log_level: str = "WARNING"


class KubeletPool:
    """The parent's side: start the process, ask for its kubelets' stats, stop it."""

    def __init__(self, *, spec: PoolSpec, spec_path: Path, python: str = sys.executable) -> None:
        self.spec = spec
        self.nodes = tuple(k.node_name for k in spec.kubelets)
        self._spec_path = spec_path
        self._python = python
        self._proc: asyncio.subprocess.Process | None = None
        self._ask = asyncio.Lock()

    async def start(self, *, ready_within: float = 60.0) -> None:
        self._spec_path.write_bytes(pickle.dumps(self.spec))
        self._proc = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "sim.cluster.kubernetes.kubeletpool",
            str(self._spec_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        line = await asyncio.wait_for(self._readline(), timeout=ready_within)
        if line.strip() != b"ready":
            raise RuntimeError(f"the kubelet pool for {', '.join(self.nodes)} did not start (said {line!r})")

    async def _readline(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        return await self._proc.stdout.readline()

    async def stats(self, *, within: float = 30.0) -> dict[str, NodeStats]:
        if self._proc is None or self._proc.stdin is None or self._proc.returncode is not None:
            raise RuntimeError(f"the kubelet pool for {', '.join(self.nodes)} is not running")
        async with self._ask:
            self._proc.stdin.write(b"stats\n")
            await self._proc.stdin.drain()
            line = await asyncio.wait_for(self._readline(), timeout=within)
        if not line:
            raise RuntimeError(f"the kubelet pool for {', '.join(self.nodes)} ended")
        return {node: NodeStats.from_json(data) for node, data in json.loads(line).items()}

    async def stop(self, *, grace: float = 20.0) -> None:
        """End its input: the kubelets stop their init clients, then the process exits; killed after ``grace``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            logger.warning("kubelet pool %d did not stop within %gs: killed", proc.pid, grace)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        with contextlib.suppress(FileNotFoundError):
            self._spec_path.unlink()


# ------------------------------------------------------------------------------------ the process


async def serve(spec: PoolSpec) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    clock = SimClock(time_scale=spec.time_scale, start=spec.clock_start, wall_start=spec.clock_base)
    connector = aiohttp.TCPConnector(limit=spec.connection_limit)
    async with aiohttp.ClientSession(connector=connector) as session:
        client = spec.backend.client(session, request_timeout=spec.request_timeout_seconds)
        # Only the socket is used: the cluster runs the server (ForkServer.spawn needs no start).
        fork = None if spec.fork_socket is None else ForkServer(socket_path=spec.fork_socket, env={})
        gate = (
            None
            if fork is not None
            else LaunchGate(concurrency=spec.launch_concurrency, hold_seconds=spec.launch_hold_seconds)
        )
        kubelets = {
            settings.node_name: Kubelet(
                settings=settings,
                client=client,
                session=session,
                clock=clock,
                launch_gate=gate,
                fork_server=fork,
            )
            for settings in spec.kubelets
        }
        tasks = [asyncio.create_task(k.run(), name=f"kubelet-{name}") for name, k in kubelets.items()]
        for task in tasks:
            task.add_done_callback(report_crash)
        _say("ready")
        answering = asyncio.create_task(_answer(commands, kubelets))
        stopped = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait({answering, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Kubelets first: each stops its init clients as it ends.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            answering.cancel()
            stopped.cancel()
            await asyncio.gather(answering, stopped, return_exceptions=True)


async def _answer(commands: asyncio.StreamReader, kubelets: dict[str, Kubelet]) -> None:
    """Answer ``stats`` lines until the input ends."""
    while line := await commands.readline():
        if line.strip() == b"stats":
            _say(json.dumps({name: k.stats().to_json() for name, k in kubelets.items()}))
        else:
            logger.warning("kubelet pool: unknown command %r", line)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python -m sim.cluster.kubernetes.kubeletpool SPEC")
    spec: PoolSpec = pickle.loads(Path(argv[0]).read_bytes())
    logging.basicConfig(
        level=spec.log_level, format="%(asctime)s kubeletpool %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(spec))


if __name__ == "__main__":
    main(sys.argv[1:])
