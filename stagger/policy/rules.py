"""The policy file's schema walker, its building blocks: each YAML key maps to a check that either returns the
parsed value or appends an error naming its path; a check also says as JSON Schema (draft-07, RE2 patterns:
what Helm reads) as much of itself as a schema can. Every error of a file is collected before anything is
built, so one load shows the operator everything that is wrong. A key set to null is treated as absent
(YAML `holdTimeout:` with no value means "use the default").

Keys match as Go's encoding/json matches a struct's fields, which is how straggler and pod-pacemaker read
the same files (sigs.k8s.io/yaml): exactly, else regardless of case (Go's EqualFold). Such a key is read with
a note; two keys of one mapping that mean the same key are an error (Go keeps the last silently)."""

from __future__ import annotations

import math
import re
import reprlib
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stagger.durations import (
    DURATION_PATTERN,
    NEVER,
    ZERO_DURATION_PATTERN,
    DurationError,
    parse_duration,
    parse_duration_or_never,
)
from stagger.objectnames import DNS1123_LABEL_MAX, is_dns1123_label

__all__ = [
    "DECIMAL_TEXT",
    "DNS_LABEL_SPELLED",
    "MAX_INTEGER",
    "Check",
    "Findings",
    "Key",
    "Rule",
    "anything",
    "boolean",
    "dns_label",
    "dns_label_check",
    "duration",
    "error",
    "fold_key",
    "got_text",
    "has_key",
    "integer",
    "join",
    "list_of",
    "lookup",
    "mapping",
    "number",
    "one_of",
    "single",
]


@dataclass(frozen=True)
class Findings:
    """What a walk over a file found: `errors` (the file is refused) and `notes` (it is read, with a meaning
    it does not spell exactly: a key in another case). Both in the order of the file."""

    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Check = Callable[[object, str, Findings], Any]


@dataclass(frozen=True)
class Rule:
    """A check of one value, and the JSON Schema that says as much of it as a schema can. The chart's
    values.schema.json carries the policy file's, so that `helm install` refuses a policy with a misspelt key
    or a value of the wrong kind before it reaches a node; what only the validator knows (a unique name, a
    selector's keys, a JSONPath, two spellings of one key) lockd still says."""

    check: Check
    schema: Mapping[str, Any]

    def __call__(self, value: object, path: str, found: Findings) -> Any:
        return self.check(value, path, found)


def got_text(value: object) -> str:
    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    return short.repr(value)


def error(found: Findings, path: str, reason: str, value: object) -> None:
    found.errors.append(f"{path}: {reason} (got {got_text(value)})")


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


# Go's EqualFold for a key that can match: every key of the file is ASCII, and the only runes outside ASCII
# whose simple case folding reaches an ASCII letter are KELVIN SIGN (k) and LATIN SMALL LETTER LONG S (s).
# Python's lower() and casefold() fold more (U+0130 to "i̇", U+0131 is "I" upper): not what Go does.
_GO_FOLD = str.maketrans({**{c: c.lower() for c in string.ascii_uppercase}, "\u212a": "k", "\u017f": "s"})


def fold_key(key: str) -> str:
    """`key` folded as Go's EqualFold compares it with an ASCII key."""
    return key.translate(_GO_FOLD)


def _key_pattern(key: str) -> str:
    # RE2 (Helm's) and Python read `(?i)` at the start; RE2's folding is Go's (K matches the KELVIN SIGN).
    return f"(?i)^{re.escape(key)}$"


def has_key(key: str) -> dict[str, Any]:
    """JSON Schema: the object has `key`, in any case. `required` alone is exact; it stays first so that
    Helm's message for a missing key still says "missing property 'name'"."""
    some_key_matches = {"not": {"propertyNames": {"not": {"pattern": _key_pattern(key)}}}}
    return {"anyOf": [{"required": [key]}, some_key_matches]}


def lookup(value: Mapping[Any, Any], key: str) -> object:
    """`value[key]` as the walker reads it: the exact key, else one that means it regardless of case."""
    if key in value:
        return value[key]
    return next((v for k, v in value.items() if isinstance(k, str) and fold_key(k) == fold_key(key)), None)


# No count or priority in a policy needs more; past it an integer is a typo. lockd does float arithmetic
# with some of them (a rate limit's `burst`: a burst past 1e308 raised OverflowError when lockd applied the
# policy, at start-up or on a reload), and JSON readers of /status lose precision past 2**53.
MAX_INTEGER = 2**53


def integer(*, minimum: int | None = None) -> Rule:
    def check(value: object, path: str, found: Findings) -> Any:
        # bool is an int subclass in Python, but `burst: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            return error(found, path, "must be an integer", value)
        if minimum is not None and value < minimum:
            return error(found, path, f"must be at least {minimum}", value)
        if not -MAX_INTEGER <= value <= MAX_INTEGER:
            return error(found, path, f"must be at most {MAX_INTEGER} in size", value)
        return value

    low = -MAX_INTEGER if minimum is None else minimum
    return Rule(check, {"type": "integer", "minimum": low, "maximum": MAX_INTEGER})


