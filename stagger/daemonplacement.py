"""Whether a DaemonSet's pod should run on a Node, decided as the DaemonSet controller decides it
(`NodeShouldRunDaemonPod` in kubernetes/pkg/controller/daemon/daemon_controller.go): pure functions of the
DaemonSet and the Node as the API serves them (JSON dicts).

https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#how-daemon-pods-are-scheduled: the
controller makes one pod per node that the pod template's `nodeSelector` and required node affinity
select and whose taints its tolerations (with the ones the controller adds to every daemon pod) tolerate.
The node's resources are not looked at: a pod that does not fit is still created, and stays Pending.

Only what decides *whether* the pod should run is here: the template's `nodeName`, `nodeSelector`,
`affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (preferred terms never exclude a
node) and `tolerations` against the Node's NoSchedule and NoExecute taints (PreferNoSchedule never
excludes one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "DAEMON_TOLERATIONS",
    "HOST_NETWORK_TOLERATION",
    "daemon_tolerations",
    "placement_problem",
    "required_affinity_matches",
    "requirement_matches",
    "should_run",
    "term_matches",
    "tolerates",
    "untolerated_taint",
]

Obj = Mapping[str, Any]

# The tolerations the DaemonSet controller adds to every daemon pod (AddOrUpdateDaemonPodTolerations in
# pkg/controller/daemon/util/daemonset_util.go), listed in the DaemonSet page's "Taints and tolerations":
# https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/#taints-and-tolerations. A node that
# is not ready, unreachable, under pressure or cordoned still runs its daemon pods.
DAEMON_TOLERATIONS: Final[tuple[Obj, ...]] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
# ... and to pods with `hostNetwork: true` only: they need no pod network to start (a CNI plugin's own
# DaemonSet is one), so a node whose network is not set up yet runs them.
HOST_NETWORK_TOLERATION: Final[Obj] = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}

# Taints that keep a pod off a node; PreferNoSchedule only makes the scheduler avoid the node
# (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/).
_EXCLUDING_EFFECTS: Final = ("NoSchedule", "NoExecute")

# Go's strconv.ParseInt(s, 10, 64), which labels.Requirement uses for Gt and Lt: an optional sign and
# decimal digits, nothing else (no spaces, no underscores, unlike Python's int()).
_INT64: Final = re.compile(r"[+-]?[0-9]+")
_INT64_RANGE: Final = range(-(2**63), 2**63)


def _int64(text: object) -> int | None:
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64_RANGE else None


def _spec_of(daemonset: Obj) -> Obj:
    return ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}


def daemon_tolerations(pod_spec: Obj) -> list[Obj]:
    """The template's tolerations plus those the controller adds. (The controller replaces an equal
    toleration instead of adding it again; for matching, the union is the same.)"""
    tolerations: list[Obj] = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, Mapping)]
    tolerations.extend(DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        tolerations.append(HOST_NETWORK_TOLERATION)
    return tolerations


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """`Toleration.ToleratesTaint` (k8s.io/api/core/v1): an empty effect matches every effect, an empty key
    every key; `Exists` matches every value, `Equal` (or no operator) the same value.

    https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#concepts. Any other
    operator tolerates nothing: the `Lt`/`Gt` toleration operators are an alpha feature behind a gate
    (TaintTolerationComparisonOperators); reading such a DaemonSet as "should not run here" costs at most
    not waiting for a pod that is not there yet (its pod, once created, is waited for like any other)."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(taints: Iterable[Obj], tolerations: Sequence[Obj]) -> Obj | None:
    """The first NoSchedule or NoExecute taint no toleration tolerates (`FindMatchingUntoleratedTaint`
    filtered to those two effects, as the controller's `predicates` does), or None."""
    for taint in taints:
        if not isinstance(taint, Mapping) or taint.get("effect") not in _EXCLUDING_EFFECTS:
            continue
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None


def requirement_matches(requirement: Obj, values_by_key: Mapping[str, str]) -> bool | None:
    """One node selector requirement against a node's labels (matchExpressions) or fields (matchFields,
    given as `{"metadata.name": name}`): labels.Requirement.Matches. None when the requirement is invalid
    (In or NotIn without values, Exists or DoesNotExist with values, Gt or Lt without exactly one integer,
    an unknown operator): its whole term then matches nothing, as in `nodeaffinity`, which drops a term
    that does not parse."""
    key = str(requirement.get("key") or "")
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in values_by_key
    value = values_by_key.get(key, "")
    if operator in ("In", "NotIn"):
        if not values:
            return None
        return (present and value in values) if operator == "In" else not (present and value in values)
    if operator in ("Exists", "DoesNotExist"):
        if values:
            return None
        return present if operator == "Exists" else not present
    if operator in ("Gt", "Lt"):
        bound = _int64(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        have = _int64(value) if present else None
        if have is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return None


def _field_requirement_matches(requirement: Obj, fields: Mapping[str, str]) -> bool | None:
    """matchFields: `nodeSelectorRequirementsAsFieldSelector` takes only In and NotIn with exactly one
    value; a field the node does not have reads as "" (fields.Set.Get)."""
    values = requirement.get("values") or []
    if requirement.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return None
    equal = fields.get(str(requirement.get("key") or ""), "") == str(values[0])
    return equal if requirement.get("operator") == "In" else not equal


def term_matches(term: Obj, *, labels: Mapping[str, str], name: str) -> bool:
    """A nodeSelectorTerm: its matchExpressions (on the labels) and matchFields (on `metadata.name`) are
    ANDed; an empty term, or one with an invalid requirement, matches nothing.
    https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#node-affinity"""
    expressions = [r for r in term.get("matchExpressions") or [] if isinstance(r, Mapping)]
    fields = [r for r in term.get("matchFields") or [] if isinstance(r, Mapping)]
    if not expressions and not fields:
        return False
    answers = [requirement_matches(r, labels) for r in expressions]
    answers += [_field_requirement_matches(r, {"metadata.name": name}) for r in fields]
    return all(answer is True for answer in answers)


def required_affinity_matches(pod_spec: Obj, *, labels: Mapping[str, str], name: str) -> bool:
    """`nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)`: every `nodeSelector` label equal, and,
    when the pod has required node affinity, at least one of its terms (the terms are ORed)."""
    selector = pod_spec.get("nodeSelector") or {}
    if any(key not in labels or labels[key] != str(value) for key, value in selector.items()):
        return False
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]
    return any(term_matches(term, labels=labels, name=name) for term in terms)


def placement_problem(daemonset: Obj, node: Obj) -> str | None:
    """Why the DaemonSet's pod should not run on this node, or None when it should."""
    spec = _spec_of(daemonset)
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name") or "")
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    pinned = spec.get("nodeName")
    if pinned and pinned != name:
        return f"its pod template names node {pinned}"
    if not required_affinity_matches(spec, labels=labels, name=name):
        return "its nodeSelector or required node affinity does not select this node"
    taint = untolerated_taint((node.get("spec") or {}).get("taints") or [], daemon_tolerations(spec))
    if taint is not None:
        value = f"={taint.get('value')}" if taint.get("value") else ""
        return f"it does not tolerate the taint {taint.get('key')}{value}:{taint.get('effect')}"
    return None


def should_run(daemonset: Obj, node: Obj) -> bool:
    """The DaemonSet controller makes a pod of this DaemonSet for this node."""
    return placement_problem(daemonset, node) is None
