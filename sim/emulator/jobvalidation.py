"""Job validation, as pkg/apis/batch/validation/validation.go (v1.36) does it: ValidateJobSpec (counts,
completion modes, podFailurePolicy, podReplacementPolicy, the template's restart policy, the selector)
and ValidateJobSpecUpdate (immutable fields; the pod template may change only while the job is suspended
and has not run, and then only its scheduling directives and container resources, as the
MutablePodResourcesForSuspendedJobs and MutableSchedulingDirectivesForSuspendedJobs gates, on by
default in v1.36, allow: pkg/registry/batch/job/strategy.go validationOptionsForJob).

The pod spec itself is checked by `validation` (passed in as `pod_spec_errors`, to keep one copy).
An immutable-field error carries the new value; the real server prints Go's internal struct there
({"Spec":{"Volumes":null,...}}), the emulator the object's JSON: same field, reason and wording around.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from sim.emulator.errors import OMIT, FieldError
from sim.emulator.names import qualified_name_problems
from sim.emulator.selectors import SelectorError, selector_from_object
from sim.emulator.strategy import prune_nulls
from stagger.objects import Obj

PodSpecErrors = Callable[[Obj, str], list[FieldError]]

ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")  # sorted, as sets.List gives them
OPERATORS = ("In", "NotIn")
CONDITION_STATUSES = ("False", "True", "Unknown")
MAX_RULES, MAX_EXIT_CODES, MAX_PATTERNS = 20, 255, 20
MAX_INDEXED_PARALLELISM = 100_000
MAX_FAILED_INDEXES = 100_000
_NONNEGATIVE = (
    "parallelism",
    "completions",
    "activeDeadlineSeconds",
    "backoffLimit",
    "ttlSecondsAfterFinished",
    "backoffLimitPerIndex",
)


def _go_list(values: tuple[str, ...]) -> str:
    """fmt's %q of a []string: ["a" "b"]."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def _counts(spec: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for key in _NONNEGATIVE:
        value = spec.get(key)
        if isinstance(value, int) and value < 0:
            errors.append(
                FieldError("FieldValueInvalid", f"spec.{key}", "must be greater than or equal to 0", value)
            )
    failed = spec.get("maxFailedIndexes")
    if failed is not None:
        if isinstance(failed, int) and failed < 0:
            errors.append(
                FieldError(
                    "FieldValueInvalid", "spec.maxFailedIndexes", "must be greater than or equal to 0", failed
                )
            )
        if spec.get("backoffLimitPerIndex") is None:
            errors.append(
                FieldError(
                    "FieldValueRequired", "spec.backoffLimitPerIndex", "when maxFailedIndexes is specified"
                )
            )
    return errors


def _completion_mode(spec: Obj) -> list[FieldError]:
    mode = spec.get("completionMode")
    errors: list[FieldError] = []
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.completionMode",
                value=mode,
                supported=("NonIndexed", "Indexed"),
            )
        )
    completions, parallelism, failed = (
        spec.get("completions"),
        spec.get("parallelism"),
        spec.get("maxFailedIndexes"),
    )
    if mode == "Indexed":
        if completions is None:
            errors.append(
                FieldError("FieldValueRequired", "spec.completions", "when completion mode is Indexed")
            )
        if isinstance(parallelism, int) and parallelism > MAX_INDEXED_PARALLELISM:
            detail = (
                f"must be less than or equal to {MAX_INDEXED_PARALLELISM} when completion mode is Indexed"
            )
            errors.append(FieldError("FieldValueInvalid", "spec.parallelism", detail, parallelism))
        if isinstance(completions, int) and isinstance(failed, int) and failed > completions:
            detail = "must be less than or equal to completions"
            errors.append(FieldError("FieldValueInvalid", "spec.maxFailedIndexes", detail, failed))
        if isinstance(failed, int) and failed > MAX_FAILED_INDEXES:
            detail = f"must be less than or equal to {MAX_FAILED_INDEXES}"
            errors.append(FieldError("FieldValueInvalid", "spec.maxFailedIndexes", detail, failed))
    if mode in (None, "NonIndexed"):
        for key in ("backoffLimitPerIndex", "maxFailedIndexes"):
            if spec.get(key) is not None:
                errors.append(
                    FieldError(
                        "FieldValueInvalid", f"spec.{key}", "requires indexed completion mode", spec[key]
                    )
                )
    return errors


