"""A simulated kubelet for one node: runs its pods' containers and reports their status over the API.

Init containers run in order. One whose command line names the stagger init client runs the REAL
init client (``python -m initclient``) as a subprocess, with the container's environment resolved the
way a kubelet does (downward API, ``$(VAR)`` expansion); its exit code is the container's. Every other
container follows the start-up model (``sim.cluster.startup``), which shares the node's cores among the
containers starting at the same time. The kubelet wakes up on pod events, on the model's next event
and on subprocess exits, so simulated timings do not depend on a polling period.

When a pod is being deleted its containers are stopped, its final status written, then it is deleted
with ``gracePeriodSeconds=0``. While lockd has no pod watch of its own, the kubelet also frees the
pod's lockd slot (``DELETE /v1/lock``) when the pod becomes Ready, finishes or goes away
(``release_slots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from sim.cluster import podparams
from sim.cluster.clock import SimClock
from sim.cluster.containerenv import (
    EnvError,
    command_line,
    configmap_refs,
    initclient_args,
    resolve_env,
    runs_initclient,
)
from sim.cluster.objects import is_terminating, name_of, namespace_of, uid_of
from sim.cluster.podstatus import (
    ContainerView,
    final_phase,
    killed,
    pod_phase,
    render_pod_status,
    status_changed,
    view_from_model,
    waiting,
)
from sim.cluster.startup import (
    ModelSettings,
    NodeModel,
    Termination,
    advance,
    backoff_delay,
    cpu_busy_percent,
    next_event_at,
    remove_container,
    start_container,
    starting_count,
)
from stagger.informer import Informer, InformerSettings, cache_key
from stagger.kube import CONFIGMAPS, PODS, ApiError, RestClient
from stagger.objects import Obj
from stagger.podstate import is_pod_finished

logger = logging.getLogger(__name__)

_OUTPUT_LINES = 20


@dataclass(frozen=True)
class KubeletSettings:
    node_name: str
    node_ip: str
    pod_ip_prefix: str
    """Pod IPs are ``<prefix><n>`` (e.g. ``10.244.1.``)."""
    cores: float
    model: ModelSettings = field(default_factory=ModelSettings)
    lockd_url: str | None = None
    """This node's lockd, for freeing slots; None when stagger is off."""
    release_slots: bool = True
    load_file: Path | None = None
    """Where the node's CPU busy percentage is written for lockd's ``--load-file``."""
    max_tick_seconds: float = 0.5
    """Longest wall time between two checks when nothing happens (a safety net: wake-ups are events)."""
    init_process_timeout_seconds: float = 900.0
    """Wall time an init client process may run before it is killed (exit 137)."""
    stop_timeout_seconds: float = 5.0
    """Wall time between SIGTERM and SIGKILL when a pod's init client is stopped."""
    release_timeout_seconds: float = 5.0
    config_retry_seconds: float = 10.0
    """Simulated seconds before a container with a configuration error is tried again."""
    python: str = sys.executable
    initclient_nice: int = 10
    """Niceness of the init client processes (0: same priority as the simulator)."""
    informer: InformerSettings = field(default_factory=InformerSettings)


@dataclass(frozen=True)
class InitResult:
    exit_code: int
    output: tuple[str, ...] = ()
    config_error: str | None = None


@dataclass
class PodRuntime:
    """The kubelet's memory of one pod (shell state; statuses are rendered from it by pure code)."""

    uid: str
    key: str
    pod: Obj
    pod_ip: str
    start_time: float
    init_views: list[ContainerView]
    main_names: list[str]
    main_images: list[str]
    init_index: int = 0
    init_attempts: int = 0
    main_started: bool = False
    task: asyncio.Task[InitResult] | None = None
    process: asyncio.subprocess.Process | None = None
    retry_at: float | None = None
    uses_stagger: bool = False
    slot_released: bool = False
    terminating: bool = False
    failed_phase: str | None = None
    written: Obj | None = None
    output: deque[str] = field(default_factory=lambda: deque(maxlen=_OUTPUT_LINES))


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


def model_key(uid: str, name: str, *, init: bool = False) -> str:
    return f"{uid}/{'init/' if init else ''}{name}"


