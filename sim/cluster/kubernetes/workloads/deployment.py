"""The Deployment controller's decisions: one ReplicaSet per pod template (named by its hash), rolled
out with RollingUpdate (maxSurge/maxUnavailable) or Recreate, and the Deployment's status."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sim.cluster.kubernetes.workloads.actions import Action, Create, Patch, controlled_by, status_patch
from sim.cluster.objects import (
    is_pod_active,
    is_terminating,
    labels_of,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    set_condition,
)
from stagger.kube import DEPLOYMENTS, REPLICASETS
from stagger.objects import Obj
from stagger.podstate import is_pod_finished
from stagger.timestamps import format_rfc3339

TEMPLATE_HASH_LABEL = "pod-template-hash"

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
    desired = _replicas(deployment)
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


def _replicas(deployment: Mapping[str, Any]) -> int:
    return int((deployment.get("spec") or {}).get("replicas", 1))


def reconcile_deployment(
    deployment: Mapping[str, Any],
    replicasets: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: dt.datetime,
) -> list[Action]:
    """One ReplicaSet per template hash; RollingUpdate (maxSurge/maxUnavailable) or Recreate; status."""
    spec = deployment.get("spec") or {}
    pod_hash = template_hash(spec.get("template") or {})
    owned = [rs for rs in controlled_by(replicasets, deployment) if not is_terminating(rs)]
    new_rs = next((rs for rs in owned if labels_of(rs).get(TEMPLATE_HASH_LABEL) == pod_hash), None)
    old = sorted(
        (rs for rs in owned if rs is not new_rs), key=lambda rs: str(meta(rs).get("creationTimestamp") or "")
    )
    actions: list[Action] = []
    if not spec.get("paused") and not is_terminating(deployment):
        if ((spec.get("strategy") or {}).get("type") or "RollingUpdate") == "Recreate":
            actions = _recreate(deployment, new_rs, old, pods, pod_hash=pod_hash)
        else:
            actions = _rolling_update(deployment, new_rs, old, pod_hash=pod_hash)
    status = _deployment_status(deployment, new_rs, old, pod_hash=pod_hash, now=now)
    return actions + _deployment_status_patch(deployment, status)


def _scale_new(
    deployment: Mapping[str, Any], new_rs: Mapping[str, Any] | None, *, pod_hash: str, replicas: int
) -> list[Action]:
    """Create the ReplicaSet of the current template with ``replicas``, or scale it to them."""
    if new_rs is None:
        body = new_replicaset(deployment, pod_hash=pod_hash, replicas=replicas)
        return [Create(REPLICASETS, namespace_of(deployment), body)]
    return _scale(new_rs, replicas)


def _recreate(
    deployment: Mapping[str, Any],
    new_rs: Mapping[str, Any] | None,
    old: Sequence[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    pod_hash: str,
) -> list[Action]:
    """Recreate: the old ReplicaSets go to 0; the new one to spec.replicas once no old pod is left."""
    pods = list(pods)
    old_pods_left = any(
        is_pod_active(p) or (is_terminating(p) and not is_pod_finished(p))
        for rs in old
        for p in controlled_by(pods, rs)
    )
    target = 0 if old_pods_left else _replicas(deployment)
    scale_down = [a for rs in old for a in _scale(rs, 0)]
    return scale_down + _scale_new(deployment, new_rs, pod_hash=pod_hash, replicas=target)


def _rolling_update(
    deployment: Mapping[str, Any],
    new_rs: Mapping[str, Any] | None,
    old: Sequence[Mapping[str, Any]],
    *,
    pod_hash: str,
) -> list[Action]:
    """RollingUpdate: the new ReplicaSet grows within maxSurge, the old ones shrink within maxUnavailable
    (old pods that are not available cost nothing to remove: always allowed)."""
    desired = _replicas(deployment)
    surge, max_unavailable = rolling_limits(deployment)
    total = sum(_rs_replicas(rs) for rs in [*old, *([new_rs] if new_rs is not None else [])])
    current_new = _rs_replicas(new_rs) if new_rs is not None else 0
    if current_new > desired:
        target_new = desired
    else:
        target_new = min(desired, current_new + max(0, desired + surge - total))
    actions = _scale_new(deployment, new_rs, pod_hash=pod_hash, replicas=target_new)
    new_unavailable = current_new - (_rs_status(new_rs, "availableReplicas") if new_rs is not None else 0)
    scale_down = total - (desired - max_unavailable) - max(0, new_unavailable)
    for rs in old:
        unhealthy = max(0, _rs_replicas(rs) - _rs_status(rs, "availableReplicas"))
        step = min(_rs_replicas(rs), unhealthy + max(0, scale_down))
        if step > 0:
            actions += _scale(rs, _rs_replicas(rs) - step)
            scale_down -= max(0, step - unhealthy)
    return actions


def _deployment_status(
    deployment: Mapping[str, Any],
    new_rs: Mapping[str, Any] | None,
    old: Sequence[Mapping[str, Any]],
    *,
    pod_hash: str,
    now: dt.datetime,
) -> dict[str, Any]:
    """Replica counts summed over the ReplicaSets, and the Available and Progressing conditions."""
    owned = [*old, *([new_rs] if new_rs is not None else [])]
    desired = _replicas(deployment)
    _, max_unavailable = rolling_limits(deployment)
    available = sum(_rs_status(rs, "availableReplicas") for rs in owned)
    complete = new_rs is not None and _rs_status(new_rs, "availableReplicas") >= desired and not old
    return {
        "observedGeneration": int(meta(deployment).get("generation") or 1),
        "replicas": sum(_rs_status(rs, "replicas") for rs in owned),
        "updatedReplicas": _rs_status(new_rs, "replicas") if new_rs is not None else 0,
        "readyReplicas": sum(_rs_status(rs, "readyReplicas") for rs in owned),
        "availableReplicas": available,
        "unavailableReplicas": max(0, sum(_rs_replicas(rs) for rs in owned) - available),
        "conditions": _deployment_conditions(
            deployment,
            available=available >= desired - max_unavailable,
            complete=complete,
            rs_name=f"{name_of(deployment)}-{pod_hash}",
            stamp=format_rfc3339(now.timestamp(), digits=0),
        ),
    }


def _deployment_conditions(
    deployment: Mapping[str, Any], *, available: bool, complete: bool, rs_name: str, stamp: str
) -> list[dict[str, Any]]:
    conditions = list((deployment.get("status") or {}).get("conditions") or [])
    conditions = set_condition(
        conditions,
        kind="Available",
        status="True" if available else "False",
        now=stamp,
        reason="MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        message="Deployment has minimum availability."
        if available
        else "Deployment does not have minimum availability.",
    )
    return set_condition(
        conditions,
        kind="Progressing",
        status="True",
        now=stamp,
        reason="NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
        message=f'ReplicaSet "{rs_name}" has successfully progressed.'
        if complete
        else f'ReplicaSet "{rs_name}" is progressing.',
    )


def _deployment_status_patch(deployment: Mapping[str, Any], status: Mapping[str, Any]) -> list[Action]:
    # Conditions whose only change would be a timestamp-free reorder are not worth a write.
    current = deployment.get("status") or {}
    same_conditions = _conditions_equal(current.get("conditions") or [], status["conditions"])
    wanted = {k: v for k, v in status.items() if k != "conditions" or not same_conditions}
    return status_patch(DEPLOYMENTS, deployment, wanted)


def _conditions_equal(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    def norm(conds: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Any, Any, Any]]:
        return {str(c.get("type")): (c.get("status"), c.get("reason"), c.get("message")) for c in conds}

    return norm(a) == norm(b)
