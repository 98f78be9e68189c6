"""Writing a policy file back: the YAML document a `PolicyFile` stands for, every key spelt as the policy
file spells it and every value at its default left out, so that loading the document gives the same policy
file again (`parse_policy_file(policy_document(x)) == x`, tests/policy/test_render.py). `kubectl stagger
convert` prints what it converted through this; anything that builds policies in code can show them the
same way.

The defaults are read from the model's own dataclass fields, not repeated here, so a default changed in
the model cannot make a written file mean something else."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from stagger.durations import format_duration, format_duration_or_never
from stagger.policy.model import (
    DaemonSetFilter,
    Dependency,
    ExponentialPacer,
    LinearPacer,
    LoadAvg,
    MaxConcurrentPacer,
    NodePolicy,
    Pacer,
    PolicyFile,
    StaggeringPolicy,
    ThrottleConfig,
)
from stagger.selectors import LabelSelector

__all__ = ["policy_document", "selector_document"]

logger = logging.getLogger(__name__)

# A float that is a whole number is written as one (`maxLoad: 80`, not `80.0`); past 2**53 not every whole
# number is a float, so larger ones stay floats and read back exactly.
_EXACT_INTEGERS = 2**53

# A plain `{key: value}` map with one of these keys would be read as the other form of a selector.
_SELECTOR_KEYS = frozenset({"matchLabels", "matchExpressions"})


def _default(cls: type, attr: str) -> Any:
    """The model's default for `cls.attr` (dataclasses.MISSING when it has none)."""
    for each in dataclasses.fields(cls):
        if each.name == attr:
            if each.default_factory is not dataclasses.MISSING:
                return each.default_factory()
            return each.default
    raise AttributeError(f"{cls.__name__} has no field {attr!r}")


def _number(value: float) -> int | float:
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_INTEGERS:
        return int(value)
    return value


def selector_document(selector: LabelSelector) -> dict[str, Any]:
    """A plain `{key: value}` map when every term is one `In` value on its own key, else matchExpressions
    (in the selector's order, which is the order the loader keeps)."""
    terms = selector.requirements
    keys = [term.key for term in terms]
    plain = all(term.operator == "In" and len(term.values) == 1 for term in terms)
    if plain and len(set(keys)) == len(keys) and not _SELECTOR_KEYS & set(keys):
        return {term.key: term.values[0] for term in terms}
    expressions: list[dict[str, Any]] = []
    for term in terms:
        expression: dict[str, Any] = {"key": term.key, "operator": term.operator}
        if term.values:
            expression["values"] = list(term.values)
        expressions.append(expression)
    return {"matchExpressions": expressions}


def _put(document: dict[str, Any], key: str, value: Any, *, default: Any, shown: Any = None) -> None:
    """`document[key] = shown` (or `value`), unless `value` is the default."""
    if value != default:
        document[key] = value if shown is None else shown


def _pacer(pacer: Pacer) -> dict[str, Any]:
    if isinstance(pacer, ExponentialPacer):
        return {
            "exponential": {
                "minInitial": pacer.min_initial,
                "multiplier": _number(pacer.multiplier),
                "maxStagger": pacer.max_stagger,
            }
        }
    if isinstance(pacer, LinearPacer):
        return {"linear": {"step": pacer.step, "maxStagger": pacer.max_stagger}}
    assert isinstance(pacer, MaxConcurrentPacer)
    return {"maxConcurrent": {"value": pacer.value}}


def _staggering(policy: StaggeringPolicy) -> dict[str, Any]:
    cls = StaggeringPolicy
    document: dict[str, Any] = {
        "name": policy.name,
        "labelSelector": selector_document(policy.label_selector),
    }
    if policy.bypass_label_selector is not None:
        # An empty bypass selector is not no bypass selector: it bypasses every pod.
        document["bypassLabelSelector"] = selector_document(policy.bypass_label_selector)
    _put(document, "groupingExpression", policy.grouping_expression, default=None)
    # Only maxBlockedDuration may be "never": an infinite startTimeout is refused by format_duration.
    for key, attr, show in (
        ("maxBlockedDuration", "max_blocked_duration", format_duration_or_never),
        ("startTimeout", "start_timeout", format_duration),
    ):
        value = getattr(policy, attr)
        _put(document, key, value, default=_default(cls, attr), shown=show(value))
    _put(document, "mode", policy.mode, default=_default(cls, "mode"))
    _put(document, "hold", policy.hold, default=_default(cls, "hold"))
    document["pacer"] = _pacer(policy.pacer)
    return document


