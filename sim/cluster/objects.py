"""Small pure helpers over Kubernetes objects as plain dicts (what the REST API sends)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from stagger.podstate import is_pod_finished


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("namespace", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid", ""))


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = meta(obj).get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    annotations = meta(obj).get("annotations")
    return dict(annotations) if isinstance(annotations, dict) else {}


STANDIN_ANNOTATION = "sim.stagger.technicianted/standin"
"""On a pod that stands in for a process the simulated cluster runs itself (`sim.cluster.standins`): no
kubelet runs it, as no real kubelet runs a static pod's mirror pod."""


def is_standin(obj: Mapping[str, Any]) -> bool:
    return STANDIN_ANNOTATION in annotations_of(obj)


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def owned_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == uid_of(owner)


def owner_reference(owner: Mapping[str, Any], *, api_version: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_pod_active(pod: Mapping[str, Any]) -> bool:
    """Counts towards a controller's replicas: neither finished nor being deleted."""
    return not is_pod_finished(pod) and not is_terminating(pod)


def node_name_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def set_condition(
    conditions: Iterable[Mapping[str, Any]],
    *,
    kind: str,
    status: str,
    now: str,
    reason: str | None = None,
    message: str | None = None,
) -> list[dict[str, Any]]:
    """Conditions with ``kind`` set; ``lastTransitionTime`` changes only when ``status`` does."""
    result: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != kind:
            result.append(dict(cond))
            continue
        found = True
        updated: dict[str, Any] = {"type": kind, "status": status}
        updated["lastTransitionTime"] = (
            cond.get("lastTransitionTime") if cond.get("status") == status else now
        ) or now
        if reason is not None:
            updated["reason"] = reason
        if message is not None:
            updated["message"] = message
        for extra in ("lastProbeTime", "lastUpdateTime", "lastHeartbeatTime"):
            if extra in cond:
                updated[extra] = cond[extra]
        result.append(updated)
    if not found:
        new: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": now}
        if reason is not None:
            new["reason"] = reason
        if message is not None:
            new["message"] = message
        result.append(new)
    return result


def cpu_millis(quantity: object) -> int:
    """A cpu quantity ("500m", "2", 0.5) in millicores, rounded up like the scheduler does."""
    value = parse_quantity(quantity) * 1000  # type: ignore[no-untyped-call]
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def byte_count(quantity: object) -> int:
    value = parse_quantity(quantity)  # type: ignore[no-untyped-call]
    return int(value.to_integral_value(rounding="ROUND_CEILING"))
