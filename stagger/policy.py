"""The policy file: staggering policies (cluster-wide groups) and node policies (per-node throttles).

The file is validated by a small schema walker: each YAML key maps to a check that either returns
the parsed value or appends an error naming its path. Every error of a file is collected before
anything is built, so one load shows the operator everything that is wrong. A key set to null is
treated as absent (YAML `holdTimeout:` with no value means "use the default").
"""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

import yaml

from stagger.durations import DurationError, parse_duration
from stagger.selectors import LabelSelector, parse_label_selector

if TYPE_CHECKING:
    # Imported when a grouping is compiled: lockd reads policy files too, and most never need JSONPath
    # (about 1 MB of parser once imported).
    from jsonpath_ng import JSONPath

__all__ = [
    "DEFAULT_NODE_POLICY",
    "ExponentialPacer",
    "Hold",
    "LinearPacer",
    "MaxConcurrent",
    "MaxConcurrentPacer",
    "Mode",
    "NodePolicy",
    "Pacer",
    "PolicyError",
    "PolicyFile",
    "RateLimit",
    "StaggeringPolicy",
    "ThrottleConfig",
    "compile_grouping",
    "describe_node_policy",
    "load_policy_file",
    "parse_policy_file",
    "parse_policy_text",
    "read_policy_text",
    "select_node_policy",
]

# ---------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class MaxConcurrent:
    """How many pods may be starting at once on a node: absolute `value`, else `per_core` x cores."""

    per_core: float | None = None
    value: int | None = None

    def __post_init__(self) -> None:
        if self.per_core is None and self.value is None:
            raise ValueError("MaxConcurrent needs per_core, value or both")

    def limit(self, *, cores: int) -> int:
        if self.value is not None:
            return self.value
        assert self.per_core is not None  # guaranteed by __post_init__
        # Rounded to 9 decimals before the ceiling, so perCore 0.1 on 30 cores is 3, not
        # ceil(3.0000000000000004): a float product is off by far less than 1e-9 for any written perCore
        # and core count. (Decimal did this exactly, at ~0.35 MiB of every node's lockd for one line.)
        return max(1, math.ceil(round(self.per_core * max(cores, 1), 9)))


@dataclass(frozen=True)
class RateLimit:
    """Token bucket: up to `burst` grants at once, one new token every `fill_factor` seconds."""

    burst: int
    fill_factor: float


@dataclass(frozen=True)
class ThrottleConfig:
    cpu_max_load: float | None = None  # percent of all CPUs busy
    io_max_load: float | None = None  # percent IO pressure
    max_concurrent: MaxConcurrent | None = None
    rate_limit: RateLimit | None = None


@dataclass(frozen=True)
class NodePolicy:
    name: str
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    priority: int = 0
    throttle: ThrottleConfig = ThrottleConfig()
    hold_timeout: float = 120.0
    min_hold: float = 0.0
    count_all_starting: bool = False
    exclude_namespaces: tuple[str, ...] = ("kube-system",)
    wait_for_daemonsets: bool = False
    max_wait: float = 600.0
    # How many pods may wait in lockd's queue on this node; None: lockd's --max-queue.
    max_queue: int | None = None


@dataclass(frozen=True)
class ExponentialPacer:
    """A group may have max(min_initial, ceil(ready x multiplier)) pods started; no limit past max_stagger."""

    min_initial: int
    multiplier: float
    max_stagger: int


@dataclass(frozen=True)
class LinearPacer:
    """At most `step` pods of the group starting at once until `max_stagger` are Ready."""

    step: int
    max_stagger: int


@dataclass(frozen=True)
class MaxConcurrentPacer:
    """At most `value` pods of the group starting at once, always (however many are Ready)."""

    value: int


Pacer = ExponentialPacer | LinearPacer | MaxConcurrentPacer
Mode = Literal["lock", "evict", "gate"]
Hold = Literal["nodeSelector", "stub"]


def compile_grouping(expression: str) -> JSONPath:
    """Compile a grouping expression; `.spec.x` is accepted as shorthand for `$.spec.x`.

    Raises ValueError with the parser's reason when the expression is not valid JSONPath.
    """
    from jsonpath_ng.exceptions import JSONPathError
    from jsonpath_ng.ext.parser import parse as parse_jsonpath

    text = expression.strip()
    if text.startswith((".", "[")):
        text = "$" + text
    try:
        return parse_jsonpath(text)
    except JSONPathError as error:
        raise ValueError(f"not a valid JSONPath expression: {str(error).strip()}") from error


def _key_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class StaggeringPolicy:
    name: str
    label_selector: LabelSelector
    pacer: Pacer
    bypass_label_selector: LabelSelector | None = None
    grouping_expression: str | None = None
    grouping: JSONPath | None = field(default=None, compare=False, repr=False)
    max_blocked_duration: float = 600.0
    start_timeout: float = 300.0
    mode: Mode = "lock"
    hold: Hold = "nodeSelector"

    def __post_init__(self) -> None:
        # Compiled here so a policy built in code groups the same way as one loaded from YAML.
        if self.grouping is None and self.grouping_expression is not None:
            object.__setattr__(self, "grouping", compile_grouping(self.grouping_expression))

    def grouping_key(self, pod: Mapping[str, Any]) -> str:
        """The values the grouping expression finds in `pod`, joined by ","; "" when none or no expression."""
        if self.grouping is None:
            return ""
        return ",".join(_key_text(match.value) for match in self.grouping.find(pod))


