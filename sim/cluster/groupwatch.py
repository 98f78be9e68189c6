"""Judging a staggering group from the pods' states over time: at every change seen through one watch of
the enabled pods, how many of the group have started (their grant is recorded: the `granted-at`
annotation, written by lockd in lock mode and by the gate reconciler in gate mode) and how many are Ready,
and whether the started ever exceeded the pacer's allowance for the Ready count at that moment.

The watch sees changes in the API server's order, as the controller does: a grant the controller made
after seeing R pods Ready is recorded after those Ready changes, so a correct controller never shows a
violation here. Pods started longer ago than the policy's startTimeout stop counting for the controller;
they are counted here all the same (the check is stricter than the pacer, which is fine for runs shorter
than startTimeout).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from sim.cluster.clock import SimClock
from stagger import pacers
from stagger.informer import Informer, InformerSettings
from stagger.kube import PODS, RestClient, WatchEventType
from stagger.names import Names
from stagger.objects import Obj
from stagger.podstate import is_pod_ready
from stagger.policy import Pacer
from stagger.selectors import LabelSelector

__all__ = ["GroupPoint", "GroupWatch"]


@dataclass(frozen=True)
class GroupPoint:
    at: float  # simulated seconds since the watch started
    started: int
    ready: int
    allowance: int | None


@dataclass
class GroupWatch:
    """Watches the enabled pods `selector` matches (the policy's labelSelector: the group's pods, for a
    policy without a grouping key or with one key) and judges them."""

    client: RestClient
    clock: SimClock
    pacer: Pacer
    selector: LabelSelector
    names: Names = field(default_factory=Names)
    informer: InformerSettings = field(default_factory=InformerSettings)
    timeline: list[GroupPoint] = field(default_factory=list)
    violations: list[GroupPoint] = field(default_factory=list)
    _pods: Informer | None = None
    _task: asyncio.Task[None] | None = None
    _started_at: float = 0.0

    async def __aenter__(self) -> GroupWatch:
        self._started_at = self.clock.now()
        self._pods = Informer(
            client=self.client,
            resource=PODS,
            settings=self.informer,
            label_selector=",".join(filter(None, [f"{self.names.enable_label}=1", self.selector.to_query()])),
        )
        self._pods.add_handler(self._changed)
        self._task = asyncio.create_task(self._pods.run(), name="group-watch")
        await self._pods.synced.wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _is_started(self, pod: Obj) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return self.names.granted_at_annotation in annotations or is_pod_ready(pod)

    def _changed(self, _kind: WatchEventType, _pod: Any) -> None:
        assert self._pods is not None
        pods = self._pods.objects()
        ready = sum(1 for pod in pods if is_pod_ready(pod))
        started = sum(1 for pod in pods if self._is_started(pod))
        limit = pacers.allowance(self.pacer, ready=ready)
        point = GroupPoint(
            at=self.clock.now() - self._started_at, started=started, ready=ready, allowance=limit
        )
        last = self.timeline[-1] if self.timeline else None
        if last is None or (last.started, last.ready) != (started, ready):
            self.timeline.append(point)
        if limit is not None and started > limit:
            self.violations.append(point)
