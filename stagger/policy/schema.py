"""The policy file's own format, as a table for the schema walker (`stagger.policy.rules`): staggering
policies and node policies, their keys, checks and defaults; the chart's JSON Schema made from that table;
and one document of a file read into a `PolicyFile`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args
from urllib.parse import urlsplit

from stagger.objectnames import is_dns1123_label, is_dns1123_subdomain
from stagger.policy.model import (
    NODE_VARIABLES,
    DaemonSetFilter,
    Dependency,
    DependencyKind,
    ExponentialPacer,
    Hold,
    LinearPacer,
    LoadAvg,
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
    expand_target,
    target_variables,
)
from stagger.policy.rules import (
    DNS_LABEL_SPELLED,
    Findings,
    Key,
    Rule,
    boolean,
    dns_label,
    duration,
    error,
    got_text,
    has_key,
    integer,
    list_of,
    mapping,
    number,
    one_of,
    single,
)
from stagger.selectors import label_key_problem, label_value_problem, parse_label_selector

__all__ = [
    "NOT_A_POLICY_MAPPING",
    "json_schema",
    "parse_policy_file",
    "read_policy_mapping",
    "throttle_config",
]


def _check_selector(value: object, path: str, found: Findings) -> Any:
    selector, problems = parse_label_selector(value, path=path)
    found.errors.extend(problems)
    return selector


# A plain map of labels or matchLabels/matchExpressions: its keys are labels (case matters in a label), and
# the other form is Kubernetes's LabelSelector, which the API server reads exactly: only lockd reads them.
_selector = Rule(_check_selector, {"type": "object"})


def _check_grouping_expression(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, str) or not value.strip():
        return error(found, path, "must be a JSONPath expression like .spec.containers[0].image", value)
    try:
        compile_grouping(value)
    except ValueError as problem:
        return error(found, path, str(problem), value)
    return value


_grouping_expression = Rule(_check_grouping_expression, {"type": "string", "minLength": 1})


def _at_least_one(parsed: Mapping[str, Any]) -> str | None:
    return None if parsed else "needs perCore, value or both"


def _exactly_one(parsed: Mapping[str, Any]) -> str | None:
    return None if len(parsed) == 1 else "must have exactly one of exponential, linear or maxConcurrent"


def _load(*, max_load: float, increment_by: float = 0.0) -> tuple[float, float]:
    return max_load, increment_by


def _load_limit(*, text: bool) -> Rule:
    """`cpu`, `io` or `memory`: percent busy, and percent a grant is assumed to add until the next sample."""
    return mapping(
        [
            Key("maxLoad", "max_load", number(above=0, at_most=100, text=text), required=True),
            Key("incrementBy", "increment_by", number(at_least=0, at_most=100, text=text)),
        ],
        _load,
    )


def _nested(key: str, attr: str, keys: Sequence[Key], build: Callable[..., Any], **rules: Any) -> Key:
    """A key whose value is a mapping of its own `keys` (a pacer, a throttle) made by `build`; `rules` as
    `mapping` takes them."""
    return Key(key, attr, mapping(keys, build, **rules))


def _throttle(
    *,
    cpu: tuple[float, float] | None = None,
    io: tuple[float, float] | None = None,
    memory: tuple[float, float] | None = None,
    load_avg: LoadAvg | None = None,
    max_concurrent: MaxConcurrent | None = None,
    rate_limit: RateLimit | None = None,
) -> ThrottleConfig:
    return ThrottleConfig(
        cpu_max_load=cpu[0] if cpu else None,
        cpu_increment_by=cpu[1] if cpu else 0.0,
        io_max_load=io[0] if io else None,
        io_increment_by=io[1] if io else 0.0,
        memory_max_load=memory[0] if memory else None,
        memory_increment_by=memory[1] if memory else 0.0,
        load_avg=load_avg,
        max_concurrent=max_concurrent,
        rate_limit=rate_limit,
    )


def throttle_config(*, text: bool = False) -> Rule:
    """`throttleConfig`: pod-pacemaker's five throttles, and in stagger's own file `memory`; with `text`
    (pod-pacemaker's CRD), no `memory`, and its numbers may be written as strings where that CRD takes
    strings (maxLoad, incrementBy, maxConcurrent.perCore)."""
    stagger_only = [] if text else [Key("memory", "memory", _load_limit(text=text))]
    return mapping(
        [
            Key("cpu", "cpu", _load_limit(text=text)),
            Key("io", "io", _load_limit(text=text)),
            *stagger_only,
            _nested(
                "loadAvg",
                "load_avg",
                [
                    Key("maxLoad", "max_load", number(above=0, text=text), required=True),
                    Key("perCore", "per_core", boolean),
                    Key("incrementBy", "increment_by", number(at_least=0, text=text)),
                ],
                LoadAvg,
            ),
            _nested(
                "maxConcurrent",
                "max_concurrent",
                [
                    Key("perCore", "per_core", number(above=0, text=text)),
                    Key("value", "value", integer(minimum=1)),
                ],
                MaxConcurrent,
                rule=_at_least_one,
                rule_schema={"minProperties": 1},
            ),
            _nested(
                "rateLimit",
                "rate_limit",
                [
                    Key("burst", "burst", integer(minimum=1), required=True),
                    Key("fillFactor", "fill_seconds", duration(), required=True),
                ],
                RateLimit,
            ),
        ],
        _throttle,
    )


_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9])?")


def _host_port_problem(text: str) -> str | None:
    """Why `text` is not HOST:PORT with a port 1..65535 (an IPv6 host in brackets), or None."""
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        return "must be HOST:PORT like db.example:5432"
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        return "must end in a port from 1 to 65535"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "must have an IPv6 address between the brackets"
        return None
    if ":" in host:
        return "must write an IPv6 host in brackets, like [fd00::1]:5432"
    return None if len(host) <= 253 and _HOSTNAME.fullmatch(host) else "must have a host name or an address"


# What `$(NODE_NAME)` and `$(NODE_IP)` stand for while a target is checked at load: each node's lockd
# expands them with its own (lockd.dependencies); a target that is no URL or address with these is refused
# here, not on every node. Never connected to.
_PLACEHOLDERS: Mapping[str, str] = {"NODE_NAME": "node-name.example", "NODE_IP": "192.0.2.1"}


def _unknown_variables(value: str, path: str, found: Findings, *, shown: str) -> bool:
    """Adds an error naming each `$(VAR)` of `value` that is not a node variable; True when there was one."""
    unknown = [name for name in target_variables(value) if name not in NODE_VARIABLES]
    for name in dict.fromkeys(unknown):
        known = " and ".join(f"$({each})" for each in NODE_VARIABLES)
        error(found, path, f"has an unknown variable $({name}); a target may use {known}", shown)
    return bool(unknown)


def _check_tcp(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, str):
        return error(found, path, "must be HOST:PORT like db.example:5432", value)
    if _unknown_variables(value, path, found, shown=value):
        return None
    if problem := _host_port_problem(expand_target(value, kind="tcp", variables=_PLACEHOLDERS)):
        return error(found, path, problem, value)
    return value


def _redacted(url: str) -> str:
    """`url` with any user and password replaced: an error is logged, shown in /status's lastReloadError and
    printed by check-policy, and must not carry a credential."""
    return re.sub(r"//[^/@]*@", "//***@", url, count=1)


def _check_http(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, str) or any(c.isspace() or not c.isprintable() for c in value):
        shown = _redacted(value) if isinstance(value, str) else value
        return error(found, path, "must be a URL like http://db.example:8080/ready", shown)
    if _unknown_variables(value, path, found, shown=_redacted(value)):
        return None
    url = expand_target(value, kind="http", variables=_PLACEHOLDERS)
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port past 65535 or not a number
    except ValueError:
        return error(found, path, "must be a URL with a port from 1 to 65535", _redacted(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return error(found, path, "must be an http or https URL with a host", _redacted(value))
    if port == 0:
        return error(found, path, "must be a URL with a port from 1 to 65535", _redacted(value))
    return value


def _dependency(
    *,
    http: str | None = None,
    tcp: str | None = None,
    timeout: float = 2.0,
    interval: float | None = None,
    fail_interval: float | None = None,
) -> Dependency:
    kind: DependencyKind = "http" if http is not None else "tcp"
    target = http if http is not None else tcp
    assert target is not None  # _one_target checked it
    return Dependency(
        kind=kind, target=target, timeout=timeout, interval=interval, fail_interval=fail_interval
    )


def _one_target(parsed: Mapping[str, Any]) -> str | None:
    return None if ("http" in parsed) != ("tcp" in parsed) else "must have exactly one of http or tcp"


_DEPENDENCY = mapping(
    [
        Key(
            "http",
            "http",
            Rule(_check_http, {"type": "string", "pattern": r"(?i)^https?://[^/?#\s]+([/?#]\S*)?$"}),
        ),
        Key(
            "tcp",
            "tcp",
            Rule(_check_tcp, {"type": "string", "pattern": r"^([^:\[\]\s]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$"}),
        ),
        Key("timeout", "timeout", duration()),
        Key("interval", "interval", duration()),
        Key("failInterval", "fail_interval", duration()),
    ],
    _dependency,
    rule=_one_target,
    rule_schema={"oneOf": [has_key("http"), has_key("tcp")]},
)


def _daemonset_entry_problem(entry: str) -> str | None:
    """Why `entry` names no DaemonSet (`name`, `namespace/name`) and no label (`label:value`), or None."""
    key, colon, value = entry.partition(":")
    if colon:
        return label_key_problem(key) or label_value_problem(value)
    namespace, slash, name = entry.rpartition("/")
    if slash and not is_dns1123_label(namespace):
        return f"must have a namespace of {DNS_LABEL_SPELLED} before the /"
    if not is_dns1123_subdomain(name):
        return "must be a DaemonSet's name (a lowercase DNS subdomain), namespace/name or label:value"
    return None


def _check_daemonset_entry(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, str):
        return error(found, path, "must be a DaemonSet's name, namespace/name or label:value", value)
    if problem := _daemonset_entry_problem(value):
        return error(found, path, problem, value)
    return value


_DAEMONSET_ENTRY = Rule(_check_daemonset_entry, {"type": "string", "minLength": 1})

# waitForDaemonSets' choice of DaemonSets: k8s-health's --hostNet, --namespace, --in and --ex.
_DAEMONSETS = mapping(
    [
        Key("hostNetwork", "host_network", boolean),
        Key("namespaces", "namespaces", list_of(dns_label)),
        Key("include", "include", list_of(_DAEMONSET_ENTRY)),
        Key("exclude", "exclude", list_of(_DAEMONSET_ENTRY)),
    ],
    DaemonSetFilter,
)


_NODE_POLICY = mapping(
    [
        Key("name", "name", dns_label, required=True),
        Key("nodeSelector", "node_selector", _selector),
        Key("priority", "priority", integer()),
        Key("throttleConfig", "throttle", throttle_config()),
        Key("holdTimeout", "hold_timeout", duration()),
        Key("minHold", "min_hold", duration(allow_zero=True)),
        Key("countAllStarting", "count_all_starting", boolean),
        Key("excludeNamespaces", "exclude_namespaces", list_of(dns_label)),
        Key("waitForDaemonSets", "wait_for_daemonsets", boolean),
        Key("daemonSets", "daemonsets", _DAEMONSETS),
        Key("countDaemonSets", "count_daemonsets", boolean),
        Key("maxWait", "max_wait", duration()),
        Key("unreachableWait", "unreachable_wait", duration()),
        Key("maxQueue", "max_queue", integer(minimum=1)),
        Key("dependencies", "dependencies", list_of(_DEPENDENCY)),
        Key("probeReadiness", "probe_readiness", boolean),
        Key("probePeriod", "probe_period", duration()),
    ],
    NodePolicy,
)


_PACER = mapping(
    [
        _nested(
            "exponential",
            "exponential",
            [
                Key("minInitial", "min_initial", integer(minimum=1), required=True),
                Key("multiplier", "multiplier", number(above=1), required=True),
                Key("maxStagger", "max_stagger", integer(minimum=1), required=True),
            ],
            ExponentialPacer,
        ),
        _nested(
            "linear",
            "linear",
            [
                Key("step", "step", integer(minimum=1), required=True),
                Key("maxStagger", "max_stagger", integer(minimum=1), required=True),
            ],
            LinearPacer,
        ),
        _nested(
            "maxConcurrent",
            "max_concurrent",
            [Key("value", "value", integer(minimum=1), required=True)],
            MaxConcurrentPacer,
        ),
    ],
    single,
    rule=_exactly_one,
    rule_schema={"minProperties": 1, "maxProperties": 1},
)


_STAGGERING_POLICY = mapping(
    [
        Key("name", "name", dns_label, required=True),
        Key("labelSelector", "label_selector", _selector, required=True),
        Key("bypassLabelSelector", "bypass_label_selector", _selector),
        Key("groupingExpression", "grouping_expression", _grouping_expression),
        Key("maxBlockedDuration", "max_blocked_duration", duration(allow_never=True)),
        Key("startTimeout", "start_timeout", duration()),
        Key("mode", "mode", one_of(*get_args(Mode))),
        Key("hold", "hold", one_of(*get_args(Hold))),
        Key("pacer", "pacer", _PACER, required=True),
    ],
    StaggeringPolicy,
)


_POLICY_FILE = mapping(
    [
        Key("staggeringPolicies", "staggering_policies", list_of(_STAGGERING_POLICY, unique_names=True)),
        Key("nodePolicies", "node_policies", list_of(_NODE_POLICY, unique_names=True)),
    ],
    PolicyFile,
)

NOT_A_POLICY_MAPPING = "must be a mapping with staggeringPolicies and/or nodePolicies"


def json_schema() -> dict[str, Any]:
    """The policy file as JSON Schema (draft-07): the chart's values.schema.json holds it as `policies`."""
    return {**_POLICY_FILE.schema, "type": ["object", "null"]}


def read_policy_mapping(data: Mapping[Any, Any], *, path: str, found: Findings) -> PolicyFile | None:
    """One document of stagger's own format, its errors and notes added to `found` (paths under `path`);
    None when it has errors. Its notes are in `found`, not in the PolicyFile."""
    parsed: PolicyFile | None = _POLICY_FILE(data, path, found)
    return parsed


def parse_policy_file(data: object, *, source: str = "<policy>") -> PolicyFile:
    """Validate and build a policy file from its YAML data (one document of stagger's own format); raises
    PolicyError listing every problem."""
    if data is None:
        return PolicyFile()
    if not isinstance(data, Mapping):
        raise PolicyError([f"{source}: {NOT_A_POLICY_MAPPING} (got {got_text(data)})"], source=source)
    found = Findings()
    policy_file = read_policy_mapping(data, path="", found=found)
    if found.errors or policy_file is None:
        raise PolicyError(found.errors, source=source)
    return PolicyFile(policy_file.staggering_policies, policy_file.node_policies, notes=tuple(found.notes))
