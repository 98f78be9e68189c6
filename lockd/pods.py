"""What lockd reads from the pods on its node, as pure functions of pod objects (JSON dicts as the API
serves them): identity checks, where a pod is in its start-up, what else is starting (or starting again),
and the slots to rebuild after a restart. Which DaemonSets the node waits for is `lockd.daemonsetwait`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from stagger.contracts import podtoken
from stagger.names import Names
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase, restart_state
from stagger.timestamps import parse_rfc3339

Pod = Mapping[str, Any]
Stage = Literal["starting", "ready", "finished", "deleted"]


def meta(pod: Pod) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def key_of(pod: Pod) -> tuple[str, str]:
    m = meta(pod)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


phase = pod_phase


def stage(pod: Pod | None) -> Stage:
    """Where a pod is in its start-up, as far as a slot is concerned."""
    if pod is None or meta(pod).get("deletionTimestamp"):
        return "deleted"
    if is_pod_finished(pod):
        return "finished"
    if is_pod_ready(pod):
        return "ready"
    return "starting"


def identity_problem(pod: Pod | None, *, node: str, namespace: str, name: str, uid: str) -> str | None:
    """Why this caller may not have a slot on this node, or None if it may.

    lockd watches only the pods bound to its node, so a pod of another node and a pod that does not
    exist look the same from here; the message says both.
    """
    if pod is None:
        return (
            f"no pod {namespace}/{name} is bound to node {node} (it does not exist, or runs on another node)"
        )
    actual_uid = str(meta(pod).get("uid") or "")
    if uid != actual_uid:
        return f"uid {uid!r} does not match pod {namespace}/{name} on node {node} (uid {actual_uid!r})"
    current = stage(pod)
    if current == "deleted":
        return f"pod {namespace}/{name} is being deleted"
    if current == "finished":
        return f"pod {namespace}/{name} has finished (phase {phase(pod)})"
    return None


TOKEN_VOLUME_KEPT: Final = "stagger:hasTokenVolume"
"""The key under which lockd's lean copy of a pod (`lockd.clusterwatch.lean_pod`) keeps, instead of the pod's
volumes, whether it has the token volume: not a field the API server could send (it has a colon)."""


def has_token_volume(pod: Pod | None) -> bool:
    """Whether admission gave the pod its service-account token for lockd (`stagger.contracts.podtoken`):
    then an ask or a release in its name must carry it. Read from the pod's volumes, or from the boolean
    lockd's lean copy keeps of them."""
    spec = pod.get("spec") if pod is not None else None
    if not isinstance(spec, Mapping):
        return False
    kept = spec.get(TOKEN_VOLUME_KEPT)
    return kept if isinstance(kept, bool) else podtoken.has_token_volume(spec)


def owner_kind(pod: Pod) -> tuple[str, str] | None:
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def is_daemonset_pod(pod: Pod) -> bool:
    owner = owner_kind(pod)
    return owner is not None and owner[0] == "DaemonSet"


def uses_stagger(pod: Pod, *, names: Names) -> bool:
    return (meta(pod).get("labels") or {}).get(names.enable_label) == "1"


StartingWhy = Literal["starting", "crashLoopBackOff", "restarting"]


@dataclass(frozen=True)
class OtherStarting:
    """A pod that `countAllStarting` counts, and why: starting for the first time, or starting again
    (`stagger.podstate.restart_state`: a container in CrashLoopBackOff, or restarted and not ready yet)."""

    namespace: str
    name: str
    why: StartingWhy

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def other_starting(
    pods: Iterable[Pod],
    *,
    names: Names,
    exclude_namespaces: Iterable[str],
    holders: Iterable[tuple[str, str]],
    workloads: bool = True,
    daemonsets: bool = False,
) -> list[OtherStarting]:
    """`countAllStarting` (`workloads`) and `countDaemonSets` (`daemonsets`): pods that count against
    maxConcurrent besides slots, sorted by namespace/name.

    A pod not Ready and not finished counts, and so does a pod starting again after it ran: a container in
    CrashLoopBackOff (even while the pod's Ready condition has not caught up) or restarted and not ready
    yet. A restart costs a node what a first start costs (thundering-herd-scheduler counts them too).
    Pods that use stagger count through their slots only while they start for the first time (a stagger
    pod still waiting in its init container must not block itself); once they run, their slot is over,
    and their restarts count like any other pod's. Pods in excluded namespaces do not count. DaemonSet pods
    (node plumbing, which must never wait behind workloads) count only with `daemonsets` (as
    thundering-herd-scheduler counts them), and the other pods only with `workloads`; a DaemonSet pod is
    never held for it either way.
    """
    excluded = set(exclude_namespaces)
    held = set(holders)
    found = []
    for pod in pods:
        key = key_of(pod)
        if key in held or key[0] in excluded or not (daemonsets if is_daemonset_pod(pod) else workloads):
            continue
        current = stage(pod)
        if current in ("finished", "deleted"):
            continue
        restart = restart_state(pod)
        if restart is None and (current != "starting" or uses_stagger(pod, names=names)):
            continue
        found.append(OtherStarting(namespace=key[0], name=key[1], why=restart or "starting"))
    return sorted(found, key=lambda other: other.key)


