"""The policy file's validator, a small schema walker: each YAML key maps to a check that either returns
the parsed value or appends an error naming its path. Every error of a file is collected before
anything is built, so one load shows the operator everything that is wrong. A key set to null is
treated as absent (YAML `holdTimeout:` with no value means "use the default")."""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast, get_args

from stagger.durations import DURATION_PATTERN, ZERO_DURATION_PATTERN, DurationError, parse_duration
from stagger.objectnames import DNS1123_LABEL_MAX, is_dns1123_label
from stagger.policy.model import (
    ExponentialPacer,
    Hold,
    LinearPacer,
    MaxConcurrent,
    MaxConcurrentPacer,
    Mode,
    NodePolicy,
    PolicyError,
    PolicyFile,
    RateLimit,
    StaggeringPolicy,
    ThrottleConfig,
    compile_grouping,
)
from stagger.selectors import parse_label_selector

__all__ = ["MAX_INTEGER", "Check", "Rule", "got_text", "json_schema", "parse_policy_file"]


Check = Callable[[object, str, list[str]], Any]


@dataclass(frozen=True)
class Rule:
    """A check of one value, and the JSON Schema (draft-07, RE2 patterns: what Helm reads) that says as much
    of it as a schema can. The chart's values.schema.json carries the policy file's (`json_schema`), so that
    `helm install` refuses a policy with a misspelt key or a value of the wrong kind before it reaches a node;
    what only the validator knows (a unique name, a selector's keys, a JSONPath) lockd still says."""

    check: Check
    schema: Mapping[str, Any]

    def __call__(self, value: object, path: str, errors: list[str]) -> Any:
        return self.check(value, path, errors)


def got_text(value: object) -> str:
    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    return short.repr(value)


def _error(errors: list[str], path: str, reason: str, value: object) -> None:
    errors.append(f"{path}: {reason} (got {got_text(value)})")


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


# No count or priority in a policy needs more; past it an integer is a typo. lockd does float arithmetic
# with some of them (a rate limit's `burst`: a burst past 1e308 raised OverflowError when lockd applied the
# policy, at start-up or on a reload), and JSON readers of /status lose precision past 2**53.
MAX_INTEGER = 2**53


def _integer(*, minimum: int | None = None) -> Rule:
    def check(value: object, path: str, errors: list[str]) -> Any:
        # bool is an int subclass in Python, but `burst: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            return _error(errors, path, "must be an integer", value)
        if minimum is not None and value < minimum:
            return _error(errors, path, f"must be at least {minimum}", value)
        if not -MAX_INTEGER <= value <= MAX_INTEGER:
            return _error(errors, path, f"must be at most {MAX_INTEGER} in size", value)
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


def _number(*, above: float, at_most: float | None = None) -> Rule:
    rule = f"must be greater than {above:g}" + (f" and at most {at_most:g}" if at_most is not None else "")

    def check(value: object, path: str, errors: list[str]) -> Any:
        if not _finite(value):
            return _error(errors, path, "must be a number", value)
        assert isinstance(value, int | float)  # for mypy: _finite checked it
        if value <= above or (at_most is not None and value > at_most):
            return _error(errors, path, rule, value)
        return float(value)

    bounds = {"exclusiveMinimum": above} | ({"maximum": at_most} if at_most is not None else {})
    return Rule(check, {"type": "number", **bounds})


def _duration(*, allow_zero: bool = False) -> Rule:
    def check(value: object, path: str, errors: list[str]) -> Any:
        try:
            seconds = parse_duration(value, path=path)
        except DurationError as error:
            errors.append(str(error))
            return None
        if seconds == 0 and not allow_zero:
            return _error(errors, path, "must be longer than 0s", value)
        return seconds

    text: dict[str, Any] = {"type": "string", "pattern": f"^{DURATION_PATTERN}$"}
    if not allow_zero:
        # RE2 (Helm's) has no lookahead: "not all of it zero" is a `not`.
        text["not"] = {"pattern": f"^{ZERO_DURATION_PATTERN}$"}
    number = {"type": "number", "minimum": 0} if allow_zero else {"type": "number", "exclusiveMinimum": 0}
    return Rule(check, {"anyOf": [text, number]})


def _check_boolean(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, bool):
        return _error(errors, path, "must be true or false", value)
    return value


_boolean = Rule(_check_boolean, {"type": "boolean"})


