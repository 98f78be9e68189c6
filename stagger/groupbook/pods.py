"""Reading pods into the book: a pod object (JSON as the API serves it) to its compact record, and its
controlling owner."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from stagger import matching
from stagger.groupbook.records import HOLDS, PodRecord
from stagger.matching import Pair
from stagger.names import Names
from stagger.policy import StaggeringPolicy
from stagger.timestamps import parse_rfc3339

__all__ = ["controller_of", "controller_uid", "record_from_pod"]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def record_from_pod(
    pod: Mapping[str, Any],
    *,
    names: Names,
    policies: Mapping[str, StaggeringPolicy] | None = None,
) -> PodRecord | None:
    """The book's record of a pod as the API returns it, or None when it does not belong in the book
    (no valid group-key annotation, being deleted, no name or creation time): remove it then.

    The pairs come from the `<prefix>/group-key` annotation admission wrote (the `<prefix>/policies`
    annotation is for people). With `policies`, a pair whose policy's bypassLabelSelector matches the
    pod's labels is one it only counts in; without them, the pod waits for every pair (the safe side).
    With `policies`, a pair is kept only when its policy is in the file and selects the pod's labels:
    a pod cannot join another team's group by writing the annotation itself (admission leaves the
    annotations of a pod no policy matches alone; docs/SECURITY.md)."""
    metadata = _mapping(pod.get("metadata"))
    if metadata.get("deletionTimestamp"):
        return None
    labels = matching.pod_labels(pod)
    annotations = _mapping(metadata.get("annotations"))
    pairs = matching.parse_group_key(annotations.get(names.group_key_annotation))
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    created_text = metadata.get("creationTimestamp")
    created = parse_rfc3339(created_text) if isinstance(created_text, str) else None
    if not pairs or not isinstance(namespace, str) or not isinstance(name, str) or created is None:
        return None
    waits: list[Pair] = []
    bypassed: list[Pair] = []
    for policy_name, key in pairs.items():
        # Interned: the same policy names and keys (images, say) recur on thousands of pods.
        pair = (sys.intern(policy_name), sys.intern(key))
        policy = policies.get(policy_name) if policies is not None else None
        if policies is not None and (policy is None or not policy.label_selector.matches(labels)):
            continue  # a claim no policy backs (forged, or the pod's labels changed since admission)
        bypass = policy.bypass_label_selector if policy is not None else None
        (bypassed if bypass is not None and bypass.matches(labels) else waits).append(pair)
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    gates = spec.get("schedulingGates")
    gated = isinstance(gates, Sequence) and any(
        isinstance(gate, Mapping) and gate.get("name") == names.scheduling_gate for gate in gates
    )
    granted_text = annotations.get(names.granted_at_annotation)
    held = labels.get(names.staggered_label) == "1" or gated
    if held:
        # Evict mode: a replacement held again keeps the first hold time of its chain.
        since_text = annotations.get(names.held_since_annotation)
        since = parse_rfc3339(since_text) if isinstance(since_text, str) else None
        # creationTimestamp has whole seconds; held-since (written by admission, which overwrites any
        # the pod came with) is finer, and earlier for a chain. Never later than creation's second.
        if since is not None:
            created = min(since, created + 1.0)
    ticket = annotations.get(names.ticket_annotation)
    conditions = status.get("conditions")
    ready = isinstance(conditions, Sequence) and any(
        isinstance(condition, Mapping)
        and condition.get("type") == "Ready"
        and condition.get("status") == "True"
        for condition in conditions
    )
    return PodRecord(
        namespace=sys.intern(namespace),
        name=name,
        uid=uid if isinstance(uid, str) else "",
        pacer_groups=tuple(waits),
        bypassed_groups=tuple(bypassed),
        held=held,
        created=created,
        granted_at=parse_rfc3339(granted_text) if isinstance(granted_text, str) else None,
        ready=ready,
        finished=status.get("phase") in ("Succeeded", "Failed"),
        gated=gated,
        evict_hold=held and annotations.get(names.hold_annotation) in HOLDS,
        owner=sys.intern(controller_uid(metadata)),
        ticket=ticket if isinstance(ticket, str) and ticket else None,
    )


def controller_uid(metadata: Mapping[str, Any]) -> str:
    """The uid of the object's controller (the ownerReference with controller: true), or ""."""
    owner = controller_of(metadata)
    return "" if owner is None else str(owner.get("uid") or "")


def controller_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with `controller: true`, or None."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, Sequence):
        return None
    for reference in references:
        if isinstance(reference, Mapping) and reference.get("controller") is True:
            return reference
    return None