def restarts_named(others: Iterable[OtherStarting]) -> str:
    """For the countAllStarting reason: the pods among `others` that are starting again, by why, at most five
    named each (empty when none is)."""
    parts = []
    for why, text in (("crashLoopBackOff", "in CrashLoopBackOff"), ("restarting", "restarting")):
        named = [f"{other.namespace}/{other.name}" for other in others if other.why == why]
        if named:
            more = f" and {len(named) - 5} more" if len(named) > 5 else ""
            parts.append(f"{text}: {', '.join(named[:5])}{more}")
    return f" ({'; '.join(parts)})" if parts else ""


@dataclass(frozen=True)
class HeldSlot:
    namespace: str
    name: str
    uid: str
    granted_wall: float


def unready_since(pod: Pod) -> str | None:
    """The `lastTransitionTime` of the pod's Ready condition while it is not Ready, verbatim (None when it
    is Ready or has no such condition): the kubelet's stamp of when this unready spell began."""
    ready = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None
    )
    if ready is None or ready.get("status") == "True" or not ready.get("lastTransitionTime"):
        return None
    return str(ready["lastTransitionTime"])


def ready_since(pod: Pod, *, granted_wall: float, names: Names) -> bool:
    """Whether the pod, not Ready now, has been Ready since its node slot was granted: it became Ready
    (which ended the slot) and then unready again, a new pod sandbox after its node restarted (which runs
    the init containers again, and the init client asks anew) or a readiness probe failing later in its
    life.

    lockd records the unready spell it granted in (`node-slot-unready-since`, the kubelet's stamp); a
    different spell now means the pod has been Ready in between. Comparing the kubelet's time with the
    kubelet's own needs no two clocks to agree: the simulated kubelet's clock runs `time_scale` times
    faster than lockd's, and a node's clock may be stepped by NTP after a reboot (comparing the
    condition with lockd's grant time let a restarted lockd on the simulated cluster forget a slot).
    A grant from a lockd before that annotation falls back to that comparison: the condition changed
    after the grant, both on this node's clock, whose whole seconds can only make a change in the same
    second as the grant look older."""
    now = unready_since(pod)
    if now is None:
        return False
    recorded = (meta(pod).get("annotations") or {}).get(names.node_slot_unready_since_annotation)
    if recorded is not None:
        return str(recorded) != now
    changed = parse_rfc3339(now)
    return changed is not None and changed > granted_wall


def slots_to_rebuild(pods: Iterable[Pod], *, names: Names) -> list[HeldSlot]:
    """After a restart: pods this node's lockd granted a slot that have not started yet still hold it.

    A slot is read from `<prefix>/node-slot`, which lockd writes at each grant. A pod without it counts by
    its `granted-at` only when it is in no staggering group: in a group, `granted-at` may be the
    controller's group grant of a pod still waiting for its node slot (counting those rebuilt more slots
    than the limit, and let their pods start together; found by `python -m sim chaos`). Pods granted by
    a lockd from before `node-slot` and in no group are still counted, so an upgrade forgets none.

    A pod Ready since its grant holds no slot (`ready_since`): after a cold start every pod on the node is
    unready again with its old grant, and counting those rebuilt 3 slots on a node limited to 2 and let
    their pods start together (found on the real nodes, tests/nodes/test_coldstart.py)."""
    held = []
    for pod in pods:
        annotations = meta(pod).get("annotations") or {}
        granted = annotations.get(names.node_slot_annotation)
        if granted is None and names.group_key_annotation not in annotations:
            granted = annotations.get(names.granted_at_annotation)
        if not granted or stage(pod) != "starting":
            continue
        when = parse_rfc3339(str(granted))
        if when is None or ready_since(pod, granted_wall=when, names=names):
            continue
        namespace, name = key_of(pod)
        held.append(
            HeldSlot(namespace=namespace, name=name, uid=str(meta(pod).get("uid") or ""), granted_wall=when)
        )
    return sorted(held, key=lambda slot: slot.granted_wall)


def why_held(pod: Pod | None) -> str:
    """A sentence for /status: why this pod's slot has not ended yet."""
    if pod is None:
        return "pod not seen on this node"
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    for status in statuses:
        state = status.get("state") or {}
        if "running" in state or "waiting" in state:
            return f"init container {status.get('name')} has not finished"
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if not status.get("ready"):
            state = status.get("state") or {}
            if "waiting" in state:
                return (
                    f"container {status.get('name')} waiting ({(state['waiting'] or {}).get('reason', '')})"
                )
            return f"container {status.get('name')} not ready yet"
    return f"pod not Ready (phase {phase(pod)})"
