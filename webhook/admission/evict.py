"""Evict mode at admission: which pods may not be evicted (paced in lock mode instead, with a warning), the
question the controller asks the leader for a pod, and the leader's answer (let it through against its
place, or hold it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stagger import matching
from stagger.groupbook import controller_of
from stagger.matching import Pair
from stagger.names import Names
from stagger.policy import StaggeringPolicy
from webhook.admission.inject import InjectSettings, already_done
from webhook.admission.optin import Route, opt_in
from webhook.admission.review import is_pod_create, request_problem

__all__ = ["EvictAnswer", "EvictQuestion", "evict_ineligible", "evict_question", "with_namespace"]


@dataclass(frozen=True, kw_only=True)
class EvictQuestion:
    """What admission asks the leader about a pod in evict mode (`stagger.groupbook.admit`)."""

    pacer_groups: tuple[Pair, ...]
    bypassed_groups: tuple[Pair, ...]
    owner: str  # the controller's uid
    dry_run: bool


@dataclass(frozen=True, kw_only=True)
class EvictAnswer:
    """The answer: `admit` (let through, counted under `ticket`), `hold`, or `lock` (nobody could evict
    it: no group pacing here; paced by its init client as in lock mode). `now`: wall time, epoch seconds,
    for the annotations; `held_since`: the first hold of the pod's chain, when carried over."""

    outcome: Literal["admit", "hold", "lock"]
    reason: str
    now: float
    ticket: str | None = None
    held_since: float | None = None


def evict_ineligible(pod: Mapping[str, Any], *, names: Names) -> str | None:
    """Why this pod must not be held in evict mode (an eviction would not bring it back as it should),
    or None. Pure."""
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    if "kubernetes.io/config.mirror" in annotations:
        return "a static pod (the kubelet's mirror pod) cannot be evicted and recreated"
    owner = controller_of(metadata)
    if owner is None:
        return "a bare pod (no controller owner) would be deleted for good by an eviction"
    kind = owner.get("kind")
    if kind == "Node":
        return "a static pod (the kubelet's mirror pod) cannot be evicted and recreated"
    if kind == "DaemonSet":
        return "a DaemonSet's pod would be recreated on the same node at once, held or not"
    if kind == "Job" and annotations.get(names.evictable_annotation) != "1":
        return (
            "its Job would count an eviction as a failure (its podFailurePolicy has no Ignore rule for "
            "DisruptionTarget: see the Job's admission warnings)"
        )
    return None


def evict_question(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    route: Route = "label",
    scheduler_names: Collection[str] = (),
) -> EvictQuestion | None:
    """The question to ask the leader before `review` for this AdmissionReview, or None when there is
    none (not a pod being created in evict mode that may be held; `route` and `scheduler_names` as for
    `review`: a pod opted in by its namespace or its scheduler is asked about as the labelled pod it will
    be). Never raises: a body `review` would refuse, or a grouping expression that fails, asks nothing
    (`review` answers)."""
    try:
        if request_problem(body) is not None:
            return None
        assert isinstance(body, Mapping)
        request = body["request"]
        if not is_pod_create(request):
            return None
        chosen = opt_in(request["object"], route=route, names=names, scheduler_names=scheduler_names)
        if chosen is None:
            return None
        pod = with_namespace(chosen.pod, request.get("namespace"))
        spec = pod.get("spec")
        if not isinstance(spec, Mapping) or already_done(spec, settings):
            return None
        placement = matching.match_pod(pod, policies)
        if placement is None or placement.mode != "evict" or placement.fully_bypassed:
            return None
        if evict_ineligible(pod, names=names) is not None:
            return None
        owner = controller_of(pod.get("metadata") or {})
        return EvictQuestion(
            pacer_groups=matching.pacer_groups(placement),
            bypassed_groups=tuple((m.policy_name, m.key) for m in placement.matches if m.bypassed),
            owner=str((owner or {}).get("uid") or ""),
            dry_run=request.get("dryRun") is True,
        )
    except Exception:  # review() meets the same problem and reports it
        return None


def with_namespace(pod: Mapping[str, Any], namespace: object) -> Mapping[str, Any]:
    # Pods created in a namespace often arrive without metadata.namespace; grouping may use it.
    metadata = pod.get("metadata")
    if (
        isinstance(namespace, str)
        and namespace
        and isinstance(metadata, Mapping)
        and not metadata.get("namespace")
    ):
        return {**pod, "metadata": {**metadata, "namespace": namespace}}
    return pod
