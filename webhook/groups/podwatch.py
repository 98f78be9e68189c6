"""The controller's one list+watch of enabled pods, cluster-wide (label selector `<prefix>/enable=1`),
feeding the group book, and the Events people see on pods (`StaggerHeld`, `StaggerReleased`).

Only a slim copy of each pod is stored (`slim_pod`): the fields the book reads, and the names for
Events. A pod object is 5-20 KB; its slim copy well under 1 KB, so 10,000 enabled pods cost a few MB.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from stagger import groupbook
from stagger.contracts import failopen
from stagger.events import EventRecorder, EventType, PodRef, pod_event
from stagger.groupbook import PodRecord, controller_of
from stagger.informer import Informer, InformerSettings
from stagger.kube import PODS, RestClient, WatchEventType
from stagger.names import Names
from stagger.objects import Obj
from webhook.groups.pacing import Pacing

__all__ = ["COMPONENT", "PodWatch", "slim_pod", "transition_event"]

logger = logging.getLogger(__name__)

COMPONENT = "stagger-controller"

# Of an init client's reason for failing open (up to 4 KB), this much is kept per pod.
REASON_KEPT = 512


def slim_pod(pod: Mapping[str, Any], *, names: Names, init_container: str) -> Obj:
    """What the controller keeps of a pod. Pure. Annotations and labels under other prefixes, the spec
    beyond scheduling gates, node and the init containers' names, owner references but the controller's,
    and every status field but phase, the Ready condition and how the init client (`init_container`)
    ended are dropped."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ours = f"{names.prefix}/"
    slim_meta: dict[str, Any] = {
        key: metadata[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
        if key in metadata
    }
    slim_meta["labels"] = {k: v for k, v in (metadata.get("labels") or {}).items()}
    slim_meta["annotations"] = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if k.startswith(ours)
    }
    owner = controller_of(metadata)
    if owner is not None:
        # Evict mode: an evicted pod's place is reserved for its controller's replacement.
        slim_meta["ownerReferences"] = [
            {key: owner[key] for key in ("apiVersion", "kind", "name", "uid", "controller") if key in owner}
        ]
    slim_spec: dict[str, Any] = {}
    if spec.get("schedulingGates"):
        slim_spec["schedulingGates"] = spec["schedulingGates"]
    if spec.get("nodeName"):
        slim_spec["nodeName"] = spec["nodeName"]
    # Whether admission injected the init client (or evict mode's hold): a fail-open when it did not.
    slim_spec["initContainers"] = [
        {"name": c.get("name")} for c in _listed(spec.get("initContainers")) if isinstance(c.get("name"), str)
    ]
    conditions = [
        c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "Ready"
    ]
    slim_status: dict[str, Any] = {"conditions": conditions}
    if status.get("phase"):
        slim_status["phase"] = status["phase"]
    ended = _init_client_ended(status, init_container=init_container)
    if ended is not None:
        slim_status["initContainerStatuses"] = [ended]
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


def _listed(value: object) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _init_client_ended(status: Mapping[str, Any], *, init_container: str) -> Obj | None:
    """The init client's terminated state (exit code, and its outcome with the reason cut short), or None."""
    for container in _listed(status.get("initContainerStatuses")):
        terminated = (container.get("state") or {}).get("terminated")
        if container.get("name") != init_container or not isinstance(terminated, Mapping):
            continue
        ended: dict[str, Any] = {"exitCode": terminated.get("exitCode")}
        outcome = failopen.read_outcome(terminated.get("message"))
        if outcome is not None:
            reason = outcome.get("reason", "")
            cut = reason if len(reason) <= REASON_KEPT else reason[:REASON_KEPT] + " [cut]"
            ended["message"] = failopen.format_outcome(cause=outcome.get("cause"), reason=cut)
        return {"name": init_container, "state": {"terminated": ended}}
    return None


