"""A simulated kubelet for one node: runs its pods' containers and reports their status over the API.

Init containers run in order. One whose command line names the stagger init client runs the REAL
init client as a process (``sim.cluster.launchers.initproc``); its exit code is the container's. One whose command
line names ``webhook.idle`` is evict mode's stub (``hold: stub``): it runs, never Ready, using no CPU, until
the pod is deleted, and then exits 0; as an init container it keeps the pod in Init (Pending,
Initialized False) until then. Every other container follows the start-up model
(``sim.cluster.startup``), which shares the node's cores among the containers starting at the same time.
The kubelet wakes up on pod events, on the model's next event and on subprocess exits, so simulated
timings do not depend on a polling period.

When a pod is being deleted its containers are stopped, its final status written, then it is deleted
with ``gracePeriodSeconds=0``. While lockd has no pod watch of its own, the kubelet also frees the
pod's lockd slot (``DELETE /v1/lock``) when the pod becomes Ready, finishes or goes away
(``release_slots``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from sim.cluster import podparams
from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.podstatus import (
    ContainerView,
    final_phase,
    killed,
    pod_phase,
    render_pod_status,
    status_changed,
    status_patch,
    view_from_model,
    waiting,
)
from sim.cluster.launchers.containerenv import runs_idle_stub, runs_initclient
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import InitClientRunner, InitResult, LaunchGate, Process, stop_process
from sim.cluster.objects import is_standin, is_terminating, name_of, namespace_of, uid_of
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
)
from stagger.contracts.failopen import read_outcome
from stagger.informer import Informer, InformerSettings, cache_key
from stagger.kube import PODS, ApiError, RestClient
from stagger.objects import Obj
from stagger.podstate import is_pod_finished
from stagger.waiting import wait_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailOpen:
    pod: str
    """namespace/name"""
    why: str
    """The init client's line saying why."""
    cause: str
    """The cause its termination message names (stagger.contracts.failopen)."""