def _on_exit_codes(codes: Obj, path: str, containers: set[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    operator = codes.get("operator") or ""
    if not operator:
        errors.append(
            FieldError("FieldValueRequired", f"{path}.operator", f"valid values: {_go_list(OPERATORS)}")
        )
    elif operator not in OPERATORS:
        errors.append(
            FieldError("FieldValueNotSupported", f"{path}.operator", value=operator, supported=OPERATORS)
        )
    name = codes.get("containerName")
    if name is not None and name not in containers:
        detail = "must be one of the container or initContainer names in the pod template"
        errors.append(FieldError("FieldValueInvalid", f"{path}.containerName", detail, name))
    values = codes.get("values") or []
    if not values:
        errors.append(
            FieldError("FieldValueInvalid", f"{path}.values", "at least one value is required", values)
        )
    elif len(values) > MAX_EXIT_CODES:
        errors.append(
            FieldError(
                "FieldValueTooMany",
                f"{path}.values",
                f"must have at most {MAX_EXIT_CODES} items",
                len(values),
            )
        )
    seen: set[int] = set()
    for index, value in enumerate(values):
        if operator == "In" and value == 0:
            errors.append(
                FieldError(
                    "FieldValueInvalid", f"{path}.values[{index}]", "must not be 0 for the In operator", 0
                )
            )
        if value in seen:
            errors.append(FieldError("FieldValueDuplicate", f"{path}.values[{index}]", value=value))
        seen.add(value)
    if any(a > b for a, b in itertools.pairwise(values)):
        errors.append(FieldError("FieldValueInvalid", f"{path}.values", "must be ordered", values))
    return errors


def _on_pod_conditions(patterns: list[Obj], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if len(patterns) > MAX_PATTERNS:
        errors.append(
            FieldError("FieldValueTooMany", path, f"must have at most {MAX_PATTERNS} items", len(patterns))
        )
    for index, pattern in enumerate(patterns):
        where = f"{path}[{index}]"
        kind = pattern.get("type") or ""
        errors.extend(
            FieldError("FieldValueInvalid", f"{where}.type", p, kind) for p in qualified_name_problems(kind)
        )
        status = pattern.get("status") or ""
        if not status:
            detail = f"valid values: {_go_list(CONDITION_STATUSES)}"
            errors.append(FieldError("FieldValueRequired", f"{where}.status", detail))
        elif status not in CONDITION_STATUSES:
            errors.append(
                FieldError(
                    "FieldValueNotSupported", f"{where}.status", value=status, supported=CONDITION_STATUSES
                )
            )
    return errors


def _rule(spec: Obj, rule: Obj, path: str, containers: set[str]) -> list[FieldError]:
    """validatePodFailurePolicyRule."""
    errors: list[FieldError] = []
    action = rule.get("action") or ""
    if not action:
        errors.append(
            FieldError("FieldValueRequired", f"{path}.action", f"valid values: {_go_list(ACTIONS)}")
        )
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            detail = "requires the backoffLimitPerIndex to be set"
            errors.append(FieldError("FieldValueInvalid", f"{path}.action", detail, action))
    elif action not in ACTIONS:
        errors.append(FieldError("FieldValueNotSupported", f"{path}.action", value=action, supported=ACTIONS))
    codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions") or []
    if codes is not None:
        errors.extend(_on_exit_codes(codes, f"{path}.onExitCodes", containers))
    if conditions:
        errors.extend(_on_pod_conditions(conditions, f"{path}.onPodConditions"))
    if codes is not None and conditions:
        detail = "specifying both OnExitCodes and OnPodConditions is not supported"
        errors.append(FieldError("FieldValueInvalid", path, detail, OMIT))
    if codes is None and not conditions:
        detail = "specifying one of OnExitCodes and OnPodConditions is required"
        errors.append(FieldError("FieldValueInvalid", path, detail, OMIT))
    return errors


def _pod_failure_policy(spec: Obj) -> list[FieldError]:
    rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
    path = "spec.podFailurePolicy.rules"
    errors: list[FieldError] = []
    if len(rules) > MAX_RULES:
        errors.append(
            FieldError("FieldValueTooMany", path, f"must have at most {MAX_RULES} items", len(rules))
        )
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    containers = {
        c.get("name") for kind in ("containers", "initContainers") for c in pod_spec.get(kind) or []
    }
    for index, rule in enumerate(rules):
        errors.extend(_rule(spec, rule, f"{path}[{index}]", containers))
    return errors


def _restart_policy(spec: Obj) -> list[FieldError]:
    """The job's rule on top of the pod's: Never or OnFailure, and Never with a podFailurePolicy."""
    policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") or ""
    path = "spec.template.spec.restartPolicy"
    if policy in ("Always", ""):
        return [FieldError("FieldValueRequired", path, 'valid values: "OnFailure", "Never"')]
    if policy not in ("OnFailure", "Never"):
        return [FieldError("FieldValueNotSupported", path, value=policy, supported=("OnFailure", "Never"))]
    if spec.get("podFailurePolicy") is not None and policy != "Never":
        return [
            FieldError(
                "FieldValueInvalid",
                path,
                'only "Never" is supported when podFailurePolicy is specified',
                policy,
            )
        ]
    return []


def _selector(spec: Obj) -> list[FieldError]:
    selector_obj = spec.get("selector")
    if selector_obj is None:
        return [FieldError("FieldValueRequired", "spec.selector")]
    try:
        selector = selector_from_object(selector_obj, nil_selects=False)
    except SelectorError as err:
        return [FieldError("FieldValueInvalid", "spec.selector", str(err), selector_obj)]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    if not selector.matches(labels or {}):
        detail = "`selector` does not match template `labels`"
        return [FieldError("FieldValueInvalid", "spec.template.metadata.labels", detail, labels)]
    return []


def job_spec_errors(spec: Obj, pod_spec_errors: PodSpecErrors) -> list[FieldError]:
    """ValidateJobSpec."""
    errors = _counts(spec) + _completion_mode(spec)
    if spec.get("podFailurePolicy") is not None:
        errors.extend(_pod_failure_policy(spec))
    if spec.get("successPolicy") is not None and spec.get("completionMode") != "Indexed":
        detail = "requires indexed completion mode"
        errors.append(FieldError("FieldValueInvalid", "spec.successPolicy", detail, spec["successPolicy"]))
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None:
        allowed = (
            ("Failed",) if spec.get("podFailurePolicy") is not None else ("Failed", "TerminatingOrFailed")
        )
        if replacement not in allowed:
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    "spec.podReplacementPolicy",
                    value=replacement,
                    supported=allowed,
                )
            )
    template = spec.get("template") or {}
    errors.extend(pod_spec_errors(template.get("spec") or {}, "spec.template.spec"))
    errors.extend(_restart_policy(spec))
    return errors + _selector(spec)


# ------------------------------------------------------------------------------------------------ update


def _immutable(new: Any, old: Any, path: str) -> list[FieldError]:
    if prune_nulls(new) == prune_nulls(old):
        return []
    return [FieldError("FieldValueInvalid", path, "field is immutable", new)]


def _template_may_change(old: Obj) -> bool:
    """shouldAllowMutablePodTemplate: suspended, and never started or suspended since, with no pod active."""
    spec, status = old.get("spec") or {}, old.get("status") or {}
    suspended_condition = any(
        c.get("type") == "Suspended" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    started = status.get("startTime") is not None
    return bool(spec.get("suspend")) and (not started or suspended_condition) and not status.get("active")


def _template_errors(new_spec: Obj, old: Obj) -> list[FieldError]:
    """validatePodTemplateUpdate."""
    template, old_template = (
        new_spec.get("template") or {},
        copy.deepcopy((old.get("spec") or {}).get("template") or {}),
    )
    if not _template_may_change(old):
        return _immutable(template, old_template, "spec.template")
    # The scheduling directives may change: take them from the new template.
    pod, old_pod = template.get("spec") or {}, old_template.setdefault("spec", {})
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        old_pod.pop(key, None)
        if key in pod:
            old_pod[key] = pod[key]
    affinity = pod.get("affinity")
    if affinity is None and old_pod.get("affinity") is not None:
        old_pod["affinity"].pop("nodeAffinity", None)
        if not old_pod["affinity"]:
            old_pod.pop("affinity")
    elif affinity is not None:
        old_pod.setdefault("affinity", {}).pop("nodeAffinity", None)
        if "nodeAffinity" in affinity:
            old_pod["affinity"]["nodeAffinity"] = affinity["nodeAffinity"]
    # validatePodResourceUpdatesOnly: and the containers' resources.
    for kind in ("containers", "initContainers"):
        new_list, old_list = pod.get(kind) or [], old_pod.get(kind) or []
        if len(new_list) == len(old_list):
            for new_c, old_c in zip(new_list, old_list, strict=True):
                if new_c.get("name") == old_c.get("name"):
                    old_c.pop("resources", None)
                    if "resources" in new_c:
                        old_c["resources"] = new_c["resources"]
    return _immutable(pod, old_pod, "spec.template.spec")


def _completions_update(spec: Obj, old_spec: Obj) -> list[FieldError]:
    """validateCompletions: immutable, except for Indexed jobs in tandem with parallelism."""
    if spec.get("completionMode") != "Indexed":
        return _immutable(spec.get("completions"), old_spec.get("completions"), "spec.completions")
    completions = spec.get("completions")
    if completions == old_spec.get("completions") or completions is None:
        return []
    if completions != spec.get("parallelism"):
        detail = "can only be modified in tandem with spec.parallelism"
        return [FieldError("FieldValueInvalid", "spec.completions", detail, completions)]
    return []


def job_update_errors(new: Obj, old: Obj, pod_spec_errors: PodSpecErrors) -> list[FieldError]:
    """ValidateJobSpecUpdate (after ValidateJob, whose spec checks it repeats, as the real one does)."""
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    errors = job_spec_errors(spec, pod_spec_errors)
    errors.extend(_completions_update(spec, old_spec))
    errors.extend(_immutable(spec.get("selector"), old_spec.get("selector"), "spec.selector"))
    errors.extend(_template_errors(spec, old))
    for key in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy", "successPolicy"):
        errors.extend(_immutable(spec.get(key), old_spec.get(key), f"spec.{key}"))
    return errors
