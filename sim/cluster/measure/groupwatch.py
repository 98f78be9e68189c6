"""Judging a staggering group from the pods' states over time: at every change seen through one watch of
the enabled pods, how many of the group have started (their grant is recorded: the `granted-at`
annotation, written by lockd in lock mode and by the gate reconciler in gate mode) and how many are Ready,
and whether the started ever exceeded the pacer's allowance for the Ready count at that moment.

The watch sees changes in the API server's order, as the controller does: a grant the controller made
after seeing R pods Ready is recorded after those Ready changes, so a correct controller never shows a
violation here. Pods started longer ago than the policy's startTimeout stop counting for the controller;
they are counted here all the same (the check is stricter than the pacer, which is fine for runs shorter
than startTimeout). Finished pods (a Job's, Succeeded or Failed) count neither as started nor as Ready, as
for the pacer.

Each pod of the group is also traced (`pods`, by uid, deleted pods included, and `log`, the order of what
happened to them): in evict mode whether admission held it (the `<prefix>/hold` annotation) or let it
through (the `<prefix>/ticket` annotation), when it was granted, Ready, finished, disrupted (the
DisruptionTarget condition an eviction adds) and deleted, so that a test can tell evicted pods from their
replacements.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.cluster.clock import SimClock
from sim.cluster.objects import controller_ref, is_terminating
from stagger import pacers
from stagger.informer import Informer, InformerSettings
from stagger.kube import PODS, RestClient, WatchEventType
from stagger.names import Names
from stagger.objects import Obj, condition
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase
from stagger.policy import Pacer
from stagger.selectors import LabelSelector
from stagger.waiting import wait_event

__all__ = ["GroupPoint", "GroupWatch", "PodEvent", "PodTrace"]


@dataclass(frozen=True)
class GroupPoint:
    at: float  # simulated seconds since the watch started
    started: int
    ready: int
    allowance: int | None


@dataclass
class PodTrace:
    """What one pod of the group went through, as the watch saw it (times: simulated seconds since the
    watch started)."""

    namespace: str
    name: str
    uid: str
    owner: str
    """The uid of its controller ("" for a bare pod)."""
    owner_kind: str
    seen_at: float
    created: str | None = None
    """Its creationTimestamp."""
    node_selector: dict[str, str] = field(default_factory=dict)
    """Its nodeSelector as first seen."""
    init_containers: tuple[str, ...] = ()
    """The names of its init containers as first seen."""
    hold: str | None = None
    """The `<prefix>/hold` annotation (evict mode: held at admission, `nodeSelector` or `stub`)."""
    held_since: str | None = None
    ticket: str | None = None
    """The `<prefix>/ticket` annotation (evict mode: let through at admission)."""
    staggered: bool = False
    """The `<prefix>/staggered` label was seen on it."""
    granted_at: float | None = None
    ready_at: float | None = None
    finished: str | None = None
    """`Succeeded` or `Failed` once it finished."""
    disrupted: bool = False
    """The DisruptionTarget condition was seen on it (an eviction adds it before deleting)."""
    terminating_at: float | None = None
    deleted_at: float | None = None
    node: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class PodEvent:
    """One step of one pod: `held` or `admitted` (first seen, with or without evict mode's hold), `granted`
    (granted-at appeared later), `ready`, `finished`, `terminating`, `deleted`."""

    at: float
    uid: str
    key: str
    what: str


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
    pods: dict[str, PodTrace] = field(default_factory=dict)
    """Every pod of the group seen, by uid."""
    log: list[PodEvent] = field(default_factory=list)
    _change: asyncio.Event = field(default_factory=asyncio.Event)
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
        if is_pod_finished(pod):
            return False
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return self.names.granted_at_annotation in annotations or is_pod_ready(pod)

    async def wait_until(self, check: Callable[[], bool], *, within: float) -> bool:
        """Wait (at most `within` wall seconds) until `check()` is true, asking again at every change the
        watch sees; whether it came true."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not check():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._change.clear()
            await wait_event(self._change, within=remaining)
        return True

    def held(self) -> list[PodTrace]:
        """The pods held at admission (evict mode), in the order they were seen."""
        return [trace for trace in self.pods.values() if trace.hold is not None]

    def admitted(self) -> list[PodTrace]:
        """The pods let through at admission in evict mode (a ticket), in the order they were seen."""
        return [trace for trace in self.pods.values() if trace.ticket is not None]

    def steps(self, what: str) -> list[PodEvent]:
        return [event for event in self.log if event.what == what]

    def _trace(self, kind: WatchEventType, pod: Obj) -> None:
        metadata = pod.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        if not uid:
            return
        now = self.clock.now() - self._started_at
        trace = self.pods.get(uid)
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        annotations = metadata.get("annotations") or {}
        labels = metadata.get("labels") or {}
        spec = pod.get("spec") or {}
        if trace is None:
            owner = controller_ref(pod) or {}
            trace = self.pods[uid] = PodTrace(
                namespace=str(metadata.get("namespace") or ""),
                name=str(metadata.get("name") or ""),
                uid=uid,
                owner=str(owner.get("uid") or ""),
                owner_kind=str(owner.get("kind") or ""),
                seen_at=now,
                created=metadata.get("creationTimestamp"),
                node_selector=dict(spec.get("nodeSelector") or {}),
                init_containers=tuple(str(c.get("name")) for c in spec.get("initContainers") or []),
                hold=annotations.get(self.names.hold_annotation),
                held_since=annotations.get(self.names.held_since_annotation),
                ticket=annotations.get(self.names.ticket_annotation),
            )
            self.log.append(PodEvent(now, uid, key, "held" if trace.hold is not None else "admitted"))
        trace.staggered = trace.staggered or labels.get(self.names.staggered_label) == "1"
        trace.node = str(spec.get("nodeName") or trace.node)
        if trace.granted_at is None and self.names.granted_at_annotation in annotations:
            trace.granted_at = now
            self.log.append(PodEvent(now, uid, key, "granted"))
        if trace.ready_at is None and is_pod_ready(pod):
            trace.ready_at = now
            self.log.append(PodEvent(now, uid, key, "ready"))
        if trace.finished is None and is_pod_finished(pod):
            trace.finished = pod_phase(pod)
            self.log.append(PodEvent(now, uid, key, "finished"))
        disruption = condition(pod, "DisruptionTarget") or {}
        trace.disrupted = trace.disrupted or disruption.get("status") == "True"
        if trace.terminating_at is None and is_terminating(pod):
            trace.terminating_at = now
            self.log.append(PodEvent(now, uid, key, "terminating"))
        if kind == "DELETED" and trace.deleted_at is None:
            trace.deleted_at = now
            self.log.append(PodEvent(now, uid, key, "deleted"))

    def _changed(self, kind: WatchEventType, pod: Any) -> None:
        assert self._pods is not None
        self._trace(kind, pod)
        self._change.set()
        pods = self._pods.objects()
        ready = sum(1 for pod in pods if is_pod_ready(pod) and not is_pod_finished(pod))
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