@dataclass(frozen=True)
class NodeStats:
    """What the measurements read of a kubelet (from a pool process as JSON: `to_json`, `from_json`)."""

    peak_starting: int
    """The most containers starting at once on the node."""
    arrivals: tuple[float, ...]
    """When the kubelet first saw each of its pods (simulated seconds; the pods it still knows)."""
    fail_opens: tuple[FailOpen, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "peakStarting": self.peak_starting,
            "arrivals": list(self.arrivals),
            "failOpens": [{"pod": f.pod, "why": f.why, "cause": f.cause} for f in self.fail_opens],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeStats:
        return cls(
            peak_starting=int(data["peakStarting"]),
            arrivals=tuple(float(t) for t in data["arrivals"]),
            fail_opens=tuple(
                FailOpen(pod=f["pod"], why=f["why"], cause=f["cause"]) for f in data["failOpens"]
            ),
        )


@dataclass(frozen=True)
class KubeletSettings:
    node_name: str
    node_ip: str
    pod_ip_prefix: str
    """Pod IPs are ``<prefix><n>`` (e.g. ``198.18.129.``: `nodeagent.pod_subnet`)."""
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
    stub_mains: frozenset[str] = frozenset()
    """Main containers that are evict mode's stub: running from ``main_started_at`` on, outside the model."""
    init_index: int = 0
    main_started: bool = False
    main_started_at: float | None = None
    task: asyncio.Task[InitResult] | None = None
    process: Process | None = None
    retry_at: float | None = None
    uses_stagger: bool = False
    slot_released: bool = False
    terminating: bool = False
    terminate_again_at: float | None = None
    """A termination that failed (its delete not answered) is tried again from then, as the real kubelet's
    pod worker keeps at a terminating pod until it is gone."""
    failed_phase: str | None = None
    written: Obj | None = None


TERMINATE_RETRY_SECONDS = 1.0
"""How soon a termination whose delete failed is tried again."""


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
        fork_server: ForkServer | None = None,
    ) -> None:
        self.settings = settings
        self._initclients = InitClientRunner(
            client=client,
            node_name=settings.node_name,
            node_ip=settings.node_ip,
            python=settings.python,
            nice=settings.initclient_nice,
            timeout_seconds=settings.init_process_timeout_seconds,
            stop_timeout_seconds=settings.stop_timeout_seconds,
            launch_gate=launch_gate,
            fork_server=fork_server,
        )
        self.client = client
        self.clock = clock
        self.model = NodeModel(cores=settings.cores, settings=settings.model, now=clock.now())
        self.runtimes: dict[str, PodRuntime] = {}
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
        self.fail_opens: list[FailOpen] = []
        """Pods whose init client let them start without a slot (exit 0 saying "(fail-open)")."""

    @property
    def peak_starting(self) -> int:
        return self.model.peak_starting

    def stats(self) -> NodeStats:
        return NodeStats(
            peak_starting=self.model.peak_starting,
            arrivals=tuple(sorted(rt.start_time for rt in self.runtimes.values())),
            fail_opens=tuple(self.fail_opens),
        )

    async def run(self) -> None:
        informer = asyncio.create_task(
            self._informer.run(), name=f"kubelet-{self.settings.node_name}-informer"
        )
        try:
            await self._write_load()
            while True:
                self._wake.clear()
                await self._sync()
                await wait_event(self._wake, within=self._next_wake_delay())
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
                if is_standin(pod):
                    continue  # the cluster runs its process itself (sim.cluster.standins)
                if is_terminating(pod):
                    self._spawn(self._delete_now(pod))
                    continue
                if is_pod_finished(pod):
                    continue  # finished before this kubelet started: nothing to run
                rt = self._admit(pod, now)
            rt.pod = pod
            again = rt.terminate_again_at is not None and now >= rt.terminate_again_at
            if is_terminating(pod) and (not rt.terminating or again):
                rt.terminating, rt.terminate_again_at = True, None
                self._spawn(self._terminate(rt))
        for uid in [u for u in self.runtimes if u not in seen]:
            self._forget(self.runtimes.pop(uid))
        for rt in self.runtimes.values():
            if not rt.terminating:
                self._progress(rt, now)
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

    def _admit(self, pod: Obj, now: float) -> PodRuntime:
        spec = pod.get("spec") or {}
        inits = list(spec.get("initContainers") or [])
        mains = list(spec.get("containers") or [])
        # A pod an earlier kubelet of this node ran (a cluster run again on a live API server) keeps its IP,
        # as a restarted kubelet's pods keep their sandbox's: status.podIPs allows one IP per family.
        known = str((pod.get("status") or {}).get("podIP") or "")
        taken = {rt.pod_ip for rt in self.runtimes.values()}
        rt = PodRuntime(
            uid=uid_of(pod),
            key=cache_key(pod),
            pod=pod,
            pod_ip=known if known and known not in taken else self._allocate_ip(),
            start_time=now,
            init_views=[
                waiting(str(c.get("name")), str(c.get("image", "")), reason="PodInitializing") for c in inits
            ],
            main_names=[str(c.get("name")) for c in mains],
            main_images=[str(c.get("image", "")) for c in mains],
            stub_mains=frozenset(str(c.get("name")) for c in mains if runs_idle_stub(c)),
            uses_stagger=any(runs_initclient(c) for c in inits),
        )
        self.runtimes[rt.uid] = rt
        logger.debug("%s: admitted pod %s", self.settings.node_name, rt.key)
        return rt

    def _allocate_ip(self) -> str:
        used = {rt.pod_ip for rt in self.runtimes.values()} | {
            str((pod.get("status") or {}).get("podIP") or "") for pod in self._informer.store.values()
        }
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
            if runs_idle_stub(container):
                self._progress_stub_init(rt, now)
                return
            if runs_initclient(container):
                if not self._progress_initclient(rt, container, now):
                    return
            elif not self._progress_model_init(rt, container):
                return
            rt.init_index += 1
        if not rt.main_started:
            rt.main_started = True
            rt.main_started_at = now
            try:
                spec = podparams.container_spec(rt.pod)
            except podparams.AnnotationError as exc:
                logger.warning("%s: pod %s: %s; using the defaults", self.settings.node_name, rt.key, exc)
                spec = podparams.container_spec({"spec": rt.pod.get("spec")})
            for name in rt.main_names:
                if name not in rt.stub_mains:
                    self.model = start_container(self.model, key=model_key(rt.uid, name), spec=spec)

    def _progress_stub_init(self, rt: PodRuntime, now: float) -> None:
        """Evict mode's blocking init container: running from now on, never completing (the pod stays in
        Init); it stops only when the pod is deleted (``_terminate``)."""
        view = rt.init_views[rt.init_index]
        if view.state != "running":
            rt.init_views[rt.init_index] = replace(_reset(view), state="running", reason="", started_at=now)

    def _progress_initclient(self, rt: PodRuntime, container: Mapping[str, Any], now: float) -> bool:
        """Drive the init client container; True once it has completed."""
        if rt.task is None:
            self._start_initclient(rt, container, now)
            return False
        if not rt.task.done():
            return False
        return self._initclient_exited(rt, self._initclient_result(rt), now)

    def _start_initclient(self, rt: PodRuntime, container: Mapping[str, Any], now: float) -> None:
        """Start the process, unless the container is backing off or waiting to retry its configuration."""
        if rt.retry_at is not None and now < rt.retry_at:
            return
        rt.retry_at = None
        view = rt.init_views[rt.init_index]
        rt.init_views[rt.init_index] = replace(_reset(view), state="running", reason="", started_at=now)

        def started(process: Process) -> None:
            rt.process = process

        rt.task = asyncio.create_task(
            self._initclients.run(rt.pod, container, pod_ip=rt.pod_ip, on_started=started),
            name=f"initclient-{rt.key}",
        )
        rt.task.add_done_callback(lambda _t: self._wake.set())

    def _initclient_result(self, rt: PodRuntime) -> InitResult:
        assert rt.task is not None
        task, rt.task, rt.process = rt.task, None, None
        try:
            return task.result()
        except Exception as exc:  # a spawn failure is the container's failure, not the kubelet's
            logger.warning("%s: init client of %s could not run: %r", self.settings.node_name, rt.key, exc)
            return InitResult(exit_code=128, output=(repr(exc),))

    def _initclient_exited(self, rt: PodRuntime, result: InitResult, now: float) -> bool:
        """The container's state after its process ended; True when it completed."""
        index = rt.init_index
        view = rt.init_views[index]
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
        started = view.started_at if view.started_at is not None else now
        if result.exit_code == 0:
            # The init client says why it starts without a slot in its termination message.
            outcome = read_outcome(result.message)
            if outcome is not None and outcome["slot"] == "none":
                why, cause = outcome.get("reason", ""), outcome.get("cause", "unknown")
                self.fail_opens.append(FailOpen(pod=rt.key, why=why, cause=cause))
            rt.init_views[index] = replace(
                _reset(view),
                state="terminated",
                reason="Completed",
                message=result.message,
                started_at=started,
                finished_at=now,
                ready=True,
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
            rt.init_views[index] = replace(
                _reset(view),
                state="terminated",
                reason="Error",
                exit_code=result.exit_code,
                started_at=started,
                finished_at=now,
            )
            rt.failed_phase = "Failed"
            return False
        termination = Termination(
            reason="Error", exit_code=result.exit_code, started_at=started, finished_at=now
        )
        self._back_off(rt, view, termination, now)
        return False

    def _back_off(self, rt: PodRuntime, view: ContainerView, termination: Termination, now: float) -> None:
        """CrashLoopBackOff: the container is tried again after the back-off delay of its restart count."""
        restarts = view.restarts + 1
        delay = backoff_delay(
            restarts=restarts, settings=self.settings.model, key=model_key(rt.uid, view.name)
        )
        rt.retry_at = now + delay
        rt.init_views[rt.init_index] = waiting(
            view.name,
            view.image,
            reason="CrashLoopBackOff",
            restarts=restarts,
            last=termination,
            message=f"back-off {delay:.0f}s restarting failed container={view.name} pod={name_of(rt.pod)}",
        )

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

    # ------------------------------------------------------------------------------------ status

    def _main_views(self, rt: PodRuntime) -> list[ContainerView]:
        views = []
        for name, image in zip(rt.main_names, rt.main_images, strict=True):
            if name in rt.stub_mains and rt.main_started:
                views.append(
                    ContainerView(
                        name=name, image=image, state="running", reason="", started_at=rt.main_started_at
                    )
                )
                continue
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
                patch={"metadata": {"uid": rt.uid}, "status": status_patch(status)},
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
            inits = (rt.pod.get("spec") or {}).get("initContainers") or []
            init_stubs = {str(c.get("name")) for c in inits if runs_idle_stub(c)}
            main = [_stop(v, now=now, stub=v.name in rt.stub_mains) for v in self._main_views(rt)]
            init = [
                _stop(v, now=now, stub=v.name in init_stubs, init=True) if v.state == "running" else v
                for v in rt.init_views
            ]
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
            if not await self._delete_now(rt.pod):
                rt.terminate_again_at = self.clock.now() + TERMINATE_RETRY_SECONDS
        except Exception:
            logger.exception("%s: terminating %s failed", self.settings.node_name, rt.key)
            rt.terminate_again_at = self.clock.now() + TERMINATE_RETRY_SECONDS
        finally:
            self._wake.set()

    async def _delete_now(self, pod: Obj) -> bool:
        """Delete the pod for good; whether it is gone (deleted, or no longer that pod)."""
        try:
            await self.client.delete(
                PODS, name=name_of(pod), namespace=namespace_of(pod), grace_period_seconds=0, uid=uid_of(pod)
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                logger.warning("%s: deleting %s failed: %s", self.settings.node_name, cache_key(pod), exc)
                return False
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Not answered (a busy API server, a timeout): not gone yet, tried again. Before, such a pod
            # stayed terminating for good and its owner never replaced it (make chaos, seed 72).
            logger.warning("%s: deleting %s failed: %r", self.settings.node_name, cache_key(pod), exc)
            return False
        return True

    async def _stop_init(self, rt: PodRuntime) -> None:
        if rt.process is not None and rt.process.returncode is None:
            await stop_process(rt.process, grace=self.settings.stop_timeout_seconds)
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


def _stop(view: ContainerView, *, now: float, stub: bool, init: bool = False) -> ContainerView:
    """A container stopped because its pod is being deleted: SIGTERM kills an ordinary one (143); a running
    stub (``webhook.idle``) handles it and exits 0 (an init container that exited 0 is reported ready)."""
    if stub and view.state == "running":
        return replace(view, state="terminated", reason="Completed", exit_code=0, finished_at=now, ready=init)
    return killed(view, now=now)


def _reset(view: ContainerView) -> ContainerView:
    """The container of ``view`` (name, image, restart count, last termination) in a blank state, for
    ``dataclasses.replace`` to give it its next one."""
    return ContainerView(name=view.name, image=view.image, restarts=view.restarts, last=view.last)
