"""What the workload controllers decide (pure): ReplicaSet, Deployment, Job, DaemonSet, garbage collector.

Each ``reconcile_*`` takes the owner and the objects it owns (plain dicts as the API sends them) and
the current time, and returns the writes to make. They follow the real controllers' rules where a
test or the demo can see the difference, and document where they are simpler.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sim.cluster.objects import (
    controller_ref,
    is_pod_active,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_name_of,
    owned_by,
    owner_reference,
    set_condition,
    uid_of,
)
from sim.cluster.placement import NodeInfo, matches_node_affinity, node_info, tolerates
from stagger.kube import DAEMONSETS, DEPLOYMENTS, JOBS, PODS, REPLICASETS, Resource
from stagger.objects import Obj, condition, condition_true
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase
from stagger.timestamps import format_rfc3339, parse_rfc3339

TEMPLATE_HASH_LABEL = "pod-template-hash"
# kube-controller-manager's burstReplicas: at most this many creations/deletions per pass.
BURST_REPLICAS = 500
DEFAULT_BACKOFF_LIMIT = 6


@dataclass(frozen=True)
class Create:
    resource: Resource
    namespace: str
    body: Obj


@dataclass(frozen=True)
class Delete:
    resource: Resource
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Patch:
    resource: Resource
    namespace: str
    name: str
    patch: Obj
    subresource: str | None = None


Action = Create | Delete | Patch


# ---------------------------------------------------------------------------------------------- helpers


def _status_patch(resource: Resource, obj: Mapping[str, Any], status: Mapping[str, Any]) -> list[Action]:
    """Write ``status`` fields that differ from the object's (none when already up to date)."""
    current = obj.get("status") or {}
    changed = {k: v for k, v in status.items() if current.get(k) != v}
    if not changed:
        return []
    return [Patch(resource, namespace_of(obj), name_of(obj), {"status": changed}, subresource="status")]


def pod_from_template(
    template: Mapping[str, Any],
    *,
    owner: Mapping[str, Any],
    owner_resource: Resource,
    extra_labels: Mapping[str, str] | None = None,
) -> Obj:
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    labels.update(extra_labels or {})
    pod_meta: Obj = {
        "generateName": f"{name_of(owner)}-",
        "namespace": namespace_of(owner),
        "labels": labels,
        "ownerReferences": [
            owner_reference(owner, api_version=owner_resource.api_version, kind=owner_resource.kind)
        ],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _ready_for(pod: Mapping[str, Any], *, now: dt.datetime, min_ready_seconds: int) -> bool:
    """Ready, and for at least ``min_ready_seconds`` (what "available" means)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    cond = condition(pod, "Ready") or {}
    since = parse_rfc3339(str(cond.get("lastTransitionTime") or ""))
    return since is not None and now.timestamp() - since >= min_ready_seconds


def _deletion_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """Which pods a controller removes first when scaling down (like controller.ActivePods ordering):
    unscheduled, then pending, then not ready, then the newest."""
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod_phase(pod), 3)
    created = str(meta(pod).get("creationTimestamp") or "")
    # Newest first: invert the timestamp's sort order by sorting on the negated characters.
    newest_first = "".join(chr(0x10FFFF - ord(ch)) for ch in created)
    return (1 if node_name_of(pod) else 0, phase_rank, 1 if is_pod_ready(pod) else 0, newest_first)


def _owned(objects: Iterable[Mapping[str, Any]], owner: Mapping[str, Any]) -> list[Obj]:
    return [dict(o) for o in objects if owned_by(o, owner)]


# ------------------------------------------------------------------------------------------- ReplicaSet


def reconcile_replicaset(
    rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *, now: dt.datetime
) -> list[Action]:
    """Keep ``spec.replicas`` active pods (terminating and finished ones do not count) and report status."""
    spec = rs.get("spec") or {}
    desired = int(spec.get("replicas", 1))
    min_ready = int(spec.get("minReadySeconds") or 0)
    owned = _owned(pods, rs)
    active = [p for p in owned if is_pod_active(p)]
    actions: list[Action] = []
    if not is_terminating(rs):
        diff = desired - len(active)
        if diff > 0:
            body = pod_from_template(spec.get("template") or {}, owner=rs, owner_resource=REPLICASETS)
            actions += [
                Create(PODS, namespace_of(rs), copy.deepcopy(body)) for _ in range(min(diff, BURST_REPLICAS))
            ]
        elif diff < 0:
            victims = sorted(active, key=_deletion_rank)[: min(-diff, BURST_REPLICAS)]
            actions += [Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in victims]
    status = {
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "readyReplicas": sum(1 for p in active if is_pod_ready(p)),
        "availableReplicas": sum(1 for p in active if _ready_for(p, now=now, min_ready_seconds=min_ready)),
        "observedGeneration": int(meta(rs).get("generation") or 1),
    }
    return actions + _status_patch(REPLICASETS, rs, status)


# ------------------------------------------------------------------------------------------- Deployment

_SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Mapping[str, Any], *, collision_count: int = 0) -> str:
    """A pod-template-hash: FNV-32a of the template, encoded like apimachinery's SafeEncodeString."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += str(collision_count).encode()
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHANUMS[ord(ch) % len(_SAFE_ALPHANUMS)] for ch in str(h))


