"""`POST /mutate/jobs`: the rule that keeps a Job from counting an eviction as a failure
(`DISRUPTION_IGNORE_RULE` in its podFailurePolicy), added to the Jobs whose pods evict mode may hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stagger import matching
from stagger.names import Names
from stagger.policy import StaggeringPolicy
from webhook.admission import wire
from webhook.admission.inject import add_op, escape_pointer
from webhook.admission.review import answer_review, is_create

__all__ = ["DISRUPTION_IGNORE_RULE", "MAX_POD_FAILURE_RULES", "job_mutation", "review_job"]


# What `POST /mutate/jobs` adds to a Job's podFailurePolicy: an eviction (the API server adds the
# DisruptionTarget condition, reason EvictionByEvictionAPI) is not counted against backoffLimit.
DISRUPTION_IGNORE_RULE: dict[str, Any] = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget"}],
}


# Kubernetes' limit on podFailurePolicy.rules (apis/batch/validation: maxPodFailurePolicyRules).
MAX_POD_FAILURE_RULES = 20


def _disruption_rules(rules: Sequence[object]) -> list[Mapping[str, Any]]:
    """The rules of a podFailurePolicy that match the DisruptionTarget condition (status True)."""
    found = []
    for rule in rules:
        if not isinstance(rule, Mapping):
            continue
        patterns = rule.get("onPodConditions")
        if not isinstance(patterns, list):
            # Not a list (a malformed Job): no pattern. Iterating `onPodConditions: 5` raised TypeError, an
            # internal error (found by tests/fuzz/test_webhook_admission.py).
            continue
        for pattern in patterns:
            if (
                isinstance(pattern, Mapping)
                and pattern.get("type") == "DisruptionTarget"
                and pattern.get("status", "True") == "True"
            ):
                found.append(rule)
                break
    return found


def job_mutation(
    job: Mapping[str, Any],
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    namespace: str | None = None,
) -> tuple[list[wire.PatchOperation], list[str]]:
    """The JSON Patch for a Job being created, and the warnings for its author. Pure.

    For a Job whose pod template is opted in and in an evict-mode policy (not bypassed everywhere): add
    `{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}` first in podFailurePolicy.rules (first,
    because the first matching rule decides), and mark the template `<prefix>/evictable: "1"` so that its
    pods may be held. Left alone, with a warning, when Kubernetes would not take a podFailurePolicy
    (restartPolicy other than Never) or when the Job has its own DisruptionTarget rule that is not Ignore:
    its pods are then paced by their init client (lock mode). A Job given a podFailurePolicy here also gets
    `podReplacementPolicy: Failed`, the only value Kubernetes allows with one."""
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(template, Mapping):
        return [], []
    template_meta = template.get("metadata")
    if not isinstance(template_meta, Mapping):
        return [], []
    job_meta = job.get("metadata")
    job_namespace = job_meta.get("namespace") if isinstance(job_meta, Mapping) else None
    pod = {**template, "metadata": {**template_meta, "namespace": job_namespace or namespace or ""}}
    if matching.pod_labels(pod).get(names.enable_label) != "1":
        return [], []
    placement = matching.match_pod(pod, policies)
    if placement is None or placement.mode != "evict" or placement.fully_bypassed:
        return [], []
    pod_spec = template.get("spec")
    pod_spec = pod_spec if isinstance(pod_spec, Mapping) else {}
    lock = "its pods are paced by their init client (lock mode), not held for eviction"
    if pod_spec.get("restartPolicy") != "Never":
        return [], [
            f"stagger: restartPolicy {pod_spec.get('restartPolicy')!s}: Kubernetes allows a podFailurePolicy "
            f"only with restartPolicy Never, so an eviction would count as a failure; {lock}"
        ]
    failure_policy = spec.get("podFailurePolicy")
    rules = failure_policy.get("rules") if isinstance(failure_policy, Mapping) else None
    rules = rules if isinstance(rules, list) else []
    ops: list[wire.PatchOperation] = []
    existing = _disruption_rules(rules)
    if any(rule.get("action") != "Ignore" for rule in existing):
        return [], [
            "stagger: the Job's podFailurePolicy has a DisruptionTarget rule whose action is not Ignore, "
            f"so an eviction would count against it; {lock}"
        ]
    if not existing:
        if len(rules) >= MAX_POD_FAILURE_RULES:
            return [], [
                f"stagger: the Job's podFailurePolicy has {len(rules)} rules already (Kubernetes allows "
                f"{MAX_POD_FAILURE_RULES}), no room for the DisruptionTarget Ignore rule; {lock}"
            ]
        if isinstance(failure_policy, Mapping) and isinstance(failure_policy.get("rules"), list):
            ops.append(add_op("/spec/podFailurePolicy/rules/0", DISRUPTION_IGNORE_RULE))
        elif isinstance(failure_policy, Mapping):
            ops.append(add_op("/spec/podFailurePolicy/rules", [DISRUPTION_IGNORE_RULE]))
        else:
            ops.append(add_op("/spec/podFailurePolicy", {"rules": [DISRUPTION_IGNORE_RULE]}))
        if spec.get("podReplacementPolicy") != "Failed":
            # The API server defaulted it to TerminatingOrFailed before admission (no podFailurePolicy then),
            # and a Job with a podFailurePolicy may only have Failed (apis/batch/validation
            # validatePodReplacementPolicy): without this the Job would be refused.
            ops.append(add_op("/spec/podReplacementPolicy", "Failed"))
    annotations = template_meta.get("annotations")
    if isinstance(annotations, Mapping):
        path = f"/spec/template/metadata/annotations/{escape_pointer(names.evictable_annotation)}"
        ops.append(add_op(path, "1"))
    else:
        ops.append(add_op("/spec/template/metadata/annotations", {names.evictable_annotation: "1"}))
    return ops, list(placement.warnings)


def review_job(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    internal_errors: list[Exception] | None = None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """`POST /mutate/jobs`: as `review`, for Jobs being created (`job_mutation`)."""
    return answer_review(
        body,
        applies=lambda request: is_create(request, kind="Job", group="batch", resource="jobs"),
        mutate=lambda job, namespace: job_mutation(job, policies=policies, names=names, namespace=namespace),
        internal_errors=internal_errors,
    )