class Kubelet:
    """Run with ``await kubelet.run()`` (until cancelled)."""

    def __init__(
        self,
        *,
        settings: KubeletSettings,
        client: RestClient,
        session: aiohttp.ClientSession,
        clock: SimClock,
        launch_gate: LaunchGate | None = None,
    ) -> None:
        self.settings = settings
        self._launch_gate = launch_gate
        self.client = client
        self.clock = clock
        self.model = NodeModel(cores=settings.cores, settings=settings.model, now=clock.now())
        self.runtimes: dict[str, PodRuntime] = {}
        self.starting_timeline: list[tuple[float, int]] = []
        """(simulated time, containers starting) at every change: what the node went through."""
        self._session = session
        self._informer = Informer(
            client=client,
            resource=PODS,
            settings=settings.informer,
            field_selector=f"spec.nodeName={settings.node_name}",
        )
        self._informer.add_handler(lambda _kind, _obj: self._wake.set())
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._next_ip = 2
        self._last_load: float | None = None

    @property
    def peak_starting(self) -> int:
        return self.model.peak_starting

    async def run(self) -> None:
        informer = asyncio.create_task(
            self._informer.run(), name=f"kubelet-{self.settings.node_name}-informer"
        )
        try:
            await self._write_load()
            while True:
                self._wake.clear()
                await self._sync()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._next_wake_delay())
        finally:
            informer.cancel()
            await asyncio.gather(informer, return_exceptions=True)
            await self._stop_all()

    # ------------------------------------------------------------------------------------------ loop

    def _next_wake_delay(self) -> float:
        now = self.clock.now()
        candidates = [self.settings.max_tick_seconds]
        t = next_event_at(self.model)
        if t is not None:
            candidates.append(self.clock.wall_delay(t - now))
        for rt in self.runtimes.values():
            if rt.retry_at is not None:
                candidates.append(self.clock.wall_delay(rt.retry_at - now))
        return max(0.0, min(candidates))

    async def _sync(self) -> None:
        now = self.clock.now()
        self._advance(now)
        live = self._informer.store
        seen: set[str] = set()
        for pod in list(live.values()):
            uid = uid_of(pod)
            seen.add(uid)
            rt = self.runtimes.get(uid)
            if rt is None:
                if is_terminating(pod):
                    self._spawn(self._delete_now(pod))
                    continue
                if is_pod_finished(pod):
                    continue  # finished before this kubelet started: nothing to run
                rt = self._admit(pod, now)
            rt.pod = pod
            if is_terminating(pod) and not rt.terminating:
                rt.terminating = True
                self._spawn(self._terminate(rt))
        for uid in [u for u in self.runtimes if u not in seen]:
            self._forget(self.runtimes.pop(uid))
        for rt in self.runtimes.values():
            if not rt.terminating:
                self._progress(rt, now)
        self._record_starting(now)
        writes = []
        for rt in self.runtimes.values():
            if rt.terminating:
                continue
            status = self._render(rt, now)
            if status_changed(rt.written, status):
                writes.append(self._write_status(rt, status))
            if (
                rt.uses_stagger
                and not rt.slot_released
                and (
                    status["phase"] in ("Succeeded", "Failed")
                    or any(
                        c.get("type") == "Ready" and c.get("status") == "True" for c in status["conditions"]
                    )
                )
            ):
                self._release_slot(rt)
        if writes:
            await asyncio.gather(*writes)
        await self._write_load()

    def _advance(self, now: float) -> None:
        self.model, _events = advance(self.model, until=max(now, self.model.now))

    def _record_starting(self, now: float) -> None:
        count = starting_count(self.model)
        if not self.starting_timeline or self.starting_timeline[-1][1] != count:
            self.starting_timeline.append((now, count))

    def _admit(self, pod: Obj, now: float) -> PodRuntime:
        spec = pod.get("spec") or {}
        inits = list(spec.get("initContainers") or [])
        mains = list(spec.get("containers") or [])
        rt = PodRuntime(
            uid=uid_of(pod),
            key=cache_key(pod),
            pod=pod,
            pod_ip=self._allocate_ip(),
            start_time=now,
            init_views=[
                waiting(str(c.get("name")), str(c.get("image", "")), reason="PodInitializing") for c in inits
            ],
            main_names=[str(c.get("name")) for c in mains],
            main_images=[str(c.get("image", "")) for c in mains],
            uses_stagger=any(runs_initclient(c) for c in inits),
        )
        self.runtimes[rt.uid] = rt
        logger.debug("%s: admitted pod %s", self.settings.node_name, rt.key)
        return rt

    def _allocate_ip(self) -> str:
        used = {rt.pod_ip for rt in self.runtimes.values()}
        for _ in range(253):
            candidate = f"{self.settings.pod_ip_prefix}{self._next_ip}"
            self._next_ip = 2 if self._next_ip >= 254 else self._next_ip + 1
            if candidate not in used:
                return candidate
        raise RuntimeError(f"{self.settings.node_name}: no pod IP left")

    # ------------------------------------------------------------------------------ init containers

    def _progress(self, rt: PodRuntime, now: float) -> None:
        if rt.failed_phase is not None:
            return
        inits = list((rt.pod.get("spec") or {}).get("initContainers") or [])
        while rt.init_index < len(inits):
            container = inits[rt.init_index]
            if runs_initclient(container):
                if not self._progress_initclient(rt, container, now):
                    return
            elif not self._progress_model_init(rt, container):
                return
            rt.init_index += 1
            rt.init_attempts = 0
        if not rt.main_started:
            rt.main_started = True
            try:
                spec = podparams.container_spec(rt.pod)
            except podparams.AnnotationError as exc:
                logger.warning("%s: pod %s: %s; using the defaults", self.settings.node_name, rt.key, exc)
                spec = podparams.container_spec({"spec": rt.pod.get("spec")})
            for name in rt.main_names:
                self.model = start_container(self.model, key=model_key(rt.uid, name), spec=spec)

    def _progress_initclient(self, rt: PodRuntime, container: Mapping[str, Any], now: float) -> bool:
        """Drive the init client container; True once it has completed."""
        index = rt.init_index
        view = rt.init_views[index]
        if rt.task is None:
            if rt.retry_at is not None and now < rt.retry_at:
                return False
            rt.retry_at = None
            rt.init_views[index] = ContainerView(
                name=view.name,
                image=view.image,
                state="running",
                reason="",
                started_at=now,
                restarts=view.restarts,
                last=view.last,
            )
            rt.task = asyncio.create_task(self._run_initclient(rt, container), name=f"initclient-{rt.key}")
            rt.task.add_done_callback(lambda _t: self._wake.set())
            return False
        if not rt.task.done():
            return False
        task, rt.task, rt.process = rt.task, None, None
        try:
            result = task.result()
        except Exception as exc:  # a spawn failure is the container's failure, not the kubelet's
            logger.warning("%s: init client of %s could not run: %r", self.settings.node_name, rt.key, exc)
            result = InitResult(exit_code=128, output=(repr(exc),))
        rt.output.extend(result.output)
        if result.config_error is not None:
            rt.init_views[index] = waiting(
                view.name,
                view.image,
                reason="CreateContainerConfigError",
                message=result.config_error,
                restarts=view.restarts,
                last=view.last,
            )
            rt.retry_at = now + self.settings.config_retry_seconds
            return False
        started = rt.init_views[index].started_at
        termination = Termination(
            reason="Completed" if result.exit_code == 0 else "Error",
            exit_code=result.exit_code,
            started_at=started if started is not None else now,
            finished_at=now,
        )
        if result.exit_code == 0:
            rt.init_views[index] = ContainerView(
                name=view.name,
                image=view.image,
                state="terminated",
                reason="Completed",
                exit_code=0,
                started_at=termination.started_at,
                finished_at=now,
                ready=True,
                restarts=view.restarts,
                last=view.last,
            )
            return True
        logger.info(
            "%s: init client of %s exited %d: %s",
            self.settings.node_name,
            rt.key,
            result.exit_code,
            " | ".join(result.output[-3:]),
        )
        if podparams.restart_policy(rt.pod) == "Never":
            rt.init_views[index] = ContainerView(
                name=view.name,
                image=view.image,
                state="terminated",
                reason="Error",
                exit_code=result.exit_code,
                started_at=termination.started_at,
                finished_at=now,
                restarts=view.restarts,
                last=view.last,
            )
            rt.failed_phase = "Failed"
            return False
        restarts = view.restarts + 1
        delay = backoff_delay(
            restarts=restarts, settings=self.settings.model, key=model_key(rt.uid, view.name)
        )
        rt.retry_at = now + delay
        rt.init_views[index] = waiting(
            view.name,
            view.image,
            reason="CrashLoopBackOff",
            restarts=restarts,
            last=termination,
            message=f"back-off {delay:.0f}s restarting failed container={view.name} pod={name_of(rt.pod)}",
        )
        return False

    def _progress_model_init(self, rt: PodRuntime, container: Mapping[str, Any]) -> bool:
        """Drive an ordinary init container through the model; True once it has completed."""
        name = str(container.get("name"))
        key = model_key(rt.uid, name, init=True)
        state = self.model.containers.get(key)
        if state is None:
            try:
                spec = podparams.init_container_spec(rt.pod)
            except podparams.AnnotationError as exc:
                logger.warning("%s: pod %s: %s; using the defaults", self.settings.node_name, rt.key, exc)
                spec = podparams.init_container_spec({"spec": rt.pod.get("spec")})
            self.model = start_container(self.model, key=key, spec=spec)
            state = self.model.containers[key]
        view = view_from_model(
            name, str(container.get("image", "")), state, is_init=True, pod_name=name_of(rt.pod)
        )
        rt.init_views[rt.init_index] = view
        if state.phase == "succeeded":
            return True
        if state.phase == "failed":
            rt.failed_phase = "Failed"
        return False

    async def _run_initclient(self, rt: PodRuntime, container: Mapping[str, Any]) -> InitResult:
        configmaps: dict[str, dict[str, str]] = {}
        for cm_name in configmap_refs(container):
            try:
                cm = await self.client.get(CONFIGMAPS, name=cm_name, namespace=namespace_of(rt.pod))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                continue
            configmaps[cm_name] = {str(k): str(v) for k, v in (cm.get("data") or {}).items()}
        try:
            env = resolve_env(
                container,
                rt.pod,
                node_name=self.settings.node_name,
                host_ip=self.settings.node_ip,
                pod_ip=rt.pod_ip,
                configmaps=configmaps,
            )
        except EnvError as exc:
            return InitResult(exit_code=0, config_error=str(exc))
        args = initclient_args(command_line(container, env))
        launched = await self._launch_gate.enter() if self._launch_gate is not None else None
        try:
            return await self._spawn_initclient(rt, args=args, env=env)
        finally:
            if launched is not None:
                launched()

    async def _spawn_initclient(
        self, rt: PodRuntime, *, args: list[str], env: Mapping[str, str]
    ) -> InitResult:
        proc = await asyncio.create_subprocess_exec(
            self.settings.python,
            "-m",
            "initclient",
            *args,
            env=_process_env(env, hostname=name_of(rt.pod)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        rt.process = proc
        if self.settings.initclient_nice:
            # The simulated nodes share this machine's cores: the init clients' start-up must not starve
            # the simulator (whose lateness would show up as simulated time).
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, self.settings.initclient_nice)
        try:
            out, _ = await asyncio.wait_for(
                proc.communicate(), timeout=self.settings.init_process_timeout_seconds
            )
        except TimeoutError:
            logger.warning("%s: init client of %s ran too long; killing it", self.settings.node_name, rt.key)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return InitResult(exit_code=137, output=("killed: ran longer than the kubelet allows",))
        finally:
            if proc.returncode is None:  # cancelled: do not leave the process behind
                await _stop_process(proc, grace=self.settings.stop_timeout_seconds)
        lines = tuple(out.decode(errors="replace").splitlines()[-_OUTPUT_LINES:])
        code = proc.returncode if proc.returncode is not None else 137
        return InitResult(exit_code=code if code >= 0 else 128 - code, output=lines)

    # ------------------------------------------------------------------------------------ status

    def _main_views(self, rt: PodRuntime) -> list[ContainerView]:
        views = []
        for name, image in zip(rt.main_names, rt.main_images, strict=True):
            state = self.model.containers.get(model_key(rt.uid, name))
            if state is None:
                views.append(waiting(name, image, reason="PodInitializing"))
            else:
                views.append(view_from_model(name, image, state, pod_name=name_of(rt.pod)))
        return views

    def _render(self, rt: PodRuntime, now: float) -> Obj:
        main = self._main_views(rt)
        phase = rt.failed_phase or pod_phase(
            init=rt.init_views,
            main=main,
            restart_policy=podparams.restart_policy(rt.pod),
            started=rt.main_started,
        )
        return render_pod_status(
            rt.pod,
            init=rt.init_views,
            main=main,
            phase=phase,
            host_ip=self.settings.node_ip,
            pod_ip=rt.pod_ip,
            start_time=rt.start_time,
            now=now,
            base=self.clock.base,
        )

    async def _write_status(self, rt: PodRuntime, status: Obj) -> None:
        try:
            updated = await self.client.patch(
                PODS,
                name=name_of(rt.pod),
                namespace=namespace_of(rt.pod),
                subresource="status",
                patch={"metadata": {"uid": rt.uid}, "status": status},
                patch_type="strategic",
            )
        except ApiError as exc:
            if exc.status != 404:
                logger.warning("%s: status of %s not written: %s", self.settings.node_name, rt.key, exc)
            return
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("%s: status of %s not written: %r", self.settings.node_name, rt.key, exc)
            return
        rt.written = status
        if uid_of(updated) == rt.uid:
            self._informer.record(updated)
            rt.pod = updated

    async def _write_load(self) -> None:
        path = self.settings.load_file
        if path is None:
            return
        busy = cpu_busy_percent(self.model)
        if busy == self._last_load:
            return
        self._last_load = busy
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"cpuPercent": busy, "ioPercent": 0.0}))
        tmp.replace(path)  # atomic: lockd never reads half a file

    # -------------------------------------------------------------------------------- termination

    async def _terminate(self, rt: PodRuntime) -> None:
        """Stop the pod's containers, write its final status, then delete it for good."""
        try:
            await self._stop_init(rt)
            now = self.clock.now()
            self._advance(now)
            main = [killed(v, now=now) for v in self._main_views(rt)]
            init = [killed(v, now=now) if v.state == "running" else v for v in rt.init_views]
            for name in rt.main_names:
                self.model = remove_container(self.model, key=model_key(rt.uid, name))
            for view in rt.init_views:
                self.model = remove_container(self.model, key=model_key(rt.uid, view.name, init=True))
            self._release_slot(rt)
            already = (rt.pod.get("status") or {}).get("phase")
            phase = already if already in ("Succeeded", "Failed") else (rt.failed_phase or final_phase(main))
            status = render_pod_status(
                rt.pod,
                init=init,
                main=main,
                phase=phase,
                host_ip=self.settings.node_ip,
                pod_ip=rt.pod_ip,
                start_time=rt.start_time,
                now=now,
                base=self.clock.base,
            )
            await self._write_status(rt, status)
            await self._delete_now(rt.pod)
        except Exception:
            logger.exception("%s: terminating %s failed", self.settings.node_name, rt.key)
        finally:
            self._wake.set()

    async def _delete_now(self, pod: Obj) -> None:
        try:
            await self.client.delete(
                PODS, name=name_of(pod), namespace=namespace_of(pod), grace_period_seconds=0, uid=uid_of(pod)
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                logger.warning("%s: deleting %s failed: %s", self.settings.node_name, cache_key(pod), exc)

    async def _stop_init(self, rt: PodRuntime) -> None:
        if rt.process is not None and rt.process.returncode is None:
            await _stop_process(rt.process, grace=self.settings.stop_timeout_seconds)
        if rt.task is not None:
            rt.task.cancel()
            await asyncio.gather(rt.task, return_exceptions=True)
            rt.task = None

    def _forget(self, rt: PodRuntime) -> None:
        """The pod is gone from the API: drop everything left of it."""
        for name in rt.main_names:
            self.model = remove_container(self.model, key=model_key(rt.uid, name))
        for view in rt.init_views:
            self.model = remove_container(self.model, key=model_key(rt.uid, view.name, init=True))
        self._release_slot(rt)
        if rt.task is not None or rt.process is not None:
            self._spawn(self._stop_init(rt))

    async def _stop_all(self) -> None:
        stops = [self._stop_init(rt) for rt in self.runtimes.values() if rt.task is not None or rt.process]
        await asyncio.gather(*stops, return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # ------------------------------------------------------------------------------------- lockd

    def _release_slot(self, rt: PodRuntime) -> None:
        if not rt.uses_stagger or rt.slot_released:
            return
        rt.slot_released = True
        if self.settings.release_slots and self.settings.lockd_url:
            self._spawn(self._delete_lock(namespace_of(rt.pod), name_of(rt.pod)))

    async def _delete_lock(self, namespace: str, name: str) -> None:
        url = f"{self.settings.lockd_url}/v1/lock"
        try:
            async with self._session.delete(
                url,
                params={"namespace": namespace, "name": name},
                timeout=aiohttp.ClientTimeout(total=self.settings.release_timeout_seconds),
            ) as resp:
                if resp.status >= 400 and resp.status != 404:
                    logger.warning(
                        "%s: lockd release of %s/%s: HTTP %d",
                        self.settings.node_name,
                        namespace,
                        name,
                        resp.status,
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning(
                "%s: lockd release of %s/%s failed: %r", self.settings.node_name, namespace, name, exc
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _process_env(env: Mapping[str, str], *, hostname: str) -> dict[str, str]:
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


async def _stop_process(proc: asyncio.subprocess.Process, *, grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace`` seconds."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout=grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