def _finite(value: object) -> bool:
    """A number that is not NaN or infinite. An int past the largest float counts as infinite (math.isfinite
    raised OverflowError on it, which escaped the validation)."""
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        return False


DECIMAL_TEXT = r"^[0-9]+(\.[0-9]+)?$"
"""A number written as a string, as pod-pacemaker's CRD takes it (`maxLoad: "80"`, `perCore: "0.5"`)."""


def _bounds_text(above: float | None, at_least: float | None, at_most: float | None) -> str:
    low = f"greater than {above:g}" if above is not None else f"at least {at_least:g}"
    return f"must be {low}" + (f" and at most {at_most:g}" if at_most is not None else "")


def number(
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    text: bool = False,
) -> Rule:
    """A number `above` (exclusive) or `at_least` (one of them), and `at_most`; with `text`, also one written
    as a string of DECIMAL_TEXT (pod-pacemaker's)."""
    assert (above is None) != (at_least is None), "one lower bound"
    rule = _bounds_text(above, at_least, at_most)
    kind = 'must be a number, or a decimal number in quotes like "0.5"' if text else "must be a number"

    def check(value: object, path: str, found: Findings) -> Any:
        read = value
        if text and isinstance(value, str) and re.fullmatch(DECIMAL_TEXT, value):
            read = float(value)  # DECIMAL_TEXT is ASCII digits only; a long one is inf, refused below
        if not _finite(read):
            return error(found, path, kind, value)
        assert isinstance(read, int | float)  # for mypy: _finite checked it
        too_low = read <= above if above is not None else at_least is not None and read < at_least
        if too_low or (at_most is not None and read > at_most):
            return error(found, path, rule, value)
        return float(read)

    bounds = {"exclusiveMinimum": above} if above is not None else {"minimum": at_least}
    schema: dict[str, Any] = {"type": "number", **bounds} | (
        {"maximum": at_most} if at_most is not None else {}
    )
    if text:
        schema = {"anyOf": [schema, {"type": "string", "pattern": DECIMAL_TEXT}]}
    return Rule(check, schema)


def duration(*, allow_zero: bool = False, allow_never: bool = False) -> Rule:
    """A duration in seconds; with `allow_never`, also "never" (math.inf: a bound without end)."""
    parse = parse_duration_or_never if allow_never else parse_duration
    # Zero is no limit to straggler (whose files stagger reads): say how stagger spells that.
    too_short = "must be longer than 0s, or never for no limit" if allow_never else "must be longer than 0s"

    def check(value: object, path: str, found: Findings) -> Any:
        try:
            seconds = parse(value, path=path)
        except DurationError as problem:
            found.errors.append(str(problem))
            return None
        if seconds == 0 and not allow_zero:
            return error(found, path, too_short, value)
        return seconds

    text: dict[str, Any] = {"type": "string", "pattern": f"^{DURATION_PATTERN}$"}
    if not allow_zero:
        # RE2 (Helm's) has no lookahead: "not all of it zero" is a `not`.
        text["not"] = {"pattern": f"^{ZERO_DURATION_PATTERN}$"}
    number_schema = (
        {"type": "number", "minimum": 0} if allow_zero else {"type": "number", "exclusiveMinimum": 0}
    )
    never = [{"enum": [NEVER]}] if allow_never else []
    return Rule(check, {"anyOf": [text, number_schema, *never]})


def _check_boolean(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, bool):
        return error(found, path, "must be true or false", value)
    return value


boolean = Rule(_check_boolean, {"type": "boolean"})

# What a file may say and the walker does not read (Kubernetes metadata that `kubectl get -o yaml` adds).
anything = Rule(lambda value, path, found: None, {})


def one_of(*choices: str) -> Rule:
    """One of `choices`, exactly: values keep their case (only keys match regardless of it)."""

    def check(value: object, path: str, found: Findings) -> Any:
        if value not in choices:
            return error(found, path, f"must be one of {', '.join(choices)}", value)
        return value

    return Rule(check, {"enum": list(choices)})


# What a DNS-1123 label is, in the words of every error that asks for one.
DNS_LABEL_SPELLED = (
    f"at most {DNS1123_LABEL_MAX} lowercase letters, digits or '-', "
    "starting and ending with a letter or digit"
)


def dns_label_check(message: str) -> Check:
    """A check that the value is a DNS-1123 label, whose error is `message` (it may say what the label
    names, as a format's own words for it)."""

    def check(value: object, path: str, found: Findings) -> Any:
        if not isinstance(value, str) or not is_dns1123_label(value):
            return error(found, path, message, value)
        return value

    return check


