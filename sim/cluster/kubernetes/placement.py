"""The scheduler's decisions (pure): does a pod fit a node, which node, and what to tell the pod.

Filters run in kube-scheduler's order and a node is rejected by the first that fails:
NodeUnschedulable, NodeName, TaintToleration (NoSchedule/NoExecute), NodeAffinity (nodeSelector and
required node affinity, with matchFields on metadata.name as the DaemonSet controller uses),
NodeResourcesFit (cpu, memory, pod count against allocatable minus the requests of the pods bound to
the node and not finished). Scoring is LeastAllocated over cpu and memory, counting containers
without requests as 100m / 200Mi like kube-scheduler does; ties go to the node whose name sorts first.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sim.cluster.objects import byte_count, cpu_millis, labels_of, name_of, namespace_of, node_name_of
from stagger.objects import condition_true
from stagger.podstate import is_pod_finished

DEFAULT_SCHEDULER = "default-scheduler"
# kube-scheduler's non-zero defaults for scoring (pkg/scheduler/util/pod_resources.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


@dataclass(frozen=True)
class Resources:
    cpu_millis: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millis + other.cpu_millis, self.memory + other.memory, self.pods + other.pods
        )


@dataclass(frozen=True)
class NodeInfo:
    """What scheduling needs from a Node object."""

    name: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, Any]]
    allocatable: Resources
    unschedulable: bool = False
    ready: bool = True


@dataclass(frozen=True)
class NodeUsage:
    requested: Resources = Resources()
    """Sum of the real requests of the pods on the node (for fitting)."""
    scored: Resources = Resources()
    """Same, with kube-scheduler's non-zero defaults (for scoring)."""

    def with_pod(self, pod: Mapping[str, Any]) -> NodeUsage:
        return NodeUsage(self.requested + pod_requests(pod), self.scored + pod_requests(pod, non_zero=True))


@dataclass(frozen=True)
class Bind:
    namespace: str
    name: str
    node: str


@dataclass(frozen=True)
class MarkUnschedulable:
    namespace: str
    name: str
    reason: str
    message: str


Decision = Bind | MarkUnschedulable


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    spec = node.get("spec") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return NodeInfo(
        name=name_of(node),
        labels=labels_of(node),
        taints=list(spec.get("taints") or []),
        allocatable=Resources(
            cpu_millis=cpu_millis(allocatable.get("cpu", 0)),
            memory=byte_count(allocatable.get("memory", 0)),
            pods=int(byte_count(allocatable.get("pods", 110))),
        ),
        unschedulable=bool(spec.get("unschedulable")),
        ready=condition_true(node, "Ready"),
    )


def _container_requests(container: Mapping[str, Any], *, non_zero: bool) -> Resources:
    requests = (container.get("resources") or {}).get("requests") or {}
    cpu = cpu_millis(requests["cpu"]) if "cpu" in requests else None
    memory = byte_count(requests["memory"]) if "memory" in requests else None
    if non_zero:
        cpu = cpu or DEFAULT_MILLI_CPU_REQUEST
        memory = memory or DEFAULT_MEMORY_REQUEST
    return Resources(cpu_millis=cpu or 0, memory=memory or 0)


def pod_requests(pod: Mapping[str, Any], *, non_zero: bool = False) -> Resources:
    """Effective requests: max(sum of containers, largest init container) plus overhead, one pod slot."""
    spec = pod.get("spec") or {}
    total = Resources()
    for container in spec.get("containers") or []:
        total = total + _container_requests(container, non_zero=non_zero)
    for init in spec.get("initContainers") or []:
        req = _container_requests(init, non_zero=non_zero)
        total = Resources(max(total.cpu_millis, req.cpu_millis), max(total.memory, req.memory))
    overhead = spec.get("overhead") or {}
    total = total + Resources(
        cpu_millis=cpu_millis(overhead["cpu"]) if "cpu" in overhead else 0,
        memory=byte_count(overhead["memory"]) if "memory" in overhead else 0,
    )
    return replace(total, pods=1)


def usage_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, NodeUsage]:
    """What the bound, unfinished pods take on each node."""
    usage: dict[str, NodeUsage] = {}
    for pod in pods:
        node = node_name_of(pod)
        if node and not is_pod_finished(pod):
            usage[node] = usage.get(node, NodeUsage()).with_pod(pod)
    return usage


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        if operator == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement_matches(req: Mapping[str, Any], values_by_key: Mapping[str, str]) -> bool:
    key, operator, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
    present = key in values_by_key
    value = values_by_key.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def matches_node_selector_term(term: Mapping[str, Any], node: NodeInfo) -> bool:
    expressions = list(term.get("matchExpressions") or [])
    fields = list(term.get("matchFields") or [])
    if not expressions and not fields:
        return False  # an empty term matches nothing, as in Kubernetes
    by_field = {"metadata.name": node.name}
    return all(_requirement_matches(r, node.labels) for r in expressions) and all(
        _requirement_matches(r, by_field) for r in fields
    )


def matches_node_affinity(pod: Mapping[str, Any], node: NodeInfo) -> bool:
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(matches_node_selector_term(t, node) for t in terms)