def transition_event(
    old: PodRecord | None, new: PodRecord | None, *, describe: Callable[[PodRecord], str]
) -> tuple[str, str] | None:
    """The Event a change of a pod's record deserves, as (reason, message), or None. Pure.

    StaggerHeld when a pod is first seen held; StaggerReleased when a held pod's grant shows on it
    (granted-at, gate or label gone). `describe` gives the group counts for the message. Only for pods held
    off their node (gate and evict mode): a pod held in lock mode waits in its init container, and the
    node's lockd writes StaggerWaiting (with the group's reason) and StaggerGranted for it; two more Events
    from here would say the same again, and cost the API server two writes per pod."""
    if new is None or not _held_off_node(old if old is not None and old.waiting else new):
        return None
    if new.waiting and (old is None or not old.waiting):
        return "StaggerHeld", f"held by its staggering policies: {describe(new)}"
    if old is not None and old.waiting and not new.waiting and not new.finished and not new.ready:
        return "StaggerReleased", f"released: {describe(new)}"
    return None


def _held_off_node(record: PodRecord) -> bool:
    return record.gated or record.evict_hold


class PodWatch:
    """Keeps the book in step with the API. `synced` is set once every enabled pod has been listed."""

    def __init__(
        self,
        *,
        client: RestClient,
        pacing: Pacing,
        settings: InformerSettings,
        events: EventRecorder | None,
        host: str,
        init_container: str,
        wall: Callable[[], float] = time.time,
    ) -> None:
        names = pacing.names
        self.pacing = pacing
        self.informer = Informer(
            client=client,
            resource=PODS,
            settings=settings,
            label_selector=f"{names.enable_label}=1",
            transform=lambda pod: slim_pod(pod, names=names, init_container=init_container),
        )
        self.informer.add_handler(self._handle)
        self._events = events
        self._host = host
        self._wall = wall
        self.announce_events = False  # only the leader writes Events

    @property
    def synced(self) -> bool:
        return self.informer.synced.is_set()

    async def run(self) -> None:
        await self.informer.run()

    def _handle(self, kind: WatchEventType, pod: Obj) -> None:
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        old = self.pacing.book.get(key)
        if kind == "DELETED":
            self.pacing.pod_deleted(pod)
            return
        # Stamped with the controller's own clock as the watch delivers it: a Ready here starts the
        # Ready-to-grant latency (stagger_controller_grant_latency_seconds). Not while listing: the first
        # list is what this process found, not pods that just turned Ready.
        self.pacing.pod_changed(pod, seen=self.pacing.monotonic() if self.synced else None)
        new = self.pacing.book.get(key)
        if not self.announce_events or self._events is None or not self.synced:
            # The first list is what this process found, not what changed: those pods were announced when
            # they were held (and a restart at 150,000 pods would queue an Event for every held one).
            return
        event = transition_event(old, new, describe=self.describe)
        if event is not None and new is not None:
            self.announce(new, *event)

    def announce(self, record: PodRecord, reason: str, message: str) -> None:
        """Record an Event on the pod (only while this replica leads)."""
        self.announce_to(
            PodRef(namespace=record.namespace, name=record.name, uid=record.uid), reason, message
        )

    def announce_to(self, pod: PodRef, reason: str, message: str, *, kind: EventType = "Normal") -> None:
        """Record an Event on any enabled pod, in a group or not (only while this replica leads)."""
        if not self.announce_events or self._events is None:
            return
        self._events.record(
            pod_event(
                pod=pod,
                reason=reason,
                message=message,
                component=COMPONENT,
                host=self._host,
                wall=self._wall(),
                kind=kind,
            )
        )

    def describe(self, record: PodRecord) -> str:
        """The counts of the pod's groups, for an Event's message."""
        return self.describe_pairs(record.pacer_groups + record.bypassed_groups)

    def describe_pairs(self, pairs: tuple[tuple[str, str], ...]) -> str:
        pacing = self.pacing
        now = pacing.clock()
        timeouts = {name: policy.start_timeout for name, policy in pacing.policies.items()}
        parts = []
        for pair in pairs:
            counts = pacing.book.counts(pair, now=now, start_timeouts=timeouts)
            parts.append(
                f"{groupbook.pair_label(pair)} {counts.ready} Ready, {counts.starting} starting, {counts.held} held"
            )
        return "; ".join(parts) or "no group"
