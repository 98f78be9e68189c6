"""Label and field selectors: the query-string syntax (k8s.io/apimachinery labels and fields packages)
and `metav1.LabelSelector` objects (matchLabels / matchExpressions).

Label syntax: comma-separated requirements `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
`k` (exists), `!k` (does not exist), and the integer comparisons `k>3`, `k<3`. `!=` and `notin` also
match objects without the label, as in Kubernetes. Field syntax: `f=v`, `f==v`, `f!=v` with `\\`
escapes, and only the field labels a resource supports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Operator = Literal["in", "notin", "exists", "!", "gt", "lt"]

_SPECIAL = set("!=(),<> \t\n")
_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SelectorError(ValueError):
    """A selector that cannot be parsed; the message is what the API server answers (400)."""


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid qualified name (label key), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
            "with an alphanumeric character"
        )
    return None


def label_value_problem(value: str) -> str | None:
    if value == "":
        return None
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op == "in":
            return present and labels[self.key] in self.values
        if self.op == "notin":
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            actual, bound = int(labels[self.key]), int(next(iter(self.values)))
        except ValueError:
            return False
        return actual > bound if self.op == "gt" else actual < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False  # a nil metav1.LabelSelector where it must select nothing

    @property
    def empty(self) -> bool:
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)


# -------------------------------------------------------------------------------- label selector strings


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            tokens.append(text[i : i + 2])
            i += 2
        elif ch in "!=(),<>":
            tokens.append(ch)
            i += 1
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL:
                i += 1
            tokens.append(text[start:i])
    return tokens


def _is_ident(token: str | None) -> bool:
    return token is not None and token not in ("==", "!=", "!", "=", "(", ")", ",", "<", ">")


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def fail(self, why: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {why}")

    def key(self) -> str:
        token = self.take()
        if not _is_ident(token):
            raise self.fail(f"found '{token or ''}', expected: identifier")
        assert token is not None
        problem = label_key_problem(token)
        if problem:
            raise self.fail(f'values[0][key]: Invalid value: "{token}": {problem}')
        return token

    def value(self, *, exact: bool = False) -> str:
        """parseExactValue (exact): end or a comma is the empty value, else an identifier is needed."""
        token = self.peek()
        if exact and token not in (None, ",") and not _is_ident(token):
            raise self.fail(f"found '{token}', expected: identifier")
        if not _is_ident(token):
            return ""  # `k=` selects the empty value
        self.pos += 1
        assert token is not None
        problem = label_value_problem(token)
        if problem:
            raise self.fail(f'values[0][{token}]: Invalid value: "{token}": {problem}')
        return token

    def value_set(self) -> frozenset[str]:
        token = self.take()
        if token != "(":
            raise self.fail(f"found '{token or ''}' expected: '('")  # sic: selector.go parseValues
        values: list[str] = []
        while True:
            values.append(self.value())
            token = self.take()
            if token == ")":
                break
            if token != ",":
                raise self.fail(f"found '{token or ''}', expected: ',' or ')'")
        if values == [""]:
            raise self.fail("for 'in', 'notin' operators, values set can't be empty")
        return frozenset(values)

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.key(), "!")
        key = self.key()
        op = self.peek()
        if op in (None, ","):
            return Requirement(key, "exists")
        self.take()
        if op in ("=", "=="):
            return Requirement(key, "in", frozenset([self.value(exact=True)]))
        if op == "!=":
            return Requirement(key, "notin", frozenset([self.value(exact=True)]))
        if op in ("in", "notin"):
            return Requirement(key, "in" if op == "in" else "notin", self.value_set())
        if op in ("<", ">"):
            bound = self.take() or ""
            if not re.fullmatch(r"-?\d+", bound):
                raise self.fail(f"for 'Gt', 'Lt' operators, the value must be an integer, got '{bound}'")
            return Requirement(key, "gt" if op == ">" else "lt", frozenset([bound]))
        raise self.fail(f"found '{op}', expected: in, notin, =, ==, !=, gt, lt")

    def parse(self) -> LabelSelector:
        requirements: list[Requirement] = []
        if self.peek() is None:
            return EVERYTHING
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token is None:
                break
            if token != ",":
                raise self.fail(f"found '{token}', expected: ',' or 'end of string'")
        return LabelSelector(tuple(requirements))


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a `labelSelector` query parameter. Raises SelectorError with the server's wording."""
    return _LabelParser(text).parse()


# ------------------------------------------------------------------------------ metav1.LabelSelector objects

_EXPRESSION_OPS: dict[str, Operator] = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_from_object(obj: Mapping[str, Any] | None, *, nil_selects: bool) -> LabelSelector:
    """Convert a metav1.LabelSelector. A missing (nil) selector selects everything when `nil_selects`,
    else nothing (as for a PodDisruptionBudget); an empty one `{}` selects everything."""
    if obj is None:
        return EVERYTHING if nil_selects else NOTHING
    requirements: list[Requirement] = []
    for key, value in sorted((obj.get("matchLabels") or {}).items()):
        requirements.append(Requirement(key, "in", frozenset([value])))
    for expr in obj.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(f'"{expr.get("operator")}" is not a valid label selector operator')
        values = frozenset(expr.get("values") or [])
        if op in ("in", "notin") and not values:
            raise SelectorError(
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
            )
        if op in ("exists", "!") and values:
            raise SelectorError(
                "values: Invalid value: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
        requirements.append(Requirement(expr.get("key", ""), op, values))
    return LabelSelector(tuple(requirements))


# ------------------------------------------------------------------------------------------ field selectors


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    equal: bool


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, values: Mapping[str, str]) -> bool:
        return all((values.get(r.field, "") == r.value) == r.equal for r in self.requirements)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            if value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{value[i + 1]}")
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def parse_field_selector(text: str, *, supported: tuple[str, ...]) -> FieldSelector:
    """Parse a `fieldSelector` query parameter, accepting only the resource's field labels."""
    requirements: list[FieldRequirement] = []
    if not text.strip():
        return FieldSelector()
    for part in _split_unescaped(text, ","):
        match = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", part.strip(), re.S)
        if match is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, raw = match.group(1).strip(), match.group(2), match.group(3)
        if name not in supported:
            raise SelectorError(f"field label not supported: {name}")
        requirements.append(FieldRequirement(name, _unescape(raw), op != "!="))
    return FieldSelector(tuple(requirements))


def _path_value(obj: Mapping[str, Any], path: str) -> Any:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def field_values(obj: Mapping[str, Any], labels: tuple[str, ...]) -> dict[str, str]:
    """The string value of each field label for `obj`, as the real GetAttrs functions render them."""
    values: dict[str, str] = {}
    for label in labels:
        if label == "source":
            raw = _path_value(obj, "source.component")
        elif label == "status.successful":
            raw = _path_value(obj, "status.succeeded") or 0
        else:
            raw = _path_value(obj, label)
        if isinstance(raw, bool):
            values[label] = "true" if raw else "false"
        elif raw is None:
            values[label] = "false" if label in ("spec.unschedulable", "spec.hostNetwork") else ""
        else:
            values[label] = str(raw)
    return values
