"""The simulated kube-controller-manager: Deployment, ReplicaSet, StatefulSet, Job, DaemonSet and garbage
collector.

One list+watch per kind; every controller re-reconciles all its objects when anything changes
(level-triggered, events coalesced) with the pure decisions of ``sim.cluster.kubernetes.workloads.actions``, then writes.
The answers to its own writes go into the caches at once, so a pass never acts on a view older
than what it just did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import aiohttp

from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.workloads.actions import Action, Create, Delete, Patch
from sim.cluster.kubernetes.workloads.daemonset import reconcile_daemonset
from sim.cluster.kubernetes.workloads.deployment import reconcile_deployment
from sim.cluster.kubernetes.workloads.garbage import orphans
from sim.cluster.kubernetes.workloads.job import JobMemory, observe_job_pod, reconcile_job
from sim.cluster.kubernetes.workloads.replicaset import reconcile_replicaset
from sim.cluster.kubernetes.workloads.statefulset import STATEFULSETS, reconcile_statefulset
from sim.cluster.objects import controller_ref, meta, namespace_of, owned_by, uid_of
from stagger.informer import Informer, InformerSettings
from stagger.kube import (
    BY_KIND,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    NODES,
    PODS,
    REPLICASETS,
    ApiError,
    Resource,
    RestClient,
)
from stagger.kube import WatchEventType as EventType
from stagger.objects import Obj
from stagger.waiting import wait_event

logger = logging.getLogger(__name__)

OWNER_KINDS = {"ReplicaSet", "Deployment", "StatefulSet", "Job", "DaemonSet"}
OWNER_RESOURCES: dict[str, Resource] = {**BY_KIND, STATEFULSETS.kind: STATEFULSETS}


@dataclass(frozen=True)
class ControllerSettings:
    resync_seconds: float = 5.0
    """Wall seconds between passes when nothing changes."""
    coalesce_seconds: float = 0.01
    """Wall seconds a controller lets events pile up before a pass (one pass for a burst of events)."""
    write_concurrency: int = 16
    informer: InformerSettings = field(default_factory=InformerSettings)


class ControllerManager:
    """Run with ``await manager.run()`` (until cancelled)."""

    def __init__(
        self, *, client: RestClient, clock: SimClock, settings: ControllerSettings = ControllerSettings()
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock

        def informer(resource: Resource) -> Informer:
            return Informer(client=client, resource=resource, settings=settings.informer)

        self.pods = informer(PODS)
        self.nodes = informer(NODES)
        self.replicasets = informer(REPLICASETS)
        self.deployments = informer(DEPLOYMENTS)
        self.jobs = informer(JOBS)
        self.daemonsets = informer(DAEMONSETS)
        self.statefulsets = informer(STATEFULSETS)
        self.informers = [
            self.pods,
            self.nodes,
            self.replicasets,
            self.deployments,
            self.jobs,
            self.daemonsets,
            self.statefulsets,
        ]
        self.job_memory: dict[str, JobMemory] = {}
        self._limit = asyncio.Semaphore(settings.write_concurrency)
        self._loops: dict[str, tuple[asyncio.Event, Callable[[], Awaitable[None]]]] = {
            "replicaset": (asyncio.Event(), self._replicasets_pass),
            "deployment": (asyncio.Event(), self._deployments_pass),
            "job": (asyncio.Event(), self._jobs_pass),
            "daemonset": (asyncio.Event(), self._daemonsets_pass),
            "statefulset": (asyncio.Event(), self._statefulsets_pass),
            "garbage-collector": (asyncio.Event(), self._gc_pass),
        }
        for inf in self.informers:
            inf.add_handler(self._on_event)
        self.pods.add_handler(self._remember_job_pods)

    def _on_event(self, _kind: EventType, _obj: Obj) -> None:
        for wake, _ in self._loops.values():
            wake.set()

    def _remember_job_pods(self, kind: EventType, pod: Obj) -> None:
        ref = controller_ref(pod)
        if kind != "DELETED" or ref is None or ref.get("kind") != "Job":
            return
        job = next((j for j in self.jobs.objects() if uid_of(j) == ref.get("uid")), None)
        if job is not None:
            memory = self.job_memory.get(uid_of(job), JobMemory())
            self.job_memory[uid_of(job)] = observe_job_pod(memory, job, pod, deleted=True)

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(i.run(), name=f"controllers-{i.resource.plural}") for i in self.informers
        ]
        try:
            for inf in self.informers:
                await inf.synced.wait()
            tasks += [
                asyncio.create_task(self._loop(name), name=f"controller-{name}") for name in self._loops
            ]
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, name: str) -> None:
        wake, run_pass = self._loops[name]
        while True:
            wake.clear()
            try:
                await run_pass()
            except Exception:
                logger.exception("%s controller pass failed", name)
            await wait_event(wake, within=self.settings.resync_seconds)
            await asyncio.sleep(self.settings.coalesce_seconds)

    # ------------------------------------------------------------------------------------- passes

    async def _replicasets_pass(self) -> None:
        now = self.clock.datetime_now()
        pods = self.pods.objects()
        actions = [a for rs in self.replicasets.objects() for a in reconcile_replicaset(rs, pods, now=now)]
        await self._execute(actions)

    async def _deployments_pass(self) -> None:
        now = self.clock.datetime_now()
        replicasets, pods = self.replicasets.objects(), self.pods.objects()
        actions = [
            a for d in self.deployments.objects() for a in reconcile_deployment(d, replicasets, pods, now=now)
        ]
        await self._execute(actions)

    async def _jobs_pass(self) -> None:
        now = self.clock.datetime_now()
        pods = self.pods.objects()
        actions: list[Action] = []
        for job in self.jobs.objects():
            memory = self.job_memory.get(uid_of(job), JobMemory())
            actions += reconcile_job(job, (p for p in pods if owned_by(p, job)), memory, now=now)
        live = {uid_of(j) for j in self.jobs.objects()}
        for uid in [u for u in self.job_memory if u not in live]:
            del self.job_memory[uid]
        await self._execute(actions)

    async def _daemonsets_pass(self) -> None:
        now = self.clock.datetime_now()
        nodes, pods = self.nodes.objects(), self.pods.objects()
        actions = [
            a for ds in self.daemonsets.objects() for a in reconcile_daemonset(ds, nodes, pods, now=now)
        ]
        await self._execute(actions)

    async def _statefulsets_pass(self) -> None:
        now = self.clock.datetime_now()
        pods = self.pods.objects()
        actions = [
            a for sts in self.statefulsets.objects() for a in reconcile_statefulset(sts, pods, now=now)
        ]
        await self._execute(actions)

    async def _gc_pass(self) -> None:
        live = {
            uid_of(o)
            for inf in (self.replicasets, self.deployments, self.jobs, self.daemonsets, self.statefulsets)
            for o in inf.objects()
        }
        candidates = [
            (inf.resource, obj)
            for inf in (self.pods, self.replicasets)
            for obj in orphans(inf.objects(), live_uids=live, owner_kinds=OWNER_KINDS)
        ]
        gone = await asyncio.gather(*(self._owners_gone(obj) for _, obj in candidates))
        actions: list[Action] = [
            Delete(resource, namespace_of(obj), str(meta(obj).get("name")), uid_of(obj))
            for (resource, obj), is_gone in zip(candidates, gone, strict=True)
            if is_gone
        ]
        await self._execute(actions)

    async def _owners_gone(self, obj: Obj) -> bool:
        """A live read of every owner: the caches of different kinds may lag one another."""
        for ref in meta(obj).get("ownerReferences") or []:
            try:
                owner = await self.client.get(
                    OWNER_RESOURCES[str(ref.get("kind"))],
                    name=str(ref.get("name")),
                    namespace=namespace_of(obj),
                )
            except ApiError as exc:
                if exc.status == 404:
                    continue
                return False
            if uid_of(owner) == ref.get("uid"):
                return False
        return True

    # ------------------------------------------------------------------------------------- writes

    def _informer_for(self, kind: str) -> Informer | None:
        return {i.resource.kind: i for i in self.informers}.get(kind)

    async def _execute(self, actions: Iterable[Action]) -> None:
        await asyncio.gather(*(self._write(a) for a in actions))

    async def _write(self, action: Action) -> None:
        async with self._limit:
            try:
                result = await self._send(action)
            except ApiError as exc:
                level = logging.DEBUG if exc.status in (404, 409) else logging.WARNING
                logger.log(level, "%s failed: %s", _describe(action), exc)
                return
            except (aiohttp.ClientError, TimeoutError) as exc:
                logger.warning("%s failed: %r", _describe(action), exc)
                return
        cache = self._informer_for(action.resource.kind)
        if cache is None:
            return
        if result.get("metadata") and result.get("kind") != "Status":
            cache.record(result)
        elif isinstance(action, Delete):
            cache.forget(f"{action.namespace}/{action.name}" if action.namespace else action.name)

    async def _send(self, action: Action) -> Obj:
        if isinstance(action, Create):
            return await self.client.create(action.resource, action.body, namespace=action.namespace)
        if isinstance(action, Patch):
            return await self.client.patch(
                action.resource,
                name=action.name,
                namespace=action.namespace,
                patch=action.patch,
                subresource=action.subresource,
            )
        return await self.client.delete(
            action.resource,
            name=action.name,
            namespace=action.namespace,
            propagation="Background",
            uid=action.uid,
        )


def _describe(action: Action) -> str:
    if isinstance(action, Create):
        body_meta = action.body.get("metadata") or {}
        return f"create {action.resource.kind} {action.namespace}/{body_meta.get('name') or body_meta.get('generateName')}"
    verb = "patch" if isinstance(action, Patch) else "delete"
    return f"{verb} {action.resource.kind} {action.namespace}/{action.name}"
