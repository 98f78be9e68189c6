"""PodDisruptionBudget and label selector validation: ValidatePodDisruptionBudgetSpec
(pkg/apis/policy/validation/validation.go v1.36, with apps' ValidatePositiveIntOrPercent and
IsNotMoreThan100Percent) and ValidateLabelSelector (k8s.io/apimachinery/pkg/apis/meta/v1/validation)."""

from __future__ import annotations

import json
import re
from typing import Any

from sim.emulator.errors import FieldError, GoRendered
from sim.emulator.names import label_value_problems, qualified_name_problems, regex_error
from stagger.objects import Obj

_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_MSG = regex_error(
    "a valid percent string must be a numeric string followed by an ending '%'", "[0-9]+%", "1%", "93%"
)
EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")


def _invalid_each(path: str, value: Any, problems: list[str]) -> list[FieldError]:
    return [FieldError("FieldValueInvalid", path, problem, value) for problem in problems]


def label_selector_errors(selector: Any, path: str) -> list[FieldError]:
    """ValidateLabelSelector (a nil selector is valid)."""
    if not isinstance(selector, dict):
        return []
    errors: list[FieldError] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        errors.extend(_invalid_each(f"{path}.matchLabels", key, qualified_name_problems(key)))
        errors.extend(_invalid_each(f"{path}.matchLabels", value, label_value_problems(str(value))))
    for index, requirement in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{index}]"
        operator, values = requirement.get("operator") or "", requirement.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                detail = "must be specified when `operator` is 'In' or 'NotIn'"
                errors.append(FieldError("FieldValueRequired", f"{where}.values", detail))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                errors.append(FieldError("FieldValueForbidden", f"{where}.values", detail))
        else:
            errors.append(
                FieldError(
                    "FieldValueInvalid", f"{where}.operator", "not a valid selector operator", operator
                )
            )
        key = requirement.get("key") or ""
        errors.extend(_invalid_each(f"{where}.key", key, qualified_name_problems(key)))
        for position, value in enumerate(values):
            errors.extend(
                _invalid_each(f"{where}.values[{position}]", value, label_value_problems(str(value)))
            )
    return errors


def _int_or_percent_errors(value: Any, path: str) -> list[FieldError]:
    """ValidatePositiveIntOrPercent, then IsNotMoreThan100Percent."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [FieldError("FieldValueInvalid", path, _PERCENT_MSG, value)]
        if int(value[:-1]) > 100:
            return [FieldError("FieldValueInvalid", path, "must not be greater than 100%", value)]
        return []
    if isinstance(value, int) and value < 0:
        return [FieldError("FieldValueInvalid", path, "must be greater than or equal to 0", value)]
    return []


def _internal_spec(spec: Obj) -> GoRendered:
    """How Go prints the internal PodDisruptionBudgetSpec (no JSON tags: its field names, in order)."""
    fields = {
        "MinAvailable": spec.get("minAvailable"),
        "Selector": spec.get("selector"),
        "MaxUnavailable": spec.get("maxUnavailable"),
        "UnhealthyPodEvictionPolicy": spec.get("unhealthyPodEvictionPolicy"),
    }
    return GoRendered(json.dumps(fields, separators=(",", ":")))


def pdb_spec_errors(spec: Obj) -> list[FieldError]:
    """ValidatePodDisruptionBudgetSpec."""
    errors: list[FieldError] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        detail = "minAvailable and maxUnavailable cannot be both set"
        errors.append(FieldError("FieldValueInvalid", "spec", detail, _internal_spec(spec)))
    for key in ("minAvailable", "maxUnavailable"):
        if spec.get(key) is not None:
            errors.extend(_int_or_percent_errors(spec[key], f"spec.{key}"))
    errors.extend(label_selector_errors(spec.get("selector"), "spec.selector"))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.unhealthyPodEvictionPolicy",
                value=policy,
                supported=EVICTION_POLICIES,
            )
        )
    return errors