def _one_of(*choices: str) -> Rule:
    def check(value: object, path: str, errors: list[str]) -> Any:
        if value not in choices:
            return _error(errors, path, f"must be one of {', '.join(choices)}", value)
        return value

    return Rule(check, {"enum": list(choices)})


def _check_dns_label(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, str) or not is_dns1123_label(value):
        return _error(
            errors,
            path,
            "must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit",
            value,
        )
    return value


_dns_label = Rule(
    _check_dns_label,
    {"type": "string", "maxLength": DNS1123_LABEL_MAX, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
)


def _check_selector(value: object, path: str, errors: list[str]) -> Any:
    selector, problems = parse_label_selector(value, path=path)
    errors.extend(problems)
    return selector


# A plain map of labels or matchLabels/matchExpressions: its keys are labels, so only lockd reads them.
_selector = Rule(_check_selector, {"type": "object"})


def _check_grouping_expression(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, str) or not value.strip():
        return _error(errors, path, "must be a JSONPath expression like .spec.containers[0].image", value)
    try:
        compile_grouping(value)
    except ValueError as error:
        return _error(errors, path, str(error), value)
    return value


_grouping_expression = Rule(_check_grouping_expression, {"type": "string", "minLength": 1})


def _list_of(item: Rule, *, unique_names: bool = False) -> Rule:
    def check(value: object, path: str, errors: list[str]) -> Any:
        if not isinstance(value, list):
            return _error(errors, path, "must be a list", value)
        parsed = tuple(item(element, f"{path}[{index}]", errors) for index, element in enumerate(value))
        if unique_names:
            first_use: dict[str, int] = {}
            for index, element in enumerate(value):
                name = element.get("name") if isinstance(element, Mapping) else None
                if not isinstance(name, str):
                    continue
                if name in first_use:
                    reason = f"duplicate name; {path}[{first_use[name]}] has it already"
                    _error(errors, f"{path}[{index}].name", reason, name)
                else:
                    first_use[name] = index
        return parsed

    return Rule(check, {"type": "array", "items": item.schema})


@dataclass(frozen=True)
class _Key:
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
    return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}


def _mapping(
    keys: Sequence[_Key],
    build: Callable[..., Any],
    *,
    rule: Callable[[Mapping[str, Any]], str | None] | None = None,
    rule_schema: Mapping[str, Any] | None = None,
) -> Rule:
    """A mapping with only `keys`; `build(**parsed)` makes the value, `rule` checks keys together
    (`rule_schema` says it in JSON Schema)."""
    by_key = {key.key: key for key in keys}

    def check(value: object, path: str, errors: list[str]) -> Any:
        if not isinstance(value, Mapping):
            return _error(errors, path, f"must be a mapping with keys {', '.join(by_key)}", value)
        before = len(errors)
        for unknown in (key for key in value if key not in by_key):
            import difflib  # only for a misspelt key: not on every start-up

            close = difflib.get_close_matches(str(unknown), list(by_key), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(by_key)}"
            errors.append(f"{_join(path, unknown)}: unknown key; {hint}")
        parsed: dict[str, Any] = {}
        for key in keys:
            raw = value.get(key.key)
            if raw is not None:
                parsed[key.attr] = key.check(raw, _join(path, key.key), errors)
            elif key.required:
                errors.append(f"{_join(path, key.key)}: is required")
        if rule is not None and (problem := rule(parsed)):
            _error(errors, path, problem, value)
        return build(**parsed) if len(errors) == before else None

    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        # A key set to null is absent (YAML `holdTimeout:` with no value).
        "properties": {key.key: _nullable(key.check.schema) for key in keys},
    }
    if required := [key.key for key in keys if key.required]:
        schema["required"] = required
    return Rule(check, schema | dict(rule_schema or {}))


def _single(**parsed: Any) -> Any:
    (value,) = parsed.values()
    return value


def _at_least_one(parsed: Mapping[str, Any]) -> str | None:
    return None if parsed else "needs perCore, value or both"


def _exactly_one(parsed: Mapping[str, Any]) -> str | None:
    return None if len(parsed) == 1 else "must have exactly one of exponential, linear or maxConcurrent"


def _load_limit() -> Rule:
    return _mapping([_Key("maxLoad", "max_load", _number(above=0, at_most=100), required=True)], _single)