dns_label = Rule(
    dns_label_check(f"must be a DNS-1123 label: {DNS_LABEL_SPELLED}"),
    {"type": "string", "maxLength": DNS1123_LABEL_MAX, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
)


def list_of(item: Rule, *, unique_names: bool = False) -> Rule:
    def check(value: object, path: str, found: Findings) -> Any:
        if not isinstance(value, list):
            return error(found, path, "must be a list", value)
        parsed = tuple(item(element, f"{path}[{index}]", found) for index, element in enumerate(value))
        if unique_names:
            first_use: dict[str, int] = {}
            for index, element in enumerate(value):
                name = lookup(element, "name") if isinstance(element, Mapping) else None
                if not isinstance(name, str):
                    continue
                if name in first_use:
                    reason = f"duplicate name; {path}[{first_use[name]}] has it already"
                    error(found, f"{path}[{index}].name", reason, name)
                else:
                    first_use[name] = index
        return parsed

    return Rule(check, {"type": "array", "items": item.schema})


@dataclass(frozen=True)
class Key:
    """One YAML key of a mapping: where its parsed value goes (`attr`) and how it is checked."""

    key: str
    attr: str
    check: Rule
    required: bool = False


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema`, or null. Said inside the schema rather than as an anyOf around it, so that Helm's message
    for a wrong value names what is wrong with it, not only that it is not null."""
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    return dict(schema)  # anything: null too


def _unknown_key(found: Findings, path: str, unknown: object, keys: Sequence[str]) -> None:
    import difflib  # only for a misspelt key: not on every start-up

    folded = {fold_key(key): key for key in keys}
    written = fold_key(unknown) if isinstance(unknown, str) else str(unknown)
    close = difflib.get_close_matches(written, list(folded), n=1)
    hint = f"did you mean {folded[close[0]]!r}?" if close else f"expected one of {', '.join(keys)}"
    found.errors.append(f"{join(path, unknown)}: unknown key; {hint}")


def _meant(written: object, by_fold: Mapping[str, str]) -> str | None:
    """The key `written` means: itself when it is one (exact first, as Go prefers an exact match), else the
    one it folds to, else None (unknown)."""
    if not isinstance(written, str):
        return None
    return written if written in by_fold.values() else by_fold.get(fold_key(written))


def _match_keys(
    value: Mapping[Any, Any], by_fold: Mapping[str, str], path: str, found: Findings
) -> dict[str, Any]:
    """Which key each written key means, with a note when it is written in another case: the meant key's
    (written key, value). Unknown keys and two spellings of one key are errors."""
    matched: dict[str, tuple[str, Any]] = {}
    for written, raw in value.items():
        meant = _meant(written, by_fold)
        if meant is None:
            _unknown_key(found, path, written, list(by_fold.values()))
        elif meant in matched:
            first = matched[meant][0]
            found.errors.append(
                f"{join(path, written)}: the same key as {first!r} (keys match regardless of case); "
                "write it once"
            )
        else:
            matched[meant] = (written, raw)
            if written != meant:
                found.notes.append(
                    f"{join(path, written)}: read as {meant} (keys match regardless of case, as Go's decoder does)"
                )
    return matched


def mapping(
    keys: Sequence[Key],
    build: Callable[..., Any],
    *,
    rule: Callable[[Mapping[str, Any]], str | None] | None = None,
    rule_schema: Mapping[str, Any] | None = None,
) -> Rule:
    """A mapping with only `keys` (in any case); `build(**parsed)` makes the value, `rule` checks keys
    together (`rule_schema` says it in JSON Schema)."""
    by_key = {key.key: key for key in keys}
    by_fold = {fold_key(key): key for key in by_key}
    assert len(by_fold) == len(by_key), "two keys of one mapping differ only in case"

    def check(value: object, path: str, found: Findings) -> Any:
        if not isinstance(value, Mapping):
            return error(found, path, f"must be a mapping with keys {', '.join(by_key)}", value)
        before = len(found.errors)
        matched = _match_keys(value, by_fold, path, found)
        parsed: dict[str, Any] = {}
        for key in keys:
            written, raw = matched.get(key.key, (key.key, None))
            if raw is not None:
                parsed[key.attr] = key.check(raw, join(path, written), found)
            elif key.required:
                found.errors.append(f"{join(path, written)}: is required")
        if rule is not None and (problem := rule(parsed)):
            error(found, path, problem, value)
        return build(**parsed) if len(found.errors) == before else None

    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        # Each key in any case (a `properties` beside them would check an exact key twice, and Helm would
        # say each of its errors twice). A key set to null is absent (YAML `holdTimeout:` with no value).
        "patternProperties": {_key_pattern(key.key): _nullable(key.check.schema) for key in keys},
    }
    together = [has_key(key.key) for key in keys if key.required] + list((rule_schema or {}).get("allOf", []))
    if together:
        schema["allOf"] = together
    return Rule(check, schema | {k: v for k, v in (rule_schema or {}).items() if k != "allOf"})


def single(**parsed: Any) -> Any:
    (value,) = parsed.values()
    return value