def _int_or_percent(value: Any, *, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        scaled = float(value[:-1]) * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value) if value is not None else 0


def rolling_limits(deployment: Mapping[str, Any]) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) resolved against spec.replicas; both 0 is turned into 0/1 like Kubernetes."""
    spec = deployment.get("spec") or {}
    desired = int(spec.get("replicas", 1))
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = _int_or_percent(rolling.get("maxSurge", "25%"), total=desired, round_up=True)
    unavailable = _int_or_percent(rolling.get("maxUnavailable", "25%"), total=desired, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _rs_replicas(rs: Mapping[str, Any]) -> int:
    return int((rs.get("spec") or {}).get("replicas", 0))


def _rs_status(rs: Mapping[str, Any], key: str) -> int:
    return int((rs.get("status") or {}).get(key) or 0)


def new_replicaset(deployment: Mapping[str, Any], *, pod_hash: str, replicas: int) -> Obj:
    spec = deployment.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    template.setdefault("metadata", {}).setdefault("labels", {})[TEMPLATE_HASH_LABEL] = pod_hash
    selector = copy.deepcopy(spec.get("selector") or {})
    selector.setdefault("matchLabels", {})[TEMPLATE_HASH_LABEL] = pod_hash
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name_of(deployment)}-{pod_hash}",
            "namespace": namespace_of(deployment),
            "labels": labels,
            "ownerReferences": [owner_reference(deployment, api_version="apps/v1", kind="Deployment")],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": int(spec.get("minReadySeconds") or 0),
            "selector": selector,
            "template": template,
        },
    }


def _scale(rs: Mapping[str, Any], replicas: int) -> list[Action]:
    if _rs_replicas(rs) == replicas:
        return []
    return [Patch(REPLICASETS, namespace_of(rs), name_of(rs), {"spec": {"replicas": replicas}})]


def reconcile_deployment(
    deployment: Mapping[str, Any],
    replicasets: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: dt.datetime,
) -> list[Action]:
    """One ReplicaSet per template hash; RollingUpdate (maxSurge/maxUnavailable) or Recreate; status."""
    spec = deployment.get("spec") or {}
    desired = int(spec.get("replicas", 1))
    pod_hash = template_hash(spec.get("template") or {})
    owned = [rs for rs in _owned(replicasets, deployment) if not is_terminating(rs)]
    new_rs = next((rs for rs in owned if labels_of(rs).get(TEMPLATE_HASH_LABEL) == pod_hash), None)
    old = sorted(
        (rs for rs in owned if rs is not new_rs), key=lambda rs: str(meta(rs).get("creationTimestamp") or "")
    )
    actions: list[Action] = []
    strategy = (spec.get("strategy") or {}).get("type") or "RollingUpdate"
    surge, max_unavailable = rolling_limits(deployment)
    paused = bool(spec.get("paused"))

    if not paused and not is_terminating(deployment):
        if strategy == "Recreate":
            actions += [a for rs in old for a in _scale(rs, 0)]
            old_pods_left = any(
                is_pod_active(p) or (is_terminating(p) and not is_pod_finished(p))
                for rs in old
                for p in _owned(pods, rs)
            )
            target = 0 if old_pods_left else desired
            if new_rs is None:
                actions.append(
                    Create(
                        REPLICASETS,
                        namespace_of(deployment),
                        new_replicaset(deployment, pod_hash=pod_hash, replicas=target),
                    )
                )
            else:
                actions += _scale(new_rs, target)
        else:
            total = sum(_rs_replicas(rs) for rs in owned)
            current_new = _rs_replicas(new_rs) if new_rs is not None else 0
            if current_new > desired:
                target_new = desired
            else:
                room = desired + surge - total
                target_new = min(desired, current_new + max(0, room))
            if new_rs is None:
                actions.append(
                    Create(
                        REPLICASETS,
                        namespace_of(deployment),
                        new_replicaset(deployment, pod_hash=pod_hash, replicas=target_new),
                    )
                )
            else:
                actions += _scale(new_rs, target_new)
            new_unavailable = current_new - (
                _rs_status(new_rs, "availableReplicas") if new_rs is not None else 0
            )
            min_available = desired - max_unavailable
            scale_down = total - min_available - max(0, new_unavailable)
            for rs in old:
                # Old pods that are not available cost nothing to remove: always allowed.
                unhealthy = max(0, _rs_replicas(rs) - _rs_status(rs, "availableReplicas"))
                step = min(_rs_replicas(rs), unhealthy + max(0, scale_down))
                if step > 0:
                    actions += _scale(rs, _rs_replicas(rs) - step)
                    scale_down -= max(0, step - unhealthy)

    total_spec = sum(_rs_replicas(rs) for rs in owned)
    available = sum(_rs_status(rs, "availableReplicas") for rs in owned)
    stamp = format_rfc3339(now.timestamp(), digits=0)
    conditions = list((deployment.get("status") or {}).get("conditions") or [])
    is_available = available >= desired - max_unavailable
    conditions = set_condition(
        conditions,
        kind="Available",
        status="True" if is_available else "False",
        now=stamp,
        reason="MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
        message="Deployment has minimum availability."
        if is_available
        else "Deployment does not have minimum availability.",
    )
    complete = new_rs is not None and _rs_status(new_rs, "availableReplicas") >= desired and not old
    rs_name = f"{name_of(deployment)}-{pod_hash}"
    conditions = set_condition(
        conditions,
        kind="Progressing",
        status="True",
        now=stamp,
        reason="NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
        message=f'ReplicaSet "{rs_name}" has successfully progressed.'
        if complete
        else f'ReplicaSet "{rs_name}" is progressing.',
    )
    status = {
        "observedGeneration": int(meta(deployment).get("generation") or 1),
        "replicas": sum(_rs_status(rs, "replicas") for rs in owned),
        "updatedReplicas": _rs_status(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(_rs_status(rs, "readyReplicas") for rs in owned),
        "availableReplicas": available,
        "unavailableReplicas": max(0, total_spec - available),
        "conditions": conditions,
    }
    return actions + _deployment_status_patch(deployment, status)


def _deployment_status_patch(deployment: Mapping[str, Any], status: Mapping[str, Any]) -> list[Action]:
    # Conditions whose only change would be a timestamp-free reorder are not worth a write.
    current = deployment.get("status") or {}
    same_conditions = _conditions_equal(current.get("conditions") or [], status["conditions"])
    wanted = {k: v for k, v in status.items() if k != "conditions" or not same_conditions}
    return _status_patch(DEPLOYMENTS, deployment, wanted)


def _conditions_equal(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    def norm(conds: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Any, Any, Any]]:
        return {str(c.get("type")): (c.get("status"), c.get("reason"), c.get("message")) for c in conds}

    return norm(a) == norm(b)


# ------------------------------------------------------------------------------------------------- Job

PodOutcome = Literal["succeeded", "failed", "ignored", "failjob"]


@dataclass(frozen=True)
class JobMemory:
    """Outcomes of a Job's pods that are gone from the API (the pods still there are counted from their
    phase). The real controller keeps this on the Job with finalizers; the sim keeps it in memory."""

    outcomes: Mapping[str, PodOutcome] = field(default_factory=dict)


def _exit_codes(pod: Mapping[str, Any], container_name: str | None) -> list[int]:
    codes = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if container_name and status.get("name") != container_name:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated and terminated["exitCode"] != 0:
            codes.append(int(terminated["exitCode"]))
    return codes


def _rule_matches(rule: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    on_codes = rule.get("onExitCodes")
    if on_codes:
        values = set(on_codes.get("values") or [])
        codes = _exit_codes(pod, on_codes.get("containerName"))
        if on_codes.get("operator") == "NotIn":
            return any(c not in values for c in codes)
        return any(c in values for c in codes)
    for pattern in rule.get("onPodConditions") or []:
        cond = condition(pod, str(pattern.get("type")))
        if cond is not None and cond.get("status") == (pattern.get("status") or "True"):
            return True
    return False


def pod_outcome(
    job: Mapping[str, Any], pod: Mapping[str, Any], *, deleted: bool = False
) -> PodOutcome | None:
    """How a Job counts this pod; None while it is still running (and not gone).

    A failed pod (or one deleted before it finished) goes through ``podFailurePolicy``: a matching
    ``Ignore`` rule (e.g. ``onPodConditions: DisruptionTarget`` after an eviction) means it is not
    counted towards ``backoffLimit``, ``FailJob`` fails the Job, ``Count`` (or no match) counts it.
    """
    phase = pod_phase(pod)
    if phase == "Succeeded":
        return "succeeded"
    if phase != "Failed" and not deleted:
        return None
    for rule in ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []:
        if _rule_matches(rule, pod):
            action = rule.get("action")
            if action == "Ignore":
                return "ignored"
            if action == "FailJob":
                return "failjob"
            return "failed"
    return "failed"


def observe_job_pod(
    memory: JobMemory, job: Mapping[str, Any], pod: Mapping[str, Any], *, deleted: bool
) -> JobMemory:
    """Remember the outcome of a pod that is leaving the API (only ``deleted`` pods need remembering)."""
    if not deleted or uid_of(pod) in memory.outcomes:
        return memory
    outcome = pod_outcome(job, pod, deleted=True)
    if outcome is None:
        return memory
    return JobMemory(outcomes={**memory.outcomes, uid_of(pod): outcome})


def job_finished(job: Mapping[str, Any]) -> bool:
    return condition_true(job, "Complete") or condition_true(job, "Failed")


def reconcile_job(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], memory: JobMemory, *, now: dt.datetime
) -> list[Action]:
    """Run pods up to ``parallelism`` until ``completions`` succeeded; fail after ``backoffLimit`` failures.

    With a ``podFailurePolicy`` a terminating pod is replaced only once it has failed (Kubernetes'
    ``podReplacementPolicy: Failed``); without, as soon as it is terminating. Pods restarted in place
    (``restartPolicy: OnFailure``) are not counted against ``backoffLimit`` here.
    """
    spec = job.get("spec") or {}
    owned = _owned(pods, job)
    outcomes: dict[str, PodOutcome] = dict(memory.outcomes)
    for pod in owned:
        outcome = pod_outcome(job, pod)
        if outcome is not None:
            outcomes[uid_of(pod)] = outcome
    succeeded = sum(1 for o in outcomes.values() if o == "succeeded")
    failed = sum(1 for o in outcomes.values() if o in ("failed", "failjob"))
    wait_for_terminal = bool(spec.get("podFailurePolicy"))
    running = [p for p in owned if not is_pod_finished(p)]
    active = [p for p in running if not is_terminating(p) or wait_for_terminal]
    terminating = sum(1 for p in running if is_terminating(p))
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions", None if "parallelism" in spec and "completions" not in spec else 1)
    backoff_limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    stamp = format_rfc3339(now.timestamp(), digits=0)
    status_now = job.get("status") or {}
    conditions = list(status_now.get("conditions") or [])
    actions: list[Action] = []
    status: dict[str, Any] = {}

    finished = job_finished(job)
    if not finished:
        failure: tuple[str, str] | None = None
        if any(o == "failjob" for o in outcomes.values()):
            failure = ("PodFailurePolicy", "Pod failed and matched a FailJob rule of the pod failure policy")
        elif failed > backoff_limit:
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        complete = (completions is not None and succeeded >= int(completions)) or (
            completions is None and succeeded > 0 and not active
        )
        if failure is not None:
            conditions = set_condition(
                conditions, kind="Failed", status="True", now=stamp, reason=failure[0], message=failure[1]
            )
            actions += [
                Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in active if not is_terminating(p)
            ]
        elif complete:
            conditions = set_condition(
                conditions,
                kind="Complete",
                status="True",
                now=stamp,
                reason="CompletionsReached",
                message="Reached expected number of succeeded pods",
            )
            status["completionTime"] = stamp
            actions += [
                Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in active if not is_terminating(p)
            ]
        elif spec.get("suspend"):
            actions += [
                Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in active if not is_terminating(p)
            ]
        else:
            if completions is None:
                want = parallelism if succeeded == 0 else 0
            else:
                want = min(parallelism, int(completions) - succeeded)
            if want > len(active):
                body = pod_from_template(
                    spec.get("template") or {},
                    owner=job,
                    owner_resource=JOBS,
                    extra_labels={
                        "batch.kubernetes.io/controller-uid": uid_of(job),
                        "batch.kubernetes.io/job-name": name_of(job),
                        "controller-uid": uid_of(job),
                        "job-name": name_of(job),
                    },
                )
                actions += [
                    Create(PODS, namespace_of(job), copy.deepcopy(body))
                    for _ in range(min(want - len(active), BURST_REPLICAS))
                ]
            elif want < len(active):
                victims = sorted((p for p in active if not is_terminating(p)), key=_deletion_rank)
                actions += [
                    Delete(PODS, namespace_of(p), name_of(p), uid_of(p))
                    for p in victims[: len(active) - want]
                ]
    status.update(
        {
            "active": len([p for p in active if not is_terminating(p)]) if not job_finished(job) else 0,
            "succeeded": succeeded,
            "failed": failed,
            "ready": sum(1 for p in active if is_pod_ready(p)),
            "terminating": terminating,
            "conditions": conditions,
        }
    )
    if not status_now.get("startTime"):
        status["startTime"] = stamp
    if status_now.get("completionTime"):
        status.pop("completionTime", None)
    if not conditions:
        status.pop("conditions")
    return actions + _status_patch(JOBS, job, status)


# ------------------------------------------------------------------------------------------- DaemonSet

# The tolerations the DaemonSet controller adds to its pods (pkg/controller/daemon/util).
DAEMON_TOLERATIONS: list[Obj] = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def daemon_pod_target(pod: Mapping[str, Any]) -> str:
    """The node a DaemonSet pod is for: its nodeName, or the node its affinity pins it to."""
    if node_name_of(pod):
        return node_name_of(pod)
    terms = (
        (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for req in term.get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and req.get("values"):
                return str(req["values"][0])
    return ""


def _daemon_template_pod(ds: Mapping[str, Any]) -> Obj:
    spec = copy.deepcopy(((ds.get("spec") or {}).get("template") or {}).get("spec") or {})
    tolerations = list(spec.get("tolerations") or [])
    for tol in DAEMON_TOLERATIONS:
        if tol not in tolerations:
            tolerations.append(tol)
    spec["tolerations"] = tolerations
    return {"spec": spec}


def daemon_should_run(ds: Mapping[str, Any], node: NodeInfo) -> bool:
    """The template's node selector / required affinity match and its tolerations cover the taints."""
    pod = _daemon_template_pod(ds)
    tolerations = pod["spec"]["tolerations"]
    if any(
        t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t) for t in node.taints
    ):
        return False
    return matches_node_affinity(pod, node)