def _taint_text(taint: Mapping[str, Any]) -> str:
    return f"{{{taint.get('key', '')}: {taint.get('value', '')}}}"


def filter_reasons(pod: Mapping[str, Any], node: NodeInfo, usage: NodeUsage) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (kube-scheduler's wording); empty when it fits."""
    spec = pod.get("spec") or {}
    tolerations = list(spec.get("tolerations") or [])
    if node.unschedulable and not tolerates(
        tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ):
        return ["node(s) were unschedulable"]
    if not node.ready and not tolerates(
        tolerations, {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    ):
        return ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return [f"node(s) had untolerated taint {_taint_text(taint)}"]
    if not matches_node_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    want = pod_requests(pod)
    have = usage.requested
    reasons: list[str] = []
    if have.pods + 1 > node.allocatable.pods:
        reasons.append("Too many pods")
    if want.cpu_millis and have.cpu_millis + want.cpu_millis > node.allocatable.cpu_millis:
        reasons.append("Insufficient cpu")
    if want.memory and have.memory + want.memory > node.allocatable.memory:
        reasons.append("Insufficient memory")
    return reasons


def least_allocated_score(pod: Mapping[str, Any], node: NodeInfo, usage: NodeUsage) -> float:
    after = usage.scored + pod_requests(pod, non_zero=True)
    scores = []
    for capacity, requested in (
        (node.allocatable.cpu_millis, after.cpu_millis),
        (node.allocatable.memory, after.memory),
    ):
        scores.append(
            0.0 if capacity <= 0 or requested > capacity else (capacity - requested) * 100 / capacity
        )
    return sum(scores) / len(scores)


def unschedulable_message(reasons: Mapping[str, int], *, node_count: int) -> str:
    """kube-scheduler's FitError text."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return (
        f"0/{node_count} nodes are available: {', '.join(histogram)}. "
        f"preemption: 0/{node_count} nodes are available: "
        f"{node_count} Preemption is not helpful for scheduling."
    )


def choose_node(
    pod: Mapping[str, Any], nodes: Sequence[NodeInfo], usage: Mapping[str, NodeUsage]
) -> Decision:
    best: tuple[float, str] | None = None
    reasons: Counter[str] = Counter()
    for node in nodes:
        node_usage = usage.get(node.name, NodeUsage())
        failed = filter_reasons(pod, node, node_usage)
        if failed:
            reasons.update(failed)
            continue
        score = least_allocated_score(pod, node, node_usage)
        # Highest score first; among equal scores the smallest name (hence the negated tuple order).
        if best is None or score > best[0] + 1e-9 or (math.isclose(score, best[0]) and node.name < best[1]):
            best = (score, node.name)
    if best is not None:
        return Bind(namespace=namespace_of(pod), name=name_of(pod), node=best[1])
    return MarkUnschedulable(
        namespace=namespace_of(pod),
        name=name_of(pod),
        reason="Unschedulable",
        message=unschedulable_message(reasons, node_count=len(nodes)),
    )


def is_gated(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))


def wants_scheduling(pod: Mapping[str, Any], *, scheduler_name: str = DEFAULT_SCHEDULER) -> bool:
    """An unbound, live pod for this scheduler."""
    spec = pod.get("spec") or {}
    return (
        not node_name_of(pod)
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and not is_pod_finished(pod)
        and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == scheduler_name
    )


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str, str]:
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return (
        -int(spec.get("priority") or 0),
        str(meta.get("creationTimestamp") or ""),
        namespace_of(pod),
        name_of(pod),
    )


def schedule(
    *,
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    scheduler_name: str = DEFAULT_SCHEDULER,
) -> list[Decision]:
    """One scheduling pass over every pending pod, highest priority then oldest first.

    Each binding is accounted for before the next pod is placed, so one pass never overcommits a node.
    Gated pods get ``PodScheduled=False, reason SchedulingGated`` instead of a placement.
    """
    all_pods = list(pods)
    infos = sorted((node_info(n) for n in nodes), key=lambda n: n.name)
    usage = usage_by_node(all_pods)
    decisions: list[Decision] = []
    for pod in sorted(
        (p for p in all_pods if wants_scheduling(p, scheduler_name=scheduler_name)), key=_queue_order
    ):
        if is_gated(pod):
            decisions.append(
                MarkUnschedulable(
                    namespace=namespace_of(pod),
                    name=name_of(pod),
                    reason="SchedulingGated",
                    message="Scheduling is blocked due to non-empty scheduling gates",
                )
            )
            continue
        decision = choose_node(pod, infos, usage)
        if isinstance(decision, Bind):
            usage[decision.node] = usage.get(decision.node, NodeUsage()).with_pod(pod)
        decisions.append(decision)
    return decisions


def needs_condition_update(pod: Mapping[str, Any], decision: MarkUnschedulable) -> bool:
    """Whether the pod's PodScheduled condition does not already say this (avoids useless writes)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return not (
                cond.get("status") == "False"
                and cond.get("reason") == decision.reason
                and cond.get("message") == decision.message
            )
    return True
