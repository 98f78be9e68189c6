"""The policy file's model: staggering policies (cluster-wide groups, their pacers, modes and holds) and
node policies (per-node throttles), with their defaults, the built-in default node policy, which node
policy a node's labels choose, and the error a bad file raises."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from stagger.selectors import LabelSelector

if TYPE_CHECKING:
    # Imported when a grouping is compiled: lockd reads policy files too, and most never need JSONPath
    # (about 1 MB of parser once imported).
    from jsonpath_ng import JSONPath

__all__ = [
    "DEFAULT_NODE_POLICY",
    "Dependency",
    "DependencyKind",
    "ExponentialPacer",
    "Hold",
    "LinearPacer",
    "LoadAvg",
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
    "select_node_policy",
]


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
        # and core count. Decimal would be exact too, at about 0.35 MiB of every node's lockd for this one line.
        return max(1, math.ceil(round(self.per_core * max(cores, 1), 9)))


@dataclass(frozen=True)
class RateLimit:
    """Token bucket: up to `burst` grants at once, one new token every `fill_seconds` (the file's
    `fillFactor`, a duration)."""

    burst: int
    fill_seconds: float


@dataclass(frozen=True)
class LoadAvg:
    """pod-pacemaker's `loadAvg` throttle: no grant while the 1-minute load average (divided by the cores
    when `per_core`) is at or above `max_load`."""

    max_load: float
    per_core: bool = False
    # Load a grant is assumed to add until the next sample (pod-pacemaker's `incrementBy`).
    increment_by: float = 0.0


@dataclass(frozen=True)
class ThrottleConfig:
    cpu_max_load: float | None = None  # percent of all CPUs busy
    io_max_load: float | None = None  # percent IO pressure
    max_concurrent: MaxConcurrent | None = None
    rate_limit: RateLimit | None = None
    # Percent of CPU busy / IO pressure a grant is assumed to add until the next load sample
    # (pod-pacemaker's `cpu.incrementBy` and `io.incrementBy`): a burst of asks between two samples cannot
    # all pass on one low reading.
    cpu_increment_by: float = 0.0
    io_increment_by: float = 0.0
    load_avg: LoadAvg | None = None
    # Percent memory pressure (PSI "some avg10") at which grants stop, and what a grant is assumed to add
    # until the next sample; stagger's own (pod-pacemaker has no memory throttle).
    memory_max_load: float | None = None
    memory_increment_by: float = 0.0


DependencyKind = Literal["http", "tcp"]


@dataclass(frozen=True)
class Dependency:
    """Something that must answer before lockd grants any slot on the node (pod-startup-lock's "additional
    endpoint check"): `http`, a URL that must answer 2xx; `tcp`, a HOST:PORT that must accept."""

    kind: DependencyKind
    target: str
    # How long one check may take before it counts as failed.
    timeout: float = 2.0

    @property
    def shown_target(self) -> str:
        """The target as it may be shown (/status, reasons, logs): a URL without its user and password."""
        if self.kind != "http":
            return self.target
        parts = urlsplit(self.target)
        if "@" not in parts.netloc:
            return self.target
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


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
    # How long an init client waits while lockd cannot decide (no connection, 5xx, not ready) before it
    # lets its pod start (STAGGER_UNREACHABLE_WAIT; admission injects the largest of the node policies').
    unreachable_wait: float = 60.0
    # How many pods may wait in lockd's queue on this node; None: lockd's --max-queue.
    max_queue: int | None = None
    dependencies: tuple[Dependency, ...] = ()
    # While a pod holds its slot, lockd runs the pod's own readiness (or startup) probe every `probe_period`
    # and ends the slot once it passes, instead of waiting for the kubelet's next look (its periodSeconds,
    # 10 s by default, up to one period lost per slot). httpGet and tcpSocket only; exec, grpc or no probe:
    # the slot ends at the Ready condition as before (lockd/podprobes.py).
    probe_readiness: bool = True
    probe_period: float = 0.5


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
    # What the file says that was read with a meaning it does not spell exactly (a key in another case, as
    # Go's decoder reads it; a PacemakerConfig's string numbers): one sentence each, for lockd and the
    # controller to log once per load and `kubectl stagger check-policy` to print. Not part of the policy.
    notes: tuple[str, ...] = field(default=(), compare=False)


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
    load_avg = throttle.load_avg
    return {
        "name": policy.name,
        "priority": policy.priority,
        "maxConcurrent": throttle.max_concurrent.limit(cores=cores) if throttle.max_concurrent else None,
        "cpuMaxLoad": throttle.cpu_max_load,
        "cpuIncrementBy": throttle.cpu_increment_by,
        "ioMaxLoad": throttle.io_max_load,
        "ioIncrementBy": throttle.io_increment_by,
        "memoryMaxLoad": throttle.memory_max_load,
        "memoryIncrementBy": throttle.memory_increment_by,
        "loadAvg": (
            {"maxLoad": load_avg.max_load, "perCore": load_avg.per_core, "incrementBy": load_avg.increment_by}
            if load_avg
            else None
        ),
        "rateLimit": {"burst": rate.burst, "fillFactorSeconds": rate.fill_seconds} if rate else None,
        "holdTimeoutSeconds": policy.hold_timeout,
        "minHoldSeconds": policy.min_hold,
        "maxWaitSeconds": policy.max_wait,
        "countAllStarting": policy.count_all_starting,
        "waitForDaemonSets": policy.wait_for_daemonsets,
        "excludeNamespaces": list(policy.exclude_namespaces),
        "maxQueue": policy.max_queue,
        "probeReadiness": policy.probe_readiness,
        "probePeriodSeconds": policy.probe_period,
        "dependencies": [
            {"kind": dependency.kind, "target": dependency.shown_target, "timeoutSeconds": dependency.timeout}
            for dependency in policy.dependencies
        ],
    }
