"""Real lockd processes for the simulated nodes, one per node address: in cluster mode (watching the
emulator through a kubeconfig) or standalone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from sim.cluster.launchers.stopping import stop_process

logger = logging.getLogger(__name__)


class LockdError(RuntimeError):
    """A lockd process did not come up; the message has the end of its log."""


@dataclass(frozen=True)
class LockdSpec:
    node_name: str
    host: str
    port: int
    policies: Path | None
    load_file: Path
    log_file: Path
    cores: int
    labels: Mapping[str, str] = field(default_factory=dict)
    """Standalone mode only: stands in for the Node's labels."""
    kubeconfig: Path | None = None
    """Cluster mode when set: lockd lists and watches its node's pods and Node through the emulator."""
    sample_interval: str = "200ms"
    """lockd re-reads the load file this often (wall time)."""
    log_level: str = "warning"
    python: str = sys.executable
    extra_args: tuple[str, ...] = ()
    """More flags (the controller's URL, token and CA when the simulated cluster runs it)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """More environment variables (a chaos run's clock skew: libfaketime's)."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        mode = ["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig is not None else ["--standalone"]
        argv = [
            self.python, "-m", "lockd", *mode,
            "--listen", f"{self.host}:{self.port}",
            "--node-name", self.node_name,
            "--load-file", str(self.load_file),
            "--sample-interval", self.sample_interval,
            "--cores", str(self.cores),
            "--log-level", self.log_level,
        ]  # fmt: skip
        if self.policies is not None:
            argv += ["--policies", str(self.policies)]
        if self.labels and self.kubeconfig is None:
            argv += ["--node-labels", ",".join(f"{k}={v}" for k, v in self.labels.items())]
        return argv + list(self.extra_args)


class LockdProcess:
    def __init__(self, spec: LockdSpec) -> None:
        self.spec = spec
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    async def start(self) -> None:
        with self.spec.log_file.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *self.spec.argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, **self.spec.env} if self.spec.env else None,
            )

    async def wait_ready(self, *, session: aiohttp.ClientSession, deadline: float) -> None:
        """Poll ``/readyz`` until 200 (lockd has no event to wait for), at most ``deadline`` wall seconds."""
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + deadline
        while True:
            if self._proc is not None and self._proc.returncode is not None:
                raise LockdError(
                    f"lockd for {self.spec.node_name} exited {self._proc.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    f"{self.spec.url}/readyz", timeout=aiohttp.ClientTimeout(total=1)
                ) as resp:
                    if resp.status == 200:
                        return
            if loop.time() > stop_at:
                raise LockdError(
                    f"lockd for {self.spec.node_name} not ready after {deadline:g}s:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.05)

    async def stop(self, *, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        proc = self._proc
        if proc is None:
            return

        def on_kill() -> None:
            logger.warning("lockd for %s did not stop in %gs; killing it", self.spec.node_name, grace)

        await stop_process(proc, grace=grace, on_kill=on_kill)

    async def kill(self) -> None:
        """SIGKILL, as a crashing node agent or an OOM kill would: no graceful shutdown at all."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.spec.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


LOWEST_PORT = 20000


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range; 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def common_free_port(hosts: Sequence[str]) -> int:
    """A TCP port free on every one of ``hosts`` right now (lockd's hostPort is the same on all nodes).

    Chosen at random below the kernel's ephemeral range, never from it: a port the kernel handed out for a
    bind to port 0 goes back to that range when the probe closes, and under parallel tests another process's
    outgoing connection or listener could take it before lockd binds it (a CI run once saw lockd's bind
    fail with "address already in use"). Below the range only a process that names that very port can."""
    top = _ephemeral_start()
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(LOWEST_PORT, top) if top > LOWEST_PORT else chooser.randrange(1024, 65536)
        if all(_port_free(h, port) for h in hosts):
            return port
    raise OSError(f"no TCP port is free on all of {', '.join(hosts)}")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True
