"""Every pod of a chaos run's namespace as the checks see it: watched directly, not through the fault
proxy, so that the checks see the truth (when each pod appeared, was Ready, finished, went)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sim.chaos.herd import GROUP_LABEL
from stagger.kube import WatchEventType
from stagger.names import Names
from stagger.objects import condition
from stagger.podstate import is_pod_finished, is_pod_ready

NAMES = Names()


@dataclass
class PodLife:
    """One pod as the checks saw it (wall seconds since the run began)."""

    key: str
    kind: str
    created: float
    node: str = ""
    ready_at: float | None = None
    finished: bool = False
    deleted: bool = False
    held: bool = False
    disrupted: int = 0
    unmutated: bool = False
    """Opted in (the enable label) but created without stagger's init container: the admission webhook
    could not be reached and its failurePolicy Ignore let the pod through as it was (a fail-open)."""
    groups: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        """Still there, and neither Ready yet nor finished: what the run waits for."""
        return not self.deleted and self.ready_at is None and not self.finished


class PodLedger:
    """Every pod of the run's namespace, watched directly: when it appeared, was Ready, finished, went."""

    def __init__(self, *, started: float) -> None:
        self.started = started
        self.pods: dict[str, PodLife] = {}

    def __call__(self, kind: WatchEventType, pod: Any) -> None:
        metadata = pod.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        now = time.monotonic() - self.started
        labels = metadata.get("labels") or {}
        life = self.pods.get(uid)
        if life is None:
            life = self.pods[uid] = PodLife(
                key=f"{metadata.get('namespace')}/{metadata.get('name')}",
                kind=str(labels.get("chaos-kind", "")),
                created=now,
            )
        spec = pod.get("spec") or {}
        life.node = str(spec.get("nodeName") or life.node)
        if labels.get(NAMES.enable_label) == "1":
            inits = {str(c.get("name")) for c in spec.get("initContainers") or []}
            gated = any(g.get("name") == NAMES.scheduling_gate for g in spec.get("schedulingGates") or [])
            life.unmutated = not (inits & {"stagger-wait", "stagger-hold"}) and not gated and not life.held
        if labels.get(GROUP_LABEL):
            life.groups = (str(labels[GROUP_LABEL]),)
        annotations = metadata.get("annotations") or {}
        life.held = life.held or NAMES.hold_annotation in annotations
        if condition(pod, "DisruptionTarget") is not None and life.disrupted == 0:
            life.disrupted = 1
        if is_pod_ready(pod) and life.ready_at is None:
            life.ready_at = now
        life.finished = life.finished or is_pod_finished(pod)
        if kind == "DELETED" or metadata.get("deletionTimestamp"):
            life.deleted = True
