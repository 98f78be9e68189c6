"""The policy file's model: staggering policies (cluster-wide groups, their pacers, modes and holds) and
node policies (per-node throttles), with their defaults, the built-in default node policy, which node
policy a node's labels choose, and the error a bad file raises."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal
from urllib.parse import urlsplit, urlunsplit

from stagger.selectors import LabelSelector

if TYPE_CHECKING:
    # Imported when a grouping is compiled: lockd reads policy files too, and most never need JSONPath
    # (about 1 MB of parser once imported).
    from jsonpath_ng import JSONPath

__all__ = [
    "DEFAULT_NODE_POLICY",
    "NODE_VARIABLES",
    "DaemonSetFilter",
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
    "expand_target",
    "select_node_policy",
    "target_variables",
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

NODE_VARIABLES: Final = ("NODE_NAME", "NODE_IP")
"""The `$(VAR)` references a dependency's target may hold, in Kubernetes' own spelling (pod-startup-lock's
`--check http://$(HOST_IP):9999` is expanded by the kubelet; a policy file is not, so lockd expands these)."""

_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def target_variables(target: str) -> list[str]:
    """The `$(VAR)` names in `target`, in order (a `$(` not followed by a name and `)` is plain text, as
    Kubernetes leaves it)."""
    return _VARIABLE.findall(target)


def _authority_end(target: str, *, kind: DependencyKind) -> int:
    """Where the host:port part of `target` ends: all of a tcp target; a URL's up to its path."""
    if kind == "tcp":
        return len(target)
    start = target.find("://")
    start = 0 if start < 0 else start + 3
    ends = [i for i in (target.find(c, start) for c in "/?#") if i >= 0]
    return min(ends, default=len(target))


def expand_target(target: str, *, kind: DependencyKind, variables: Mapping[str, str]) -> str:
    """`target` with each `$(VAR)` replaced by `variables[VAR]`; an IPv6 `$(NODE_IP)` in the host part is
    put in brackets (unless written in them), so `http://$(NODE_IP):9999` works on an IPv6 node too.
    Raises KeyError naming a variable `variables` lacks."""
    host_end = _authority_end(target, kind=kind)

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        found = variables[name]
        in_host = match.start() < host_end and not target[: match.start()].endswith("[")
        return f"[{found}]" if name == "NODE_IP" and ":" in found and in_host else found

    return _VARIABLE.sub(value, target)


@dataclass(frozen=True)
class Dependency:
    """Something that must answer before lockd grants any slot on the node (pod-startup-lock's "additional
    endpoint check"): `http`, a URL that must answer 2xx; `tcp`, a HOST:PORT that must accept. The target
    may hold `$(NODE_NAME)` and `$(NODE_IP)` (`NODE_VARIABLES`), which each node's lockd expands."""

    kind: DependencyKind
    target: str
    # How long one check may take before it counts as failed.
    timeout: float = 2.0
    # How soon a dependency that answered is checked again (pod-startup-lock's --passHc), and one that
    # failed (--failHc); None: lockd's --dependency-interval.
    interval: float | None = None
    fail_interval: float | None = None

    @property
    def shown_target(self) -> str:
        """The target as it may be shown (/status, reasons, logs): a URL without its user and password."""
        if self.kind != "http":
            return self.target
        parts = urlsplit(self.target)
        if "@" not in parts.netloc:
            return self.target
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _entry_matches(entry: str, *, namespace: str, name: str, labels: Mapping[str, str] | None) -> bool | None:
    """One `include`/`exclude` entry against a DaemonSet: `label:value` (k8s-health's --in/--ex) against its
    labels (None: unknown), else `name` or `namespace/name`."""
    key, colon, value = entry.partition(":")
    if colon:
        return None if labels is None else labels.get(key) == value
    entry_namespace, slash, entry_name = entry.rpartition("/")
    return entry_name == name and (not slash or entry_namespace == namespace)


@dataclass(frozen=True)
class DaemonSetFilter:
    """Which DaemonSets `waitForDaemonSets` waits for (k8s-health's --hostNet, --namespace, --in, --ex);
    the default, all of them. `include` and `exclude` entries are a DaemonSet's `name` or `namespace/name`,
    or a `label:value` of its own labels. A DaemonSet is waited for when its pods use the host network (with
    `host_network`), it is in one of `namespaces` (when any), it has every `include` label and one of the
    `include` names (each kind when any), and no `exclude` entry matches it (one label is enough, as --ex)."""

    host_network: bool = False
    namespaces: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @property
    def chooses_all(self) -> bool:
        return self == _ALL_DAEMONSETS

    @property
    def reads_labels(self) -> bool:
        return any(":" in entry for entry in (*self.include, *self.exclude))

    def chooses(
        self, *, namespace: str, name: str, labels: Mapping[str, str] | None, host_network: bool
    ) -> bool:
        """Is this DaemonSet waited for? `labels` None: not known (a DaemonSet not listed yet): its label
        entries neither include nor exclude it, so a pod of it is waited for until they can be read."""
        if (self.host_network and not host_network) or (self.namespaces and namespace not in self.namespaces):
            return False

        def matches(entry: str) -> bool | None:
            return _entry_matches(entry, namespace=namespace, name=name, labels=labels)

        if any(matches(entry) for entry in self.exclude):
            return False
        names = [entry for entry in self.include if ":" not in entry]
        if names and not any(matches(entry) for entry in names):
            return False
        return all(matches(entry) is not False for entry in self.include if ":" in entry)


_ALL_DAEMONSETS: Final = DaemonSetFilter()


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
    # Which DaemonSets waitForDaemonSets waits for (the default: all).
    daemonsets: DaemonSetFilter = _ALL_DAEMONSETS
    # DaemonSet pods starting on the node count against maxConcurrent (as countAllStarting counts other
    # pods; thundering-herd-scheduler counts them). Never held either way.
    count_daemonsets: bool = False


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
    # math.inf: "never" (held until its group grants it; the controller's maxWait still bounds the wait).
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
        "countDaemonSets": policy.count_daemonsets,
        "waitForDaemonSets": policy.wait_for_daemonsets,
        "daemonSets": _describe_daemonsets(policy.daemonsets),
        "excludeNamespaces": list(policy.exclude_namespaces),
        "maxQueue": policy.max_queue,
        "probeReadiness": policy.probe_readiness,
        "probePeriodSeconds": policy.probe_period,
        "dependencies": [_describe_dependency(dependency) for dependency in policy.dependencies],
    }


def _describe_daemonsets(chosen: DaemonSetFilter) -> dict[str, Any]:
    return {
        "hostNetwork": chosen.host_network,
        "namespaces": list(chosen.namespaces),
        "include": list(chosen.include),
        "exclude": list(chosen.exclude),
    }


def _describe_dependency(dependency: Dependency) -> dict[str, Any]:
    # The intervals as the file sets them: null is lockd's --dependency-interval (/status's `dependencies`
    # shows the ones in force).
    return {
        "kind": dependency.kind,
        "target": dependency.shown_target,
        "timeoutSeconds": dependency.timeout,
        "intervalSeconds": dependency.interval,
        "failIntervalSeconds": dependency.fail_interval,
    }