@dataclass(frozen=True)
class PolicyFile:
    staggering_policies: tuple[StaggeringPolicy, ...] = ()
    node_policies: tuple[NodePolicy, ...] = ()


class PolicyError(ValueError):
    """A policy file that cannot be used; `errors` lists every problem, each naming its path."""

    def __init__(self, errors: Sequence[str], *, source: str = "<policy>") -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        self.source = source
        super().__init__("\n".join(self.errors))


DEFAULT_NODE_POLICY = NodePolicy(
    name="builtin-default",
    throttle=ThrottleConfig(cpu_max_load=90.0, max_concurrent=MaxConcurrent(per_core=0.5)),
    hold_timeout=120.0,
)


def select_node_policy(policies: Sequence[NodePolicy], node_labels: Mapping[str, str]) -> NodePolicy | None:
    """The highest-priority policy whose node selector matches; on a tie the first in the file."""
    best: NodePolicy | None = None
    for policy in policies:
        if policy.node_selector.matches(node_labels) and (best is None or policy.priority > best.priority):
            best = policy
    return best


def describe_node_policy(policy: NodePolicy, *, cores: int) -> dict[str, Any]:
    """The effective limits of `policy` on a node with `cores` CPUs, as JSON for /status."""
    throttle = policy.throttle
    rate = throttle.rate_limit
    return {
        "name": policy.name,
        "priority": policy.priority,
        "maxConcurrent": throttle.max_concurrent.limit(cores=cores) if throttle.max_concurrent else None,
        "cpuMaxLoad": throttle.cpu_max_load,
        "ioMaxLoad": throttle.io_max_load,
        "rateLimit": {"burst": rate.burst, "fillFactorSeconds": rate.fill_factor} if rate else None,
        "holdTimeoutSeconds": policy.hold_timeout,
        "minHoldSeconds": policy.min_hold,
        "maxWaitSeconds": policy.max_wait,
        "countAllStarting": policy.count_all_starting,
        "waitForDaemonSets": policy.wait_for_daemonsets,
        "excludeNamespaces": list(policy.exclude_namespaces),
        "maxQueue": policy.max_queue,
    }


# ---------------------------------------------------------------------------------------------
# The schema walker
#
# A check takes (raw value, path, errors) and returns the parsed value; when the value is bad it
# appends "<path>: <reason> (got <value>)" to errors instead, and what it returns is ignored.

Check = Callable[[object, str, list[str]], Any]

_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _got(value: object) -> str:
    short = reprlib.Repr()
    short.maxstring = short.maxother = 80
    return short.repr(value)


def _error(errors: list[str], path: str, reason: str, value: object) -> None:
    errors.append(f"{path}: {reason} (got {_got(value)})")


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


# No count or priority in a policy needs more; past it an integer is a typo. lockd does float arithmetic
# with some of them (a rate limit's `burst`: a burst past 1e308 raised OverflowError when lockd applied the
# policy, at start-up or on a reload), and JSON readers of /status lose precision past 2**53.
MAX_INTEGER = 2**53


def _integer(*, minimum: int | None = None) -> Check:
    def check(value: object, path: str, errors: list[str]) -> Any:
        # bool is an int subclass in Python, but `burst: true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            return _error(errors, path, "must be an integer", value)
        if minimum is not None and value < minimum:
            return _error(errors, path, f"must be at least {minimum}", value)
        if not -MAX_INTEGER <= value <= MAX_INTEGER:
            return _error(errors, path, f"must be at most {MAX_INTEGER} in size", value)
        return value

    return check


def _finite(value: object) -> bool:
    """A number that is not NaN or infinite. An int past the largest float counts as infinite (math.isfinite
    raised OverflowError on it, which escaped the validation)."""
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        return False


def _number(*, above: float, at_most: float | None = None) -> Check:
    rule = f"must be greater than {above:g}" + (f" and at most {at_most:g}" if at_most is not None else "")

    def check(value: object, path: str, errors: list[str]) -> Any:
        if not _finite(value):
            return _error(errors, path, "must be a number", value)
        assert isinstance(value, int | float)  # for mypy: _finite checked it
        if value <= above or (at_most is not None and value > at_most):
            return _error(errors, path, rule, value)
        return float(value)

    return check


def _duration(*, allow_zero: bool = False) -> Check:
    def check(value: object, path: str, errors: list[str]) -> Any:
        try:
            seconds = parse_duration(value, path=path)
        except DurationError as error:
            errors.append(str(error))
            return None
        if seconds == 0 and not allow_zero:
            return _error(errors, path, "must be longer than 0s", value)
        return seconds

    return check


