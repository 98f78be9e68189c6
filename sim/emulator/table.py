"""Server-side printing: `meta.k8s.io/v1` Table and PartialObjectMetadata answers, as `kubectl get`
asks for them (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`). Columns follow the real
printers (pkg/printers/internalversion) for pods, nodes, namespaces and deployments; NAME/AGE otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from sim.emulator.resources import ResourceType
from stagger.objects import Obj
from stagger.timestamps import parse_rfc3339

Cell = str | int
IncludeObject = Literal["None", "Metadata", "Object"]

_NAME_DOC = "Name must be unique within a namespace."
_AGE_DOC = "CreationTimestamp is a timestamp representing the server time when this object was created."


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(obj: Obj, now: float) -> str:
    created = parse_rfc3339(str((obj.get("metadata") or {}).get("creationTimestamp") or ""))
    return "<unknown>" if created is None else human_duration(now - created)


def pod_status_reason(pod: Obj) -> str:
    """printPod's STATUS column."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    initializing = False
    init_total = len(spec.get("initContainers") or [])
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode')}"
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{init_total}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                signal = terminated.get("signal")
                reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode')}"
            elif container.get("ready") and state.get("running") is not None:
                has_running = True
        if reason == "Completed" and has_running:
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
            )
            reason = "Running" if ready else "NotReady"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return reason


def _pod_cells(pod: Obj, now: float) -> list[Cell]:
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    containers = status.get("containerStatuses") or []
    ready = sum(1 for c in containers if c.get("ready") and (c.get("state") or {}).get("running") is not None)
    restarts = sum(
        int(c.get("restartCount") or 0) for c in containers + (status.get("initContainerStatuses") or [])
    )
    gates = spec.get("readinessGates") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        pod_status_reason(pod),
        str(restarts),
        _age(pod, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"{len(gates)}" if gates else "<none>",
    ]


def _node_cells(node: Obj, now: float) -> list[Cell]:
    status, spec = node.get("status") or {}, node.get("spec") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    text = "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    if spec.get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.partition("/")[2] for k in labels if k.startswith("node-role.kubernetes.io/"))
    return [
        node["metadata"]["name"],
        text,
        ",".join(roles) or "<none>",
        _age(node, now),
        (status.get("nodeInfo") or {}).get("kubeletVersion") or "",
    ]


def _deployment_cells(obj: Obj, now: float) -> list[Cell]:
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    return [
        obj["metadata"]["name"],
        f"{status.get('readyReplicas') or 0}/{spec.get('replicas') or 0}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        _age(obj, now),
    ]


def _column(name: str, description: str, *, priority: int = 0, fmt: str = "", kind: str = "string") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME = _column("Name", _NAME_DOC, fmt="name")
_AGE = _column("Age", _AGE_DOC)
_PRINTERS: dict[str, tuple[list[Obj], Callable[[Obj, float], list[Cell]]]] = {
    "Pod": (
        [
            _NAME,
            _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            _column("Status", "The aggregate status of the containers in this pod."),
            _column("Restarts", "The number of times the containers in this pod have been restarted."),
            _AGE,
            _column("IP", "IP address allocated to the pod.", priority=1),
            _column("Node", "NodeName indicates in which node this pod is scheduled.", priority=1),
            _column("Nominated Node", "The node the scheduler nominated for this pod.", priority=1),
            _column("Readiness Gates", "The pod's readiness gates.", priority=1),
        ],
        _pod_cells,
    ),
    "Node": (
        [
            _NAME,
            _column("Status", "The status of the node"),
            _column("Roles", "The roles of the node"),
            _AGE,
            _column("Version", "Kubelet Version reported by the node."),
        ],
        _node_cells,
    ),
    "Namespace": (
        [_NAME, _column("Status", "The status of the namespace"), _AGE],
        lambda o, now: [o["metadata"]["name"], (o.get("status") or {}).get("phase") or "", _age(o, now)],
    ),
    "Deployment": (
        [
            _NAME,
            _column("Ready", "Number of the pod with ready state"),
            _column(
                "Up-to-date",
                "Total number of non-terminated pods targeted by this deployment that have the "
                "desired template spec.",
                kind="integer",
            ),
            _column(
                "Available",
                "Total number of available pods (ready for at least minReadySeconds) targeted by "
                "this deployment.",
                kind="integer",
            ),
            _AGE,
        ],
        _deployment_cells,
    ),
}


def partial_metadata(obj: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def to_table(
    rtype: ResourceType,
    objects: list[Obj],
    *,
    now: float,
    include: IncludeObject,
    list_meta: Obj | None = None,
    api_version: str = "meta.k8s.io/v1",
) -> Obj:
    columns, cells = _PRINTERS.get(
        rtype.kind, ([_NAME, _AGE], lambda o, t: [o["metadata"]["name"], _age(o, t)])
    )
    rows: list[Obj] = []
    for obj in objects:
        row: Obj = {"cells": cells(obj, now)}
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": dict(list_meta or {}),
        "columnDefinitions": columns,
        "rows": rows,
    }