def _load_limit(max_load: float | None, increment_by: float) -> dict[str, Any]:
    limit: dict[str, Any] = {}
    if max_load is not None:
        limit["maxLoad"] = _number(max_load)
    if increment_by:
        limit["incrementBy"] = _number(increment_by)
    return limit


def _load_avg(load_avg: LoadAvg) -> dict[str, Any]:
    document: dict[str, Any] = {"maxLoad": _number(load_avg.max_load)}
    _put(document, "perCore", load_avg.per_core, default=_default(LoadAvg, "per_core"))
    if load_avg.increment_by != _default(LoadAvg, "increment_by"):
        document["incrementBy"] = _number(load_avg.increment_by)
    return document


def _throttle(throttle: ThrottleConfig) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if cpu := _load_limit(throttle.cpu_max_load, throttle.cpu_increment_by):
        document["cpu"] = cpu
    if io := _load_limit(throttle.io_max_load, throttle.io_increment_by):
        document["io"] = io
    if memory := _load_limit(throttle.memory_max_load, throttle.memory_increment_by):
        document["memory"] = memory
    if (concurrent := throttle.max_concurrent) is not None:
        document["maxConcurrent"] = {
            key: _number(value)
            for key, value in (("perCore", concurrent.per_core), ("value", concurrent.value))
            if value is not None
        }
    if (rate := throttle.rate_limit) is not None:
        document["rateLimit"] = {"burst": rate.burst, "fillFactor": format_duration(rate.fill_seconds)}
    if throttle.load_avg is not None:
        document["loadAvg"] = _load_avg(throttle.load_avg)
    return document


def _dependency(dependency: Dependency) -> dict[str, Any]:
    document: dict[str, Any] = {dependency.kind: dependency.target}
    for key, attr in (("timeout", "timeout"), ("interval", "interval"), ("failInterval", "fail_interval")):
        value = getattr(dependency, attr)
        default = _default(Dependency, attr)
        if value != default:
            document[key] = format_duration(value)
    return document


def _daemonsets(chosen: DaemonSetFilter) -> dict[str, Any]:
    """`daemonSets`, each filter only when set (the default chooses every DaemonSet)."""
    document: dict[str, Any] = {}
    _put(document, "hostNetwork", chosen.host_network, default=False)
    for key in ("namespaces", "include", "exclude"):
        _put(document, key, getattr(chosen, key), default=(), shown=[*getattr(chosen, key)])
    return document


_NODE_DURATIONS = (
    ("holdTimeout", "hold_timeout"),
    ("minHold", "min_hold"),
    ("maxWait", "max_wait"),
    ("unreachableWait", "unreachable_wait"),
    ("probePeriod", "probe_period"),
)


def _node(policy: NodePolicy) -> dict[str, Any]:
    cls = NodePolicy
    document: dict[str, Any] = {"name": policy.name}
    if not policy.node_selector.is_empty:
        document["nodeSelector"] = selector_document(policy.node_selector)
    _put(document, "priority", policy.priority, default=_default(cls, "priority"))
    if throttle := _throttle(policy.throttle):
        document["throttleConfig"] = throttle
    for key, attr in _NODE_DURATIONS:
        value = getattr(policy, attr)
        _put(document, key, value, default=_default(cls, attr), shown=format_duration(value))
    _put(document, "countAllStarting", policy.count_all_starting, default=_default(cls, "count_all_starting"))
    namespaces = policy.exclude_namespaces
    _put(
        document,
        "excludeNamespaces",
        namespaces,
        default=_default(cls, "exclude_namespaces"),
        shown=[*namespaces],
    )
    _put(
        document,
        "waitForDaemonSets",
        policy.wait_for_daemonsets,
        default=_default(cls, "wait_for_daemonsets"),
    )
    if daemonsets := _daemonsets(policy.daemonsets):
        document["daemonSets"] = daemonsets
    _put(document, "countDaemonSets", policy.count_daemonsets, default=_default(cls, "count_daemonsets"))
    _put(document, "maxQueue", policy.max_queue, default=None)
    _put(document, "probeReadiness", policy.probe_readiness, default=_default(cls, "probe_readiness"))
    if policy.dependencies:
        document["dependencies"] = [_dependency(each) for each in policy.dependencies]
    return document


def policy_document(policy_file: PolicyFile) -> dict[str, Any]:
    """The policy file's YAML document: `staggeringPolicies` and `nodePolicies` as the file spells them,
    defaults left out (an empty policy file is `{}`). Its `notes` are not part of the policy: not written."""
    document: dict[str, Any] = {}
    if policy_file.staggering_policies:
        document["staggeringPolicies"] = [_staggering(each) for each in policy_file.staggering_policies]
    if policy_file.node_policies:
        document["nodePolicies"] = [_node(each) for each in policy_file.node_policies]
    return document
