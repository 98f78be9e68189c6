"""The stagger init client as a real process: the REAL init client (``python -m initclient``) runs for
the init container that names it, with the container's environment resolved the way a kubelet does
(downward API, ConfigMap references, ``$(VAR)`` expansion); its exit code is the container's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sim.cluster.launchers.containerenv import (
    EnvError,
    command_line,
    configmap_refs,
    initclient_args,
    resolve_env,
)
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.projected import ProjectionError, mapped_env, project_tokens
from sim.cluster.launchers.stopping import stop_process
from sim.cluster.objects import name_of, namespace_of
from stagger.informer import cache_key
from stagger.kube import CONFIGMAPS, ApiError, RestClient

logger = logging.getLogger(__name__)

OUTPUT_LINES = 20
"""The last lines of the process's output kept for the kubelet's log."""

TERMINATION_MESSAGE_LIMIT = 4096
"""The bytes of a termination message the kubelet keeps."""


class Process(Protocol):
    """What the kubelet needs of an init client process: an exec'd one (``asyncio.subprocess.Process``) or
    a forked one (``sim.cluster.launchers.forkserver.ForkedProcess``)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    def wait(self) -> Awaitable[int]: ...

    def communicate(self) -> Awaitable[tuple[bytes, bytes | None]]: ...


@dataclass(frozen=True)
class InitResult:
    exit_code: int
    output: tuple[str, ...] = ()
    config_error: str | None = None
    """The container could not be created (CreateContainerConfigError): the process did not run."""
    message: str = ""
    """What the process wrote to its termination log (the kubelet's ``state.terminated.message``)."""


class LaunchGate:
    """Spreads out process launches on this machine, shared by all simulated nodes.

    Every node of the simulated cluster runs its init clients on the same few real cores. Launched all at
    once, they would share those cores fairly and all finish starting up late together, so the first
    grants (and the whole staggered run) would be delayed by a cost a real cluster spreads over its
    nodes. The gate lets at most ``concurrency`` processes be in their first ``hold_seconds`` (the
    interpreter's start-up) at a time, oldest first; a process that exits earlier frees its place.
    """

    def __init__(self, *, concurrency: int, hold_seconds: float) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._hold = hold_seconds

    async def enter(self) -> Callable[[], None]:
        """Wait for a place; returns the (idempotent) release, which also happens by itself after the hold."""
        await self._slots.acquire()
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                timer.cancel()
                self._slots.release()

        timer = asyncio.get_running_loop().call_later(self._hold, release)
        return release


@dataclass(frozen=True)
class InitClientRunner:
    """Runs one node's init client containers as processes of this machine."""

    client: RestClient
    node_name: str
    node_ip: str
    python: str
    nice: int
    """Niceness of the processes (0: same priority as the simulator)."""
    timeout_seconds: float
    """Wall time a process may run before it is killed (exit 137)."""
    stop_timeout_seconds: float
    """Wall time between SIGTERM and SIGKILL when a process is stopped."""
    launch_gate: LaunchGate | None = None
    fork_server: ForkServer | None = None
    """Launch through this fork server (``sim.cluster.launchers.forkserver``) instead of exec'ing ``python -m
    initclient``: the same init client code in its own process, without the interpreter's start-up."""

    async def run(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        pod_ip: str,
        on_started: Callable[[Process], None],
    ) -> InitResult:
        """Resolve the container's environment, then run the process to its end; ``on_started`` gets the
        process as soon as it exists (so that it can be stopped). Cancelling stops the process too."""
        configmaps = await self._configmaps(pod, container)
        try:
            env = resolve_env(
                container,
                pod,
                node_name=self.node_name,
                host_ip=self.node_ip,
                pod_ip=pod_ip,
                configmaps=configmaps,
            )
        except EnvError as exc:
            return InitResult(exit_code=0, config_error=str(exc))
        args = initclient_args(command_line(container, env))
        # The container's own files: its projected token volumes, and the termination log the kubelet
        # creates for each container and mounts at its terminationMessagePath (/dev/termination-log); the
        # process is told where it is. What it wrote becomes the terminated state's message, at most 4096
        # bytes, as the kubelet keeps it.
        files = Path(tempfile.mkdtemp(prefix="stagger-container-"))
        try:
            try:
                mounts = await project_tokens(self.client, pod, container, into=files)
            except ProjectionError as exc:
                return InitResult(exit_code=0, config_error=str(exc))
            log = files / "termination-log"
            log.touch()
            env = {**mapped_env(env, mounts), "STAGGER_TERMINATION_LOG": str(log)}
            release = await self.launch_gate.enter() if self.launch_gate is not None else None
            try:
                result = await self._spawn(pod, args=args, env=env, on_started=on_started)
            finally:
                if release is not None:
                    release()
            return replace(result, message=_read_message(str(log)))
        finally:
            shutil.rmtree(files, ignore_errors=True)

    async def _configmaps(
        self, pod: Mapping[str, Any], container: Mapping[str, Any]
    ) -> dict[str, dict[str, str]]:
        """The data of the ConfigMaps the container's environment refers to (missing ones left out)."""
        found: dict[str, dict[str, str]] = {}
        for cm_name in configmap_refs(container):
            try:
                cm = await self.client.get(CONFIGMAPS, name=cm_name, namespace=namespace_of(pod))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                continue
            found[cm_name] = {str(k): str(v) for k, v in (cm.get("data") or {}).items()}
        return found

    async def _spawn(
        self,
        pod: Mapping[str, Any],
        *,
        args: list[str],
        env: Mapping[str, str],
        on_started: Callable[[Process], None],
    ) -> InitResult:
        proc: Process
        if self.fork_server is not None:
            proc = await self.fork_server.spawn(
                args, env=process_env(env, hostname=name_of(pod)), nice=self.nice
            )
        else:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "initclient",
                *args,
                env=process_env(env, hostname=name_of(pod)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        on_started(proc)
        if self.nice and self.fork_server is None:
            # The simulated nodes share this machine's cores: the init clients' start-up must not starve
            # the simulator (whose lateness would show up as simulated time).
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, self.nice)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=self.timeout_seconds)
        except TimeoutError:
            logger.warning("%s: init client of %s ran too long; killing it", self.node_name, cache_key(pod))
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return InitResult(exit_code=137, output=("killed: ran longer than the kubelet allows",))
        finally:
            if proc.returncode is None:  # cancelled: do not leave the process behind
                await stop_process(proc, grace=self.stop_timeout_seconds)
        lines = tuple(out.decode(errors="replace").splitlines()[-OUTPUT_LINES:])
        code = proc.returncode if proc.returncode is not None else 137
        return InitResult(exit_code=code if code >= 0 else 128 - code, output=lines)


def _read_message(path: str) -> str:
    """A termination log as the kubelet reads it: its first 4096 bytes (a file of a few bytes, read at once)."""
    with open(path, "rb") as handle:
        return handle.read(TERMINATION_MESSAGE_LIMIT).decode(errors="replace")


def process_env(env: Mapping[str, str], *, hostname: str) -> dict[str, str]:
    """A container's environment: its own variables, plus what a Python process on this machine needs to
    find the interpreter and the project (a real container image has these built in)."""
    result = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")}
    spec = importlib.util.find_spec("initclient")
    paths = [str(Path(p).parent) for p in (spec.submodule_search_locations or [])] if spec else []
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    if paths:
        result["PYTHONPATH"] = os.pathsep.join(paths)
    result["HOSTNAME"] = hostname
    result.update(env)
    return result
