"""Kubernetes label selectors: parsing from the policy file, matching, and the API query string.

Semantics follow Kubernetes: `NotIn` and `DoesNotExist` match a pod that lacks the key, an empty
selector matches everything, and label keys and values are validated by the same rules the API
server applies, so a selector that loads here is one the API server would accept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args

from stagger.objectnames import is_dns1123_subdomain

__all__ = [
    "LabelSelector",
    "Operator",
    "Requirement",
    "label_key_problem",
    "label_value_problem",
    "parse_label_selector",
]

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = get_args(Operator)

_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_NAME_MAX = 63
_NAME_CHARS = "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def _is_operator(value: object) -> TypeGuard[Operator]:
    return isinstance(value, str) and value in OPERATORS


def label_key_problem(key: object) -> str | None:
    """Why `key` is not a valid label key (Kubernetes qualified name), or None when it is."""
    if not isinstance(key, str):
        return "label key must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "label key prefix must not be empty"
        if not is_dns1123_subdomain(prefix):
            return "label key prefix must be a lowercase DNS subdomain like 'example.com'"
    if not name:
        return "label key name must not be empty"
    if len(name) > _NAME_MAX:
        return f"label key name must be at most {_NAME_MAX} characters"
    if not _NAME.fullmatch(name):
        return f"label key name must consist of {_NAME_CHARS}"
    return None


def label_value_problem(value: object) -> str | None:
    """Why `value` is not a valid label value, or None when it is (the empty string is valid)."""
    if not isinstance(value, str):
        return "label value must be a string; quote it in YAML"
    if len(value) > _NAME_MAX:
        return f"label value must be at most {_NAME_MAX} characters"
    if value and not _NAME.fullmatch(value):
        return f"label value must consist of {_NAME_CHARS}"
    return None


@dataclass(frozen=True)
class Requirement:
    """One term of a selector; all terms of a selector must match."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case "In":
                return present and labels[self.key] in self.values
            case "NotIn":
                return not present or labels[self.key] not in self.values
            case "Exists":
                return present
            case "DoesNotExist":
                return not present

    def to_query(self) -> str:
        match self.operator:
            case "In" if len(self.values) == 1:
                return f"{self.key}={self.values[0]}"
            case "In":
                return f"{self.key} in ({','.join(self.values)})"
            case "NotIn":
                return f"{self.key} notin ({','.join(self.values)})"
            case "Exists":
                return self.key
            case "DoesNotExist":
                return f"!{self.key}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; matchLabels entries are `In` with one value."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> LabelSelector:
        """The selector a plain `{key: value}` map stands for."""
        return cls(tuple(Requirement(key, "In", (value,)) for key, value in labels.items()))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def to_query(self) -> str:
        """The `labelSelector` query parameter of the Kubernetes API ("" selects everything)."""
        return ",".join(requirement.to_query() for requirement in self.requirements)

    @property
    def is_empty(self) -> bool:
        return not self.requirements


def _child(path: str, key: object) -> str:
    # Label keys such as "app.kubernetes.io/name" would make a dotted path ambiguous.
    if isinstance(key, str) and _SIMPLE_KEY.fullmatch(key):
        return f"{path}.{key}"
    quoted = json.dumps(key) if isinstance(key, str) else repr(key)
    return f"{path}[{quoted}]"


def _parse_labels(raw: Mapping[object, object], *, path: str, errors: list[str]) -> list[Requirement]:
    requirements: list[Requirement] = []
    for key, value in raw.items():
        key_problem = label_key_problem(key)
        value_problem = label_value_problem(value)
        if key_problem:
            errors.append(f"{path}: {key_problem} (got {key!r})")
        if value_problem:
            errors.append(f"{_child(path, key)}: {value_problem} (got {value!r})")
        if isinstance(key, str) and isinstance(value, str) and not key_problem and not value_problem:
            requirements.append(Requirement(key, "In", (value,)))
    return requirements


def _parse_values(raw: object, *, operator: object, path: str, errors: list[str]) -> tuple[str, ...]:
    values = [] if raw is None else raw
    if not isinstance(values, list):
        errors.append(f"{path}: must be a list of label values (got {values!r})")
        return ()
    for index, value in enumerate(values):
        if problem := label_value_problem(value):
            errors.append(f"{path}[{index}]: {problem} (got {value!r})")
    if operator in ("In", "NotIn") and not values:
        errors.append(f"{path}: must not be empty for operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        errors.append(f"{path}: must be empty for operator {operator} (got {values!r})")
    return tuple(str(value) for value in values)


def _parse_expression(raw: object, *, path: str, errors: list[str]) -> Requirement | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: must be a mapping with key, operator and values (got {raw!r})")
        return None
    before = len(errors)
    for unknown in sorted(set(raw) - {"key", "operator", "values"}, key=str):
        errors.append(f"{_child(path, unknown)}: unknown key; expected key, operator or values")
    key, operator = raw.get("key"), raw.get("operator")
    if key is None:
        errors.append(f"{path}.key: is required")
    elif problem := label_key_problem(key):
        errors.append(f"{path}.key: {problem} (got {key!r})")
    if operator is None:
        errors.append(f"{path}.operator: is required")
    elif not _is_operator(operator):
        errors.append(f"{path}.operator: must be one of {', '.join(OPERATORS)} (got {operator!r})")
    values = _parse_values(raw.get("values"), operator=operator, path=f"{path}.values", errors=errors)
    if len(errors) > before or not isinstance(key, str) or not _is_operator(operator):
        return None
    return Requirement(key, operator, values)


def parse_label_selector(raw: object, *, path: str) -> tuple[LabelSelector, list[str]]:
    """Parse a plain `{key: value}` map or `{matchLabels, matchExpressions}`.

    Returns the selector and the errors found, each naming its path; the selector is only
    meaningful when the list is empty.
    """
    errors: list[str] = []
    if not isinstance(raw, Mapping):
        errors.append(
            f"{path}: must be a map of labels or a mapping with matchLabels and/or matchExpressions "
            f"(got {raw!r})"
        )
        return LabelSelector(), errors
    if "matchLabels" not in raw and "matchExpressions" not in raw:
        return LabelSelector(tuple(_parse_labels(raw, path=path, errors=errors))), errors

    requirements: list[Requirement] = []
    for unknown in sorted(set(raw) - {"matchLabels", "matchExpressions"}, key=str):
        errors.append(f"{_child(path, unknown)}: unknown key; expected matchLabels or matchExpressions")
    match_labels = raw.get("matchLabels")
    if isinstance(match_labels, Mapping):
        requirements.extend(_parse_labels(match_labels, path=f"{path}.matchLabels", errors=errors))
    elif match_labels is not None:
        errors.append(f"{path}.matchLabels: must be a map of label keys to values (got {match_labels!r})")
    expressions = raw.get("matchExpressions")
    if isinstance(expressions, list):
        for index, expression in enumerate(expressions):
            requirement = _parse_expression(
                expression, path=f"{path}.matchExpressions[{index}]", errors=errors
            )
            if requirement is not None:
                requirements.append(requirement)
    elif expressions is not None:
        errors.append(f"{path}.matchExpressions: must be a list of expressions (got {expressions!r})")
    return LabelSelector(tuple(requirements)), errors
