"""A simulated kubelet for one node: runs its pods' containers and reports their status over the API.

Init containers run in order. One whose command line names the stagger init client runs the REAL
init client as a process (``sim.cluster.kubernetes.initclientcontainer``); its exit code is the
container's. One whose command line names ``webhook.idle`` is evict mode's stub (``hold: stub``): it
runs, never Ready, using no CPU, until the pod is deleted, and then exits 0; as an init container it
keeps the pod in Init (Pending, Initialized False) until then. Every other container follows the start-up
model (``sim.cluster.startup``), which shares the node's cores among the containers starting at the same
time; a main container with a ``readinessProbe`` is Ready at the first probe (its ``periodSeconds``,
``initialDelaySeconds``) once its work is done, as a real kubelet's. The kubelet never runs a probe's
action: the model says when it passes.
The kubelet wakes up on pod events, on the model's next event and on subprocess exits, so simulated
timings do not depend on a polling period.

When a pod is being deleted its containers are stopped, its final status written, then it is deleted
with ``gracePeriodSeconds=0``. While lockd has no pod watch of its own, the kubelet also frees the
pod's lockd slot (``DELETE /v1/lock``) when the pod becomes Ready, finishes or goes away
(``release_slots``). What the kubelet keeps of each pod, its settings and its stats are in
``sim.cluster.kubernetes.kubeletstate``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from sim.cluster import podparams
from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.initclientcontainer import InitClientContainers
from sim.cluster.kubernetes.kubeletstate import FailOpen, KubeletSettings, NodeStats, PodRuntime, model_key
from sim.cluster.kubernetes.podstatus import (
    ContainerView,
    final_phase,
    pod_phase,
    render_pod_status,
    started,
    status_changed,
    status_patch,
    stopped,
    view_from_model,
    waiting,
)
from sim.cluster.launchers.containerenv import runs_idle_stub, runs_initclient
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import LaunchGate
from sim.cluster.objects import is_standin, is_terminating, name_of, namespace_of, uid_of
from sim.cluster.startup import (
    NodeModel,
    advance,
    cpu_busy_percent,
    next_event_at,
    remove_container,
    start_container,
)
from stagger.informer import Informer, cache_key
from stagger.kube import PODS, ApiError, RestClient
from stagger.objects import Obj
from stagger.podstate import is_pod_finished
from stagger.waiting import wait_event

logger = logging.getLogger(__name__)


TERMINATE_RETRY_SECONDS = 1.0
"""How soon a termination whose delete failed is tried again."""


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
        self._wake = asyncio.Event()
        self._initclient = InitClientContainers(
            settings=settings,
            client=client,
            wake=self._wake.set,
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
        self._background: set[asyncio.Task[Any]] = set()
        self._next_ip = 2
        self._last_load: float | None = None

    @property
    def fail_opens(self) -> list[FailOpen]:
        """Pods whose init client let them start without a slot (exit 0 saying "(fail-open)")."""
        return self._initclient.fail_opens

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
                if not self._initclient.progress(rt, container=container, now=now):
                    return
            elif not self._progress_model_init(rt, container):
                return
            rt.init_index += 1
        if not rt.main_started:
            rt.main_started = True
            rt.main_started_at = now
            self._start_mains(rt)

    def _start_mains(self, rt: PodRuntime) -> None:
        """Start the pod's main containers in the model, each with its own readiness probe's timing."""
        try:
            podparams.container_spec(rt.pod)
            annotated: Mapping[str, Any] = rt.pod
        except podparams.AnnotationError as exc:
            logger.warning("%s: pod %s: %s; using the defaults", self.settings.node_name, rt.key, exc)
            annotated = {"spec": rt.pod.get("spec")}
        containers = {str(c.get("name")): c for c in (rt.pod.get("spec") or {}).get("containers") or []}
        for name in rt.main_names:
            if name not in rt.stub_mains:
                spec = podparams.container_spec(annotated, container=containers.get(name))
                self.model = start_container(self.model, key=model_key(rt.uid, name), spec=spec)

    def _progress_stub_init(self, rt: PodRuntime, now: float) -> None:
        """Evict mode's blocking init container: running from now on, never completing (the pod stays in
        Init); it stops only when the pod is deleted (``_terminate``)."""
        view = rt.init_views[rt.init_index]
        if view.state != "running":
            rt.init_views[rt.init_index] = started(view, now=now)

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
        return self._status(rt, init=rt.init_views, main=main, phase=phase, now=now)

    def _status(
        self,
        rt: PodRuntime,
        *,
        init: list[ContainerView],
        main: list[ContainerView],
        phase: str,
        now: float,
    ) -> Obj:
        """The status of ``rt``'s pod with these containers in this phase, as this node reports it."""
        return render_pod_status(
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
            await self._initclient.stop(rt)
            now = self.clock.now()
            self._advance(now)
            inits = (rt.pod.get("spec") or {}).get("initContainers") or []
            init_stubs = {str(c.get("name")) for c in inits if runs_idle_stub(c)}
            main = [stopped(v, now=now, stub=v.name in rt.stub_mains) for v in self._main_views(rt)]
            init = [
                stopped(v, now=now, stub=v.name in init_stubs, init=True) if v.state == "running" else v
                for v in rt.init_views
            ]
            self._remove_containers(rt)
            self._release_slot(rt)
            already = (rt.pod.get("status") or {}).get("phase")
            phase = already if already in ("Succeeded", "Failed") else (rt.failed_phase or final_phase(main))
            await self._write_status(rt, self._status(rt, init=init, main=main, phase=phase, now=now))
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

    def _forget(self, rt: PodRuntime) -> None:
        """The pod is gone from the API: drop everything left of it."""
        self._remove_containers(rt)
        self._release_slot(rt)
        if rt.task is not None or rt.process is not None:
            self._spawn(self._initclient.stop(rt))

    def _remove_containers(self, rt: PodRuntime) -> None:
        """Take the pod's containers out of the start-up model: they no longer share the node's cores."""
        for name in rt.main_names:
            self.model = remove_container(self.model, key=model_key(rt.uid, name))
        for view in rt.init_views:
            self.model = remove_container(self.model, key=model_key(rt.uid, view.name, init=True))

    async def _stop_all(self) -> None:
        stops = [
            self._initclient.stop(rt) for rt in self.runtimes.values() if rt.task is not None or rt.process
        ]
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
