"""The ReplicaSet controller's decisions: keep ``spec.replicas`` pods of the template running."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from sim.cluster.kubernetes.workloads.actions import (
    BURST_REPLICAS,
    Action,
    Create,
    controlled_by,
    delete_pods,
    deletion_rank,
    is_available,
    pod_from_template,
    status_patch,
)
from sim.cluster.objects import is_pod_active, is_terminating, meta, namespace_of
from stagger.kube import PODS, REPLICASETS
from stagger.podstate import is_pod_ready


def reconcile_replicaset(
    rs: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *, now: dt.datetime
) -> list[Action]:
    """Keep ``spec.replicas`` active pods (terminating and finished ones do not count) and report status."""
    spec = rs.get("spec") or {}
    desired = int(spec.get("replicas", 1))
    min_ready = int(spec.get("minReadySeconds") or 0)
    owned = controlled_by(pods, rs)
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
            victims = sorted(active, key=deletion_rank)[: min(-diff, BURST_REPLICAS)]
            actions += delete_pods(victims)
    status = {
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "readyReplicas": sum(1 for p in active if is_pod_ready(p)),
        "availableReplicas": sum(1 for p in active if is_available(p, now=now, min_ready_seconds=min_ready)),
        "observedGeneration": int(meta(rs).get("generation") or 1),
    }
    return actions + status_patch(REPLICASETS, rs, status)