_THROTTLE = _mapping(
    [
        _Key("cpu", "cpu_max_load", _load_limit()),
        _Key("io", "io_max_load", _load_limit()),
        _Key(
            "maxConcurrent",
            "max_concurrent",
            _mapping(
                [
                    _Key("perCore", "per_core", _number(above=0)),
                    _Key("value", "value", _integer(minimum=1)),
                ],
                MaxConcurrent,
                rule=_at_least_one,
                rule_schema={"minProperties": 1},
            ),
        ),
        _Key(
            "rateLimit",
            "rate_limit",
            _mapping(
                [
                    _Key("burst", "burst", _integer(minimum=1), required=True),
                    _Key("fillFactor", "fill_factor", _duration(), required=True),
                ],
                RateLimit,
            ),
        ),
    ],
    ThrottleConfig,
)


_NODE_POLICY = _mapping(
    [
        _Key("name", "name", _dns_label, required=True),
        _Key("nodeSelector", "node_selector", _selector),
        _Key("priority", "priority", _integer()),
        _Key("throttleConfig", "throttle", _THROTTLE),
        _Key("holdTimeout", "hold_timeout", _duration()),
        _Key("minHold", "min_hold", _duration(allow_zero=True)),
        _Key("countAllStarting", "count_all_starting", _boolean),
        _Key("excludeNamespaces", "exclude_namespaces", _list_of(_dns_label)),
        _Key("waitForDaemonSets", "wait_for_daemonsets", _boolean),
        _Key("maxWait", "max_wait", _duration()),
        _Key("unreachableWait", "unreachable_wait", _duration()),
        _Key("maxQueue", "max_queue", _integer(minimum=1)),
    ],
    NodePolicy,
)


_PACER = _mapping(
    [
        _Key(
            "exponential",
            "exponential",
            _mapping(
                [
                    _Key("minInitial", "min_initial", _integer(minimum=1), required=True),
                    _Key("multiplier", "multiplier", _number(above=1), required=True),
                    _Key("maxStagger", "max_stagger", _integer(minimum=1), required=True),
                ],
                ExponentialPacer,
            ),
        ),
        _Key(
            "linear",
            "linear",
            _mapping(
                [
                    _Key("step", "step", _integer(minimum=1), required=True),
                    _Key("maxStagger", "max_stagger", _integer(minimum=1), required=True),
                ],
                LinearPacer,
            ),
        ),
        _Key(
            "maxConcurrent",
            "max_concurrent",
            _mapping([_Key("value", "value", _integer(minimum=1), required=True)], MaxConcurrentPacer),
        ),
    ],
    _single,
    rule=_exactly_one,
    rule_schema={"minProperties": 1, "maxProperties": 1},
)


_STAGGERING_POLICY = _mapping(
    [
        _Key("name", "name", _dns_label, required=True),
        _Key("labelSelector", "label_selector", _selector, required=True),
        _Key("bypassLabelSelector", "bypass_label_selector", _selector),
        _Key("groupingExpression", "grouping_expression", _grouping_expression),
        _Key("maxBlockedDuration", "max_blocked_duration", _duration()),
        _Key("startTimeout", "start_timeout", _duration()),
        _Key("mode", "mode", _one_of(*get_args(Mode))),
        _Key("hold", "hold", _one_of(*get_args(Hold))),
        _Key("pacer", "pacer", _PACER, required=True),
    ],
    StaggeringPolicy,
)


_POLICY_FILE = _mapping(
    [
        _Key("staggeringPolicies", "staggering_policies", _list_of(_STAGGERING_POLICY, unique_names=True)),
        _Key("nodePolicies", "node_policies", _list_of(_NODE_POLICY, unique_names=True)),
    ],
    PolicyFile,
)


def json_schema() -> dict[str, Any]:
    """The policy file as JSON Schema (draft-07): the chart's values.schema.json holds it as `policies`."""
    return {**_POLICY_FILE.schema, "type": ["object", "null"]}


def parse_policy_file(data: object, *, source: str = "<policy>") -> PolicyFile:
    """Validate and build a policy file from its YAML data; raises PolicyError listing every problem."""
    if data is None:
        return PolicyFile()
    if not isinstance(data, Mapping):
        raise PolicyError(
            [
                f"{source}: must be a mapping with staggeringPolicies and/or nodePolicies (got {got_text(data)})"
            ],
            source=source,
        )
    errors: list[str] = []
    policy_file = _POLICY_FILE(data, "", errors)
    if errors:
        raise PolicyError(errors, source=source)
    return cast(PolicyFile, policy_file)
