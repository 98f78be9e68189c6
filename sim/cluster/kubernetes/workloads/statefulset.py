"""The StatefulSet controller's decisions (pkg/controller/statefulset, stateful_set_control.go
updateStatefulSet, processReplica, processCondemned, computeReplicaStatus): pods named
``<set>-<ordinal>`` with a stable identity, created in ordinal order and, with ``podManagementPolicy:
OrderedReady`` (the default), one at a time, each only once its predecessors are Running and Ready
(and available for ``minReadySeconds``); a missing pod is recreated under the same name once the old one
is gone, a Failed or Succeeded one is deleted first; scale-down removes the highest ordinal first, one at
a time. ``Parallel`` creates and deletes them all at once.

Simpler than the real controller: no PersistentVolumeClaims (``volumeClaimTemplates`` are ignored), no
ControllerRevisions (the revision is a hash of the pod template, in the pods' ``controller-revision-hash``
label and the status), and a changed template is not rolled out: pods keep their revision until they are
deleted (as with ``updateStrategy: OnDelete``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sim.cluster.kubernetes.workloads.actions import (
    Action,
    Create,
    controlled_by,
    delete_pods,
    is_available,
    pod_from_template,
    status_patch,
)
from sim.cluster.objects import is_terminating, labels_of, meta, name_of, namespace_of
from stagger.kube import PODS, Resource
from stagger.objects import Obj
from stagger.podstate import is_pod_ready, pod_phase

logger = logging.getLogger(__name__)

STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REVISION_LABEL = "controller-revision-hash"


def revision_name(sts: Mapping[str, Any]) -> str:
    """``<set>-<hash of the pod template>`` (the real one names a ControllerRevision the same way)."""
    template = (sts.get("spec") or {}).get("template") or {}
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name_of(sts)}-{digest}"


def ordinal_of(sts: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    """getOrdinal: the number after the set's name and a dash; None for a pod named otherwise."""
    match = re.fullmatch(re.escape(name_of(sts)) + r"-(0|[1-9][0-9]*)", name_of(pod))
    return int(match[1]) if match else None


def new_pod(sts: Mapping[str, Any], ordinal: int, *, revision: str) -> Obj:
    """newStatefulSetPod: the template's pod, controlled by the set, with its identity (name, hostname,
    subdomain, the pod-name and pod-index labels) and revision."""
    spec = sts.get("spec") or {}
    pod = pod_from_template(
        spec.get("template") or {},
        owner=sts,
        owner_resource=STATEFULSETS,
        extra_labels={REVISION_LABEL: revision},
    )
    name = f"{name_of(sts)}-{ordinal}"
    metadata = pod["metadata"]
    del metadata["generateName"]
    metadata["name"] = name
    metadata["labels"].update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal)})
    pod["spec"]["hostname"] = name
    if spec.get("serviceName"):
        pod["spec"]["subdomain"] = spec["serviceName"]
    return pod


def _created(pod: Mapping[str, Any]) -> bool:
    """isCreated: the API server gave it a phase (Pending at creation)."""
    return bool((pod.get("status") or {}).get("phase"))


def _running_and_ready(pod: Mapping[str, Any]) -> bool:
    return pod_phase(pod) == "Running" and is_pod_ready(pod)


def _running_and_available(pod: Mapping[str, Any], *, now: dt.datetime, min_ready: int) -> bool:
    return pod_phase(pod) == "Running" and is_available(pod, now=now, min_ready_seconds=min_ready)


def _status(
    sts: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *, revision: str, now: dt.datetime
) -> dict[str, Any]:
    """computeReplicaStatus over the set's pods that have an ordinal (terminating ones included)."""
    min_ready = int((sts.get("spec") or {}).get("minReadySeconds") or 0)
    pods = list(pods)
    current = [
        p
        for p in pods
        if _created(p) and not is_terminating(p) and labels_of(p).get(REVISION_LABEL) == revision
    ]
    return {
        "observedGeneration": int(meta(sts).get("generation") or 1),
        "replicas": sum(1 for p in pods if _created(p)),
        "readyReplicas": sum(1 for p in pods if _running_and_ready(p)),
        "availableReplicas": sum(1 for p in pods if _running_and_available(p, now=now, min_ready=min_ready)),
        "currentReplicas": len(current),
        "updatedReplicas": len(current),
        "currentRevision": revision,
        "updateRevision": revision,
        "collisionCount": 0,
    }


def reconcile_statefulset(
    sts: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], *, now: dt.datetime
) -> list[Action]:
    """Create, recreate or delete the set's pods towards ``spec.replicas`` (see the module's docstring),
    and report its status."""
    spec = sts.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    start = int((spec.get("ordinals") or {}).get("start") or 0)
    min_ready = int(spec.get("minReadySeconds") or 0)
    revision = revision_name(sts)
    numbered = [(o, p) for p in controlled_by(pods, sts) if (o := ordinal_of(sts, p)) is not None]
    live = {o: p for o, p in numbered if start <= o < start + replicas}
    condemned = sorted(((o, p) for o, p in numbered if not start <= o < start + replicas), reverse=True)
    status = _status(sts, (p for _, p in numbered), revision=revision, now=now)
    if is_terminating(sts):
        return status_patch(STATEFULSETS, sts, status)
    monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
    actions: list[Action] = []
    blocked = False
    for ordinal in range(start, start + replicas):
        pod = live.get(ordinal)
        if pod is None:
            actions.append(Create(PODS, namespace_of(sts), new_pod(sts, ordinal, revision=revision)))
            blocked = monotonic
        elif pod_phase(pod) in ("Failed", "Succeeded"):
            # Deleted, then created again under the same name once it is gone (a later pass).
            if not is_terminating(pod):
                actions += delete_pods([pod])
            blocked = monotonic
        elif monotonic and (
            is_terminating(pod) or not _running_and_available(pod, now=now, min_ready=min_ready)
        ):
            blocked = True
        if blocked:
            break
    if not blocked:
        actions += _scale_down(condemned, live, monotonic=monotonic, now=now, min_ready=min_ready)
    return actions + status_patch(STATEFULSETS, sts, status)


def _scale_down(
    condemned: list[tuple[int, Obj]],
    live: Mapping[int, Obj],
    *,
    monotonic: bool,
    now: dt.datetime,
    min_ready: int,
) -> list[Action]:
    """processCondemned, highest ordinal first: in order, one at a time, after any terminating one is
    gone, and past an unavailable one only if it is the first unavailable pod of the set."""
    unavailable = [
        p
        for p in [*(live[o] for o in sorted(live)), *(p for _, p in reversed(condemned))]
        if not _running_and_available(p, now=now, min_ready=min_ready)
    ]
    first_unavailable = unavailable[0] if unavailable else None
    victims: list[Obj] = []
    for _, pod in condemned:
        if is_terminating(pod):
            if monotonic:
                break
            continue
        if (
            monotonic
            and not _running_and_available(pod, now=now, min_ready=min_ready)
            and pod is not first_unavailable
        ):
            break
        victims.append(pod)
        if monotonic:
            break
    return delete_pods(victims)
