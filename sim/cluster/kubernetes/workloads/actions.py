"""The writes a workload controller decides (create, delete, patch) and what the controllers share:
pods from a template, which pods count as available, which go first when scaling down.

Each ``reconcile_*`` of this package takes the owner and the objects it owns (plain dicts as the API
sends them) and the current time, and returns the writes to make. They follow the real controllers'
rules where a test or the demo can see the difference, and document where they are simpler.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sim.cluster.objects import meta, name_of, namespace_of, node_name_of, owned_by, owner_reference, uid_of
from stagger.kube import PODS, Resource
from stagger.objects import Obj, condition
from stagger.podstate import is_pod_ready, pod_phase
from stagger.timestamps import parse_rfc3339

# kube-controller-manager's burstReplicas: at most this many creations/deletions per pass.
BURST_REPLICAS = 500


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


def delete_pods(pods: Iterable[Mapping[str, Any]]) -> list[Action]:
    return [Delete(PODS, namespace_of(p), name_of(p), uid_of(p)) for p in pods]


def status_patch(resource: Resource, obj: Mapping[str, Any], status: Mapping[str, Any]) -> list[Action]:
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


def is_available(pod: Mapping[str, Any], *, now: dt.datetime, min_ready_seconds: int) -> bool:
    """Ready, and for at least ``min_ready_seconds`` (what "available" means)."""
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    cond = condition(pod, "Ready") or {}
    since = parse_rfc3339(str(cond.get("lastTransitionTime") or ""))
    return since is not None and now.timestamp() - since >= min_ready_seconds


def deletion_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """Which pods a controller removes first when scaling down (like controller.ActivePods ordering):
    unscheduled, then pending, then not ready, then the newest."""
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod_phase(pod), 3)
    created = str(meta(pod).get("creationTimestamp") or "")
    # Newest first: invert the timestamp's sort order by sorting on the negated characters.
    newest_first = "".join(chr(0x10FFFF - ord(ch)) for ch in created)
    return (1 if node_name_of(pod) else 0, phase_rank, 1 if is_pod_ready(pod) else 0, newest_first)


def controlled_by(objects: Iterable[Mapping[str, Any]], owner: Mapping[str, Any]) -> list[Obj]:
    return [dict(o) for o in objects if owned_by(o, owner)]
