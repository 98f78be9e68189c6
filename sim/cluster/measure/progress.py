"""Watching a run make progress: how many pods are Ready over (simulated) time, restarts, and when it is done."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.workloads.job import job_finished
from sim.cluster.objects import is_terminating, labels_of, name_of, namespace_of, uid_of
from sim.cluster.scenario import Scenario
from stagger.informer import Informer, InformerSettings
from stagger.kube import JOBS, PODS, RestClient, WatchEventType
from stagger.objects import Obj
from stagger.podstate import is_pod_ready
from stagger.waiting import wait_event


@dataclass(frozen=True)
class Target:
    """What "done" means: these Deployments have all their replicas Ready, these Jobs have finished."""

    deployments: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(namespace, app label) -> replicas."""
    jobs: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, scenario: Scenario) -> Target:
        return cls(
            deployments={
                (w.namespace, w.name): w.replicas for w in scenario.workloads if w.kind == "Deployment"
            },
            jobs=frozenset((w.namespace, w.name) for w in scenario.workloads if w.kind == "Job"),
        )


def ready_pods(pods: Iterable[Mapping[str, Any]]) -> int:
    return sum(1 for p in pods if is_pod_ready(p) and not is_terminating(p))


def is_done(target: Target, pods: Iterable[Mapping[str, Any]], jobs: Iterable[Mapping[str, Any]]) -> bool:
    ready: dict[tuple[str, str], int] = {}
    for pod in pods:
        if is_pod_ready(pod) and not is_terminating(pod):
            key = (namespace_of(pod), labels_of(pod).get("app", ""))
            ready[key] = ready.get(key, 0) + 1
    if any(ready.get(key, 0) < replicas for key, replicas in target.deployments.items()):
        return False
    finished = {(namespace_of(j), name_of(j)) for j in jobs if job_finished(j)}
    return target.jobs <= finished


def container_restarts(pod: Mapping[str, Any]) -> int:
    status = pod.get("status") or {}
    return sum(
        int(c.get("restartCount") or 0)
        for c in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    )


class ProgressWatch:
    """Records the Ready count at every pod event and sets ``done`` when the target is reached."""

    def __init__(
        self, *, client: RestClient, clock: SimClock, target: Target, informer: InformerSettings | None = None
    ) -> None:
        settings = informer or InformerSettings()
        self.clock = clock
        self.target = target
        self.pods = Informer(client=client, resource=PODS, settings=settings)
        self.jobs = Informer(client=client, resource=JOBS, settings=settings)
        self.timeline: list[tuple[float, int]] = []
        self.done = asyncio.Event()
        self.done_at: float | None = None
        self.started_at = clock.now()
        self._restarts: dict[str, int] = {}
        self.pods.add_handler(self._on_pod)
        self.jobs.add_handler(lambda _kind, _obj: self._check())
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def restarts(self) -> int:
        """Container restarts of every pod seen, including pods since deleted."""
        return sum(self._restarts.values())

    async def __aenter__(self) -> ProgressWatch:
        self.started_at = self.clock.now()
        self._tasks = [
            asyncio.create_task(i.run(), name=f"progress-{i.resource.plural}") for i in (self.pods, self.jobs)
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def wait_done(self, *, deadline_seconds: float) -> bool:
        """Wait for the target, at most ``deadline_seconds`` simulated seconds after the watch started."""
        remaining = self.started_at + deadline_seconds - self.clock.now()
        return await wait_event(self.done, within=self.clock.wall_delay(remaining))

    def _on_pod(self, _kind: WatchEventType, pod: Obj) -> None:
        uid = uid_of(pod)
        self._restarts[uid] = max(self._restarts.get(uid, 0), container_restarts(pod))
        ready = ready_pods(self.pods.objects())
        t = self.clock.now() - self.started_at
        if not self.timeline or self.timeline[-1][1] != ready:
            self.timeline.append((t, ready))
        self._check()

    def _check(self) -> None:
        if not self.done.is_set() and is_done(self.target, self.pods.objects(), self.jobs.objects()):
            self.done_at = self.clock.now() - self.started_at
            self.done.set()
