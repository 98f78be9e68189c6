"""The mutating admission webhook's decision for a pod: a pure function of the pod, the policies and (in
evict mode) the leader's answer, returning the JSON Patch and the warnings; `review` answers the
AdmissionReview around it."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from stagger import matching
from stagger.matching import Placement
from stagger.names import Names
from stagger.policy import StaggeringPolicy
from stagger.timestamps import format_rfc3339
from webhook.admission import wire
from webhook.admission.evict import EvictAnswer, evict_ineligible, with_namespace
from webhook.admission.inject import (
    InjectSettings,
    add_entries,
    add_op,
    already_done,
    escape_pointer,
    init_container,
    stub_ops,
    token_volume_ops,
)
from webhook.admission.optin import Route, opt_in
from webhook.admission.review import answer_review, is_pod_create

__all__ = ["is_pod_create", "mutation", "review"]


def mutation(
    pod: Mapping[str, Any],
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    namespace: str | None = None,
    evict: EvictAnswer | None = None,
    route: Route = "label",
    scheduler_names: Collection[str] = (),
) -> tuple[list[wire.PatchOperation], list[str]]:
    """The JSON Patch for a pod being created, and the warnings for its author; ([], []) for a pod stagger
    leaves alone. `namespace` (the request's) stands in for a missing metadata.namespace when grouping.
    `evict`: the leader's answer for a pod in evict mode (None: nobody could be asked, lock mode).
    `route`: how the pod may be opted in (`opt_in`: its label, its namespace's, its scheduler among
    `scheduler_names`); the namespace and scheduler routes add the enable label to the patch.

    May raise on a pod too malformed to patch (no spec) or from a grouping expression: `review` turns any
    exception into "admitted unchanged"."""
    chosen = opt_in(pod, route=route, names=names, scheduler_names=scheduler_names)
    if chosen is None:
        return [], []
    # From here on the pod as it will be: labelled, so that the placement's labels are added to its label
    # map instead of replacing it, and policies selecting the enable label match it.
    pod = chosen.pod
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("the pod has no spec")
    if already_done(spec, settings):
        # Reinvoked, or the pod matched another of the webhooks first: mutated once. What the route
        # changes (the label, the scheduler) is still owed when the other webhook did not change it.
        return list(chosen.ops), list(chosen.warnings)
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError("the pod has no metadata")
    pod = with_namespace(pod, namespace)
    placement = matching.match_pod(pod, policies)

    ops: list[wire.PatchOperation] = list(chosen.ops)
    warnings: list[str] = list(chosen.warnings)
    warnings.extend(placement.warnings if placement is not None else ())
    hold = placement is not None and not placement.fully_bypassed
    if placement is not None and placement.mode == "evict" and hold:
        ineligible = evict_ineligible(pod, names=names)
        if ineligible is not None:
            warnings.append(
                f"stagger: not held for eviction: {ineligible}; paced by its init client (lock mode)"
            )
            evict = None
        elif evict is None or evict.outcome == "lock":
            why = evict.reason if evict is not None else "no answer from the group pacer"
            warnings.append(f"stagger: evict mode unavailable ({why}); paced by its init client (lock mode)")
            evict = None
        if evict is not None and evict.outcome == "hold" and placement.hold == "stub":
            # Every container is replaced by an idle stub: no init client either (nothing of the pod runs).
            ops.extend(stub_ops(spec, settings=settings))
            ops.extend(_placement_ops(placement, metadata=metadata, spec=spec, names=names, evict=evict))
            return ops, warnings
    else:
        evict = None
    max_wait = settings.max_wait
    if hold:
        assert placement is not None
        # maxBlockedDuration "never" (math.inf) leaves the pod's own bound, the controller's maxWait: an
        # init client that could wait for ever would keep its pod from starting for ever.
        if math.isfinite(placement.max_blocked_duration):
            max_wait = max(max_wait, placement.max_blocked_duration)
    container = init_container(settings, max_wait=max_wait)
    if isinstance(spec.get("initContainers"), list) and spec["initContainers"]:
        ops.append(add_op("/spec/initContainers/0", container))
    else:
        ops.append(add_op("/spec/initContainers", [container]))
    ops.extend(token_volume_ops(spec, settings))
    if placement is not None:
        ops.extend(_placement_ops(placement, metadata=metadata, spec=spec, names=names, evict=evict))
    return ops, warnings


def _placement_ops(
    placement: Placement,
    *,
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    names: Names,
    evict: EvictAnswer | None,
) -> list[wire.PatchOperation]:
    """Labels, annotations and the hold itself. `evict` None for an evict-mode pod: lock mode instead."""
    ops: list[wire.PatchOperation] = []
    hold = not placement.fully_bypassed and (evict is None or evict.outcome == "hold")
    labels = {names.group_label: placement.group}
    if hold:
        labels[names.staggered_label] = "1"
    add_entries(ops, metadata, "labels", labels)
    annotations = {
        names.policies_annotation: matching.policies_annotation(placement),
        names.group_key_annotation: matching.group_key_annotation(placement),
    }
    if evict is not None and evict.outcome == "admit":
        if evict.ticket:
            annotations[names.ticket_annotation] = evict.ticket
        annotations[names.granted_at_annotation] = format_rfc3339(evict.now)
        if evict.held_since is not None:
            annotations[names.held_since_annotation] = format_rfc3339(evict.held_since)
    elif evict is not None and evict.outcome == "hold":
        annotations[names.hold_annotation] = placement.hold
        held_since = evict.now if evict.held_since is None else min(evict.held_since, evict.now)
        annotations[names.held_since_annotation] = format_rfc3339(held_since)
    add_entries(ops, metadata, "annotations", annotations)
    if evict is not None and evict.outcome == "hold" and placement.hold == "nodeSelector":
        if isinstance(spec.get("nodeSelector"), Mapping):
            ops.append(add_op(f"/spec/nodeSelector/{escape_pointer(names.hold_node_label)}", "true"))
        else:
            ops.append(add_op("/spec/nodeSelector", {names.hold_node_label: "true"}))
    if placement.mode == "gate" and hold:
        gate = {"name": names.scheduling_gate}
        gates = spec.get("schedulingGates")
        if not isinstance(gates, list) or not gates:
            ops.append(add_op("/spec/schedulingGates", [gate]))
        elif gate not in gates:
            ops.append(add_op("/spec/schedulingGates/-", gate))
    return ops


def review(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    internal_errors: list[Exception] | None = None,
    evict: EvictAnswer | None = None,
    route: Route = "label",
    scheduler_names: Collection[str] = (),
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The HTTP status and body answering one AdmissionReview (`body` is the decoded JSON). `evict`: the
    leader's answer to `evict_question` for this review, if it asked one. `route`, `scheduler_names`: how
    the pod may be opted in (`mutation`).

    400 `{"error": reason}` when `body` is not an AdmissionReview request; otherwise 200 and a response
    that allows the pod, with a patch when stagger changes it. An exception while building the patch is
    appended to `internal_errors` (for the caller to log and count) and the pod is admitted unchanged with
    the warning INTERNAL_ERROR_WARNING."""
    return answer_review(
        body,
        applies=is_pod_create,
        mutate=lambda pod, namespace: mutation(
            pod,
            policies=policies,
            names=names,
            settings=settings,
            namespace=namespace,
            evict=evict,
            route=route,
            scheduler_names=scheduler_names,
        ),
        internal_errors=internal_errors,
    )
