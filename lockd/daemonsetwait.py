"""`waitForDaemonSets`: which DaemonSets this node still waits for, as pure functions of the node's pods, the
cluster's DaemonSets and the Node (JSON dicts as the API serves them), and the bound on waiting for a
DaemonSet whose pod is not on the node.

A DaemonSet is waited for when its pod on this node is not Ready, or when it should run here (as the
DaemonSet controller decides it: `stagger.daemonplacement`) and has no pod here yet: on a new node the
DaemonSet controller creates the pods a moment after the Node appears, and the scheduler binds them a
moment later, so the node's pods alone miss them (pod-startup-lock's k8s-health waits for every
DaemonSet that should run on the node). lockd's own DaemonSet and DaemonSets being deleted are never
waited for, nor those the node policy's `daemonSets` filter leaves out (`chooses`: k8s-health's
--hostNet, --namespace, --in, --ex).

A missing pod is waited for at most `--daemonset-wait` (`MissingBound`): the DaemonSet controller may not
make it after all (it is down, or the node does not fit the pod in a way this reading does not see), and
an unbounded wait would hold every start-up on the node until each init client's maxWait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from lockd.pods import key_of, meta, stage
from stagger import daemonplacement
from stagger.podstate import restart_state
from stagger.policy import DaemonSetFilter

__all__ = [
    "ALL",
    "BOUNDED",
    "DaemonSetView",
    "MissingBound",
    "Waiting",
    "chooses",
    "daemonset_view",
    "lean_daemonset",
    "waiting_for",
]

ALL: Final = DaemonSetFilter()
"""The default `daemonSets` filter: every DaemonSet."""

Obj = Mapping[str, Any]
Why = Literal["podMissing", "notReady", "crashLoopBackOff", "notListed"]

BOUNDED: Final[frozenset[Why]] = frozenset({"podMissing", "notListed"})
"""What `--daemonset-wait` bounds: a DaemonSet with no pod here, and DaemonSets not listed yet. A pod that
is here and not Ready is waited for as long as it starts, with no bound: its kubelet is starting it."""

_TEXT: Final[dict[Why, str]] = {
    "podMissing": "no pod on this node yet",
    "notReady": "pod not Ready",
    "crashLoopBackOff": "pod in CrashLoopBackOff",
}


@dataclass(frozen=True)
class Waiting:
    """One DaemonSet the node waits for, and why."""

    namespace: str
    name: str
    why: Why

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        if self.why == "notListed":
            return "the cluster's DaemonSets (not listed yet)"
        return f"{self.key} ({_TEXT[self.why]})"


NOT_LISTED: Final = Waiting(namespace="", name="", why="notListed")


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def _owner(pod: Obj) -> tuple[str, str] | None:
    """The DaemonSet that controls this pod: (its name, its uid)."""
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "DaemonSet":
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return None


@dataclass(frozen=True)
class DaemonSetView:
    """What the cluster's DaemonSets say about this node: those whose pod should run here (and the filter
    chooses), the uids of those being deleted (their pods are going away with them), and of those the
    filter leaves out."""

    eligible: tuple[Obj, ...] = ()
    deleting: frozenset[str] = frozenset()
    not_chosen: frozenset[str] = frozenset()


def _spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def chooses(item: Obj, chosen: DaemonSetFilter) -> bool:
    """Pure: does the `daemonSets` filter choose this DaemonSet (by its namespace, name, labels and its pod
    template's hostNetwork)?"""
    namespace, name = key_of(item)
    template = (_spec(item).get("template") or {}).get("spec") or {}
    return chosen.chooses(
        namespace=namespace,
        name=name,
        labels=meta(item).get("labels") or {},
        host_network=template.get("hostNetwork") is True,
    )


def _chooses_owner_of(pod: Obj, owner_name: str, chosen: DaemonSetFilter) -> bool:
    """The filter read from the pod of a DaemonSet: its namespace, the DaemonSet's name, the pod's own
    hostNetwork; the DaemonSet's labels are not on its pods (a label entry excludes nothing here)."""
    return chosen.chooses(
        namespace=key_of(pod)[0],
        name=owner_name,
        labels=None,
        host_network=_spec(pod).get("hostNetwork") is True,
    )


def daemonset_view(items: Iterable[Obj], node: Obj | None, chosen: DaemonSetFilter = ALL) -> DaemonSetView:
    """The DaemonSets whose pod should run on `node` (none while the Node is not known) that `chosen`
    chooses."""
    eligible, deleting, not_chosen = [], set(), set()
    for item in items:
        if meta(item).get("deletionTimestamp"):
            deleting.add(uid_of(item))
        elif not chooses(item, chosen):
            not_chosen.add(uid_of(item))
        elif node is not None and daemonplacement.should_run(item, node):
            eligible.append(item)
    return DaemonSetView(
        eligible=tuple(eligible), deleting=frozenset(deleting), not_chosen=frozenset(not_chosen)
    )


def waiting_for(
    pods: Iterable[Obj],
    *,
    view: DaemonSetView | None,
    own_pod: tuple[str, str] | None,
    chosen: DaemonSetFilter = ALL,
) -> list[Waiting]:
    """The DaemonSets this node waits for: those whose pod here is not Ready (crash-looping said so), and,
    with `view` (None: the DaemonSets are not listed), those that should run here with no pod here that
    runs or starts; only those `chosen` chooses (the view's filter too: made with the same). Sorted by
    namespace/name.

    lockd's own pod is left out, and with it its DaemonSet: it becomes Ready only once lockd answers, so
    waiting on it would wait forever."""
    deleting = view.deleting if view is not None else frozenset()
    not_chosen = view.not_chosen if view is not None else frozenset()
    node_pods = list(pods)
    own_uid = next(
        (owner[1] for pod in node_pods if key_of(pod) == own_pod and (owner := _owner(pod)) is not None), None
    )
    found: dict[str, Waiting] = {}
    present: set[str] = set()
    for pod in node_pods:
        owner = _owner(pod)
        if owner is None:
            continue
        current = stage(pod)
        if current in ("starting", "ready"):
            present.add(owner[1])
        if current != "starting" or key_of(pod) == own_pod or owner[1] == own_uid or owner[1] in deleting:
            continue
        if owner[1] in not_chosen or not _chooses_owner_of(pod, owner[0], chosen):
            continue
        crashing = restart_state(pod) == "crashLoopBackOff"
        waiting = Waiting(key_of(pod)[0], owner[0], "crashLoopBackOff" if crashing else "notReady")
        found.setdefault(waiting.key, waiting)
    for item in view.eligible if view is not None else ():
        uid = uid_of(item)
        if uid in present or uid == own_uid:
            continue
        namespace, name = key_of(item)
        found.setdefault(f"{namespace}/{name}", Waiting(namespace, name, "podMissing"))
    return sorted(found.values(), key=lambda w: w.key)


@dataclass
class MissingBound:
    """`--daemonset-wait`: how long a DaemonSet with no pod here (or the DaemonSets not listed yet) holds
    grants. Each is timed from when lockd first saw it so; past the bound it is no longer waited for, and
    reported once (`expired`). Its clock starts again if its pod comes and goes again."""

    bound: float
    _since: dict[str, float] = field(default_factory=dict)
    _expired: set[str] = field(default_factory=set)

    def apply(self, waiting: list[Waiting], *, now: float) -> tuple[list[Waiting], list[Waiting]]:
        """(still waited for, newly past the bound)."""
        bounded = {w.key for w in waiting if w.why in BOUNDED}
        for key in [k for k in self._since if k not in bounded]:
            del self._since[key]
            self._expired.discard(key)
        kept, expired = [], []
        for item in waiting:
            if item.why not in BOUNDED:
                kept.append(item)
                continue
            since = self._since.setdefault(item.key, now)
            if now - since < self.bound:
                kept.append(item)
            elif item.key not in self._expired:
                self._expired.add(item.key)
                expired.append(item)
        return kept, expired

    def reset(self) -> None:
        self._since.clear()
        self._expired.clear()


# What lockd reads of a DaemonSet (`daemonset_view`, `waiting_for`): its identity and labels (the
# `daemonSets` filter's label:value entries), whether it is being deleted, and of its pod template's spec
# what decides which nodes run its pods (and hostNetwork, the filter's).
_TEMPLATE_SPEC_READ: Final = ("nodeName", "nodeSelector", "tolerations", "hostNetwork")
_METADATA_READ: Final = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "labels")


def lean_daemonset(item: dict[str, Any]) -> dict[str, Any]:
    """A DaemonSet as lockd keeps it: every lockd keeps every DaemonSet of the cluster while it waits for
    them, so only what it reads (a few hundred bytes instead of the whole template with its containers,
    and no status, which changes with every pod of the DaemonSet)."""
    metadata = item.get("metadata") or {}
    template = ((item.get("spec") or {}).get("template") or {}).get("spec") or {}
    spec = {key: template[key] for key in _TEMPLATE_SPEC_READ if key in template}
    required = ((template.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    lean: dict[str, Any] = {key: item[key] for key in ("apiVersion", "kind") if key in item}
    lean["metadata"] = {key: metadata[key] for key in _METADATA_READ if key in metadata}
    lean["spec"] = {"template": {"spec": spec}}
    return lean