def _boolean(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, bool):
        return _error(errors, path, "must be true or false", value)
    return value


def _one_of(*choices: str) -> Check:
    def check(value: object, path: str, errors: list[str]) -> Any:
        if value not in choices:
            return _error(errors, path, f"must be one of {', '.join(choices)}", value)
        return value

    return check


def _dns_label(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
        return _error(
            errors,
            path,
            "must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit",
            value,
        )
    return value


def _selector(value: object, path: str, errors: list[str]) -> Any:
    selector, problems = parse_label_selector(value, path=path)
    errors.extend(problems)
    return selector


def _grouping_expression(value: object, path: str, errors: list[str]) -> Any:
    if not isinstance(value, str) or not value.strip():
        return _error(errors, path, "must be a JSONPath expression like .spec.containers[0].image", value)
    try:
        compile_grouping(value)
    except ValueError as error:
        return _error(errors, path, str(error), value)
    return value


def _list_of(item: Check, *, unique_names: bool = False) -> Check:
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

    return check


@dataclass(frozen=True)
class _Key:
    """One YAML key of a mapping: where its parsed value goes (`attr`) and how it is checked."""

    key: str
    attr: str
    check: Check
    required: bool = False


def _mapping(
    keys: Sequence[_Key],
    build: Callable[..., Any],
    *,
    rule: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> Check:
    """A mapping with only `keys`; `build(**parsed)` makes the value, `rule` checks keys together."""
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

    return check


def _single(**parsed: Any) -> Any:
    (value,) = parsed.values()
    return value


def _at_least_one(parsed: Mapping[str, Any]) -> str | None:
    return None if parsed else "needs perCore, value or both"


def _exactly_one(parsed: Mapping[str, Any]) -> str | None:
    return None if len(parsed) == 1 else "must have exactly one of exponential, linear or maxConcurrent"


def _load_limit() -> Check:
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


def parse_policy_file(data: object, *, source: str = "<policy>") -> PolicyFile:
    """Validate and build a policy file from its YAML data; raises PolicyError listing every problem."""
    if data is None:
        return PolicyFile()
    if not isinstance(data, Mapping):
        raise PolicyError(
            [f"{source}: must be a mapping with staggeringPolicies and/or nodePolicies (got {_got(data)})"],
            source=source,
        )
    errors: list[str] = []
    policy_file = _POLICY_FILE(data, "", errors)
    if errors:
        raise PolicyError(errors, source=source)
    return cast(PolicyFile, policy_file)


# A policy file is a few kilobytes; a large one is a mistake or an attack on lockd's memory (every node
# parses it), so it is refused before it is parsed.
MAX_POLICY_BYTES = 256 * 1024


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML that rejects a key written twice in one mapping (plain YAML keeps the last silently) and
    aliases (`*name`): a policy file never needs them, and a few nested ones expand to gigabytes."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's constructors raise plain ValueError on some scalars (`2001-13-45` read as a timestamp, an
        # int of more than 4300 digits, `!!int 0x`), which escaped as no PolicyError; here they become a
        # YAML error at the scalar's line and column like any other.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as error:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_got(node.value)}: {error}", node.start_mark
            ) from error

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a policy file", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_policy_text(path: str | os.PathLike[str]) -> str:
    """The file's text; raises PolicyError naming the file when it cannot be read or is not UTF-8."""
    source = os.fspath(path)
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            raise PolicyError(
                [f"{source}: the policy file is larger than {MAX_POLICY_BYTES // 1024} KiB; refused"],
                source=source,
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise PolicyError([f"{source}: cannot read the policy file: {reason}"], source=source) from error


def load_policy_file(path: str | os.PathLike[str]) -> PolicyFile:
    """Read, parse and validate a policy file; raises PolicyError naming the file (and line for YAML)."""
    return parse_policy_text(read_policy_text(path), source=os.fspath(path))


def parse_policy_text(text: str, *, source: str = "<policy>", allow_empty: bool = True) -> PolicyFile:
    """Parse and validate a policy file's YAML text; raises PolicyError naming the source (and line).

    With `allow_empty=False` a file with no document (empty, or only comments) is an error too: a reload
    must not turn a file emptied by mistake into "no policies"."""
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyError(
            [f"{source}: the policy file is larger than {MAX_POLICY_BYTES // 1024} KiB; refused"],
            source=source,
        )
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except RecursionError:
        # PyYAML composes nested collections recursively: a file of "[[[[..." ran out of stack, and the
        # RecursionError escaped as no PolicyError.
        raise PolicyError([f"{source}: invalid YAML: nested too deeply"], source=source) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = getattr(error, "problem", None) or str(error)
        if context := getattr(error, "context", None):
            problem = f"{problem} ({context})"
        raise PolicyError([f"{where}: invalid YAML: {problem}"], source=source) from error
    if data is None and not allow_empty:
        raise PolicyError([f"{source}: the policy file is empty"], source=source)
    return parse_policy_file(data, source=source)