def reconcile_daemonset(
    ds: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: dt.datetime,
) -> list[Action]:
    """One pod per eligible node, pinned with a ``metadata.name`` node affinity for the scheduler."""
    spec = ds.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    owned = _owned(pods, ds)
    infos = {info.name: info for info in (node_info(n) for n in nodes)}
    eligible = sorted(name for name, info in infos.items() if daemon_should_run(ds, info))
    by_node: dict[str, list[Obj]] = {}
    for pod in owned:
        if not is_terminating(pod):
            by_node.setdefault(daemon_pod_target(pod), []).append(pod)
    actions: list[Action] = []
    deletable = not is_terminating(ds)
    for node_name in eligible:
        node_pods = by_node.get(node_name, [])
        failed = [p for p in node_pods if pod_phase(p) == "Failed"]
        live = [p for p in node_pods if pod_phase(p) != "Failed"]
        actions += [Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in failed]
        if not live and deletable:
            body = pod_from_template(spec.get("template") or {}, owner=ds, owner_resource=DAEMONSETS)
            body["spec"]["tolerations"] = _daemon_template_pod(ds)["spec"]["tolerations"]
            body["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node_name]}
                                ]
                            }
                        ]
                    }
                }
            }
            actions.append(Create(PODS, namespace_of(ds), body))
        for extra in sorted(live, key=_deletion_rank)[: max(0, len(live) - 1)]:
            actions.append(Delete(PODS, namespace_of(extra), name_of(extra), uid_of(extra)))
    misscheduled = [p for target, ps in by_node.items() if target not in eligible for p in ps]
    actions += [Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in misscheduled]
    by_node = {n: [p for p in ps if pod_phase(p) != "Failed"] for n, ps in by_node.items()}
    scheduled = [n for n in eligible if any(node_name_of(p) == n for p in by_node.get(n, []))]
    ready_nodes = [n for n in eligible if any(is_pod_ready(p) for p in by_node.get(n, []))]
    available_nodes = [
        n
        for n in eligible
        if any(_ready_for(p, now=now, min_ready_seconds=min_ready) for p in by_node.get(n, []))
    ]
    status = {
        "desiredNumberScheduled": len(eligible),
        "currentNumberScheduled": len(scheduled),
        "updatedNumberScheduled": len(scheduled),
        "numberMisscheduled": len({node_name_of(p) for p in misscheduled if node_name_of(p)}),
        "numberReady": len(ready_nodes),
        "numberAvailable": len(available_nodes),
        "numberUnavailable": len(eligible) - len(available_nodes),
        "observedGeneration": int(meta(ds).get("generation") or 1),
    }
    return actions + _status_patch(DAEMONSETS, ds, status)


# ------------------------------------------------------------------------------------ garbage collector


def orphans(objects: Iterable[Mapping[str, Any]], *, live_uids: set[str], owner_kinds: set[str]) -> list[Obj]:
    """Objects all of whose owners are gone (background propagation deletes them).

    Only owner references to kinds in ``owner_kinds`` (the kinds the caller watches) can be judged;
    an object with any other owner is left alone. The caller confirms absence with a live read first.
    """
    result = []
    for obj in objects:
        refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
        if not refs or is_terminating(obj):
            continue
        if all(r.get("kind") in owner_kinds and r.get("uid") not in live_uids for r in refs):
            result.append(dict(obj))
    return result


def controller_uid(obj: Mapping[str, Any]) -> str:
    ref = controller_ref(obj)
    return str(ref.get("uid")) if ref else ""
