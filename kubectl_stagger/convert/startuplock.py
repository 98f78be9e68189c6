"""pod-startup-lock (serhii-samoilenko/pod-startup-lock): three programs configured by flags alone. The lock
service (lock/config/config.go): `--locks` (1) locks at once, each held `--timeout` (10) seconds, granted
only while every `--check` endpoint answers (lock/service/checker.go: http(s) with a 2xx, tcp accepting;
10 s per request, re-checked every `--failHc` (10) / `--passHc` (60) seconds), on `--port` (8888).
k8s-health (k8s-health/config/config.go): answers 200 on its `--host`/`--port` (9999) once the node's
DaemonSets are ready; `--hostNet`, `--namespace`, `--in`, `--ex` choose the DaemonSets. The init container
(init/main.go): asks `--host`:`--port` every `--pause` s, optionally for `--duration` s.

In stagger: one node policy with `maxConcurrent.value` = locks, `holdTimeout` = timeout, `waitForDaemonSets`
(with k8s-health's filters as `daemonSets`) when a lock `--check` reaches k8s-health's endpoint, and
`dependencies` for the other checks, their `interval`/`failInterval` the lock's --passHc/--failHc;
`$(VAR)`s that name the node (by the container's env: status.hostIP, spec.nodeName) become `$(NODE_IP)` and
`$(NODE_NAME)`, which lockd expands. The init containers keep working against lockd's pod-startup-lock
port (the chart's `lockd.podStartupLock.port`). What the programs refuse (a malformed --check, --in with
--ex, k8s-health without NODE_NAME) convert refuses. The flags come as command lines in a text file, or in
YAML: the programs' DaemonSets (its READMEs), a Helm values' `args`, a list."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from kubectl_stagger.convert.common import (
    ChartValue,
    Conversion,
    Input,
    InvalidInput,
    label_map,
    yaml_documents,
)
from kubectl_stagger.convert.goflags import (
    Command,
    FlagKind,
    commands_in_documents,
    commands_in_text,
    parse_flags,
)
from stagger.policy import DaemonSetFilter, Dependency, MaxConcurrent, NodePolicy, ThrottleConfig
from stagger.selectors import LabelSelector

__all__ = ["commands", "convert", "is_startup_lock"]

logger = logging.getLogger(__name__)

Program = Literal["lock", "k8s-health", "init"]

_SPECS: dict[Program, dict[str, FlagKind]] = {
    "lock": {
        "host": "string",
        "port": "int",
        "locks": "int",
        "timeout": "int",
        "check": "list",
        "failHc": "int",
        "passHc": "int",
    },
    "k8s-health": {
        "host": "string",
        "port": "int",
        "baseUrl": "string",
        "namespace": "string",
        "failHc": "int",
        "passHc": "int",
        "hostNet": "bool",
        "in": "list",
        "ex": "list",
    },
    "init": {"host": "string", "port": "int", "pause": "int", "duration": "int"},
}
# Flags only pod-startup-lock's programs have (--port, --host, --timeout are everybody's).
_DISTINCT = frozenset({"locks", "check", "failHc", "passHc", "hostNet", "baseUrl"})
_DEFAULT_LOCKS, _DEFAULT_TIMEOUT, _HEALTH_PORT, _LOCK_PORT = 1, 10, 9999, 8888
NODE_IP, NODE_NAME = "$(NODE_IP)", "$(NODE_NAME)"
# The downward API fields that name the node, as a policy file's dependency writes them.
_NODE_FIELDS = {"status.hostIP": NODE_IP, "spec.nodeName": NODE_NAME}
# A command line of a text has no env: these names read by the meaning pod-startup-lock's READMEs give them.
_CONVENTIONAL = {"HOST_IP": NODE_IP, "NODE_IP": NODE_IP, "NODE_NAME": NODE_NAME}
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# lock/config/endpoint.go: endpointPattern and addressPattern.
_ENDPOINT = re.compile(r"(\S+?)://(.*)", re.DOTALL)
_ADDRESS = re.compile(r"(\S+):(\d+)")
# lock/service/checker.go's requestTimeout (1.0.1: "Added connection timeouts for http and tcp").
_CHECK_TIMEOUT = 10.0
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})
_FLAG_NAME = re.compile(r"^--?([A-Za-z]+)")
# HOST:PORT as a dependency takes it: a host without ':' (or an IPv6 address in brackets), a port.
_TCP = re.compile(r"([^:\[\]\s]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})")


def _flag_names(command: Command) -> set[str]:
    return {match.group(1) for word in command.words if (match := _FLAG_NAME.match(word))}


# The programs' binaries as their Makefiles build them (bin/lock, bin/health, bin/init), their Go packages,
# and their images (ssamoilenko/startup-lock, startup-lock-k8s-health, startup-lock-init).
_BINARIES: dict[str, Program] = {
    "lock": "lock",
    "health": "k8s-health",
    "k8s-health": "k8s-health",
    "init": "init",
}


def _program(command: Command, *, assume_lock: bool) -> Program | None:
    """Which program a command line runs: by its image or program path, else by its flags; a command line
    of generic flags alone (`--port`, `--timeout`) only when the caller says it is pod-startup-lock's."""
    said = " ".join([command.image, *command.words[:3]]).lower()
    binary = command.words[0].rsplit("/", 1)[-1] if command.words else ""
    if "k8s-health" in said or "bin/health" in said or _BINARIES.get(binary) == "k8s-health":
        return "k8s-health"
    if "startup-lock-init" in said or "init/main.go" in said or _BINARIES.get(binary) == "init":
        return "init"
    flags = _flag_names(command)
    if "startup-lock" in said or "lock/main.go" in said or _BINARIES.get(binary) == "lock":
        return "lock"
    if flags & {"hostNet", "baseUrl", "namespace", "in", "ex"}:
        return "k8s-health"
    if flags & {"pause", "duration"} and not flags & _DISTINCT:
        return "init"
    return "lock" if flags & _DISTINCT or assume_lock else None


def commands(text: str, *, source: str, assume_lock: bool = False) -> list[tuple[Program, Command]]:
    """The pod-startup-lock command lines of one input, each with its program (`assume_lock`: a command
    line that names no program is the lock service's, as `--from pod-startup-lock` says)."""
    documents = yaml_documents(text)
    structured = [each for each in documents or [] if isinstance(each, Mapping | list)]
    found = (
        commands_in_documents(structured, source=source)
        if structured
        else commands_in_text(text, source=source)
    )
    return [
        (program, each) for each in found if (program := _program(each, assume_lock=assume_lock)) is not None
    ]


def is_startup_lock(text: str, *, assume_lock: bool = False) -> bool:
    return bool(commands(text, source="<input>", assume_lock=assume_lock))


@dataclass(frozen=True)
class _Health:
    """Where one k8s-health serves (k8s-health/service/service.go: --host, "" for every address, and
    --port) and which DaemonSets it checks; `command` None: none given, its defaults assumed."""

    command: Command | None
    host: str = ""
    port: int = _HEALTH_PORT
    filters: DaemonSetFilter = field(default_factory=DaemonSetFilter)


@dataclass
class _Policy:
    """The node policy one conversion is making, and what it says on stderr: filled in by the flags of each
    program in turn, then frozen into a NodePolicy (`_node_policy`)."""

    locks: int = _DEFAULT_LOCKS
    timeout: int = _DEFAULT_TIMEOUT
    lock_port: int | None = None  # the lock's --port; None: no lock command line
    init_port: int | None = None  # the init containers' --port; None: no init command line
    init_duration: int = 0
    interval: float | None = None  # --passHc
    fail_interval: float | None = None  # --failHc
    reached: list[_Health] = field(default_factory=list)  # the k8s-health endpoints a --check reaches
    dependencies: list[Dependency] = field(default_factory=list)
    node_selector: Mapping[str, Any] = field(default_factory=dict)
    owners: dict[Program, str] = field(default_factory=dict)
    not_carried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _shown(flag: str, value: object) -> str:
    """A flag as it was written: `--hostNet`, `--in a:b --in c:d`, `--passHc 60`."""
    if value is True:
        return f"--{flag}"
    if isinstance(value, list):
        return " ".join(f"--{flag} {each}" for each in value)
    return f"--{flag} {value}"


def _variables(command: Command) -> dict[str, str]:
    """The `$(VAR)`s of a command line that name the node, as a policy file writes them, or that hold a
    plain value. Kubernetes expands `$(VAR)` in args from the container's env; a command line of a text
    has none known, so the names pod-startup-lock's READMEs use are read by their meaning."""
    if command.env is None:
        return dict(_CONVENTIONAL)
    found: dict[str, str] = {}
    for name, source in command.env.items():
        kind, _, value = source.partition(":")
        if kind == "fieldRef" and value in _NODE_FIELDS:
            found[name] = _NODE_FIELDS[value]
        elif kind == "fieldRef" and value == "status.podIP" and command.host_network:
            found[name] = NODE_IP  # a host-network pod's IP is its node's
        elif kind == "value" and "$(" not in value:
            found[name] = value
    return found


def _expanded(url: str, variables: Mapping[str, str]) -> tuple[str, list[str]]:
    """`url` with each known `$(VAR)` replaced, and the names of those that are not known."""
    unknown = [name for name in _VARIABLE.findall(url) if name not in variables]
    return _VARIABLE.sub(lambda match: variables.get(match.group(1), match.group(0)), url), unknown


def _lock(values: Mapping[str, Any], *, command: Command, into: _Policy, errors: list[str]) -> None:
    where = command.where
    into.locks = values.get("locks", _DEFAULT_LOCKS)
    into.timeout = values.get("timeout", _DEFAULT_TIMEOUT)
    into.lock_port = values.get("port", _LOCK_PORT)
    if into.locks < 1:
        errors.append(f"{where}: --locks {into.locks} never grants a lock; stagger needs at least 1")
    if into.timeout < 1:
        errors.append(f"{where}: --timeout {into.timeout}: a lock must last at least a second")
    for url in values.get("check", []):
        # lock/config/endpoint.go ParseEndpoint: the lock panics on a malformed endpoint.
        endpoint = _ENDPOINT.fullmatch(url)
        if endpoint is None:
            errors.append(
                f'{where}: --check {url}: the lock refuses it ("Endpoint malformed": no PROTOCOL://)'
            )
        elif endpoint.group(1) not in ("http", "https") and not _ADDRESS.fullmatch(endpoint.group(2)):
            errors.append(f'{where}: --check {url}: the lock refuses it ("Address malformed": not HOST:PORT)')
    for flag, attr in (("passHc", "interval"), ("failHc", "fail_interval")):
        if flag not in values:
            continue
        if values[flag] >= 1:
            setattr(into, attr, float(values[flag]))
        else:
            into.not_carried.append(
                f"{where}: --{flag} {values[flag]}: the lock re-checks at once, without a pause; stagger's "
                "dependencies need an interval of at least 1 s: lockd's own here"
            )


def _pair_problem(flag: str, value: str) -> str | None:
    """common/util/commandline.go PairArrayVal.Set: exactly `label:value`, both given, or k8s-health panics."""
    chunks = value.split(":")
    if len(chunks) != 2 or not all(chunks):
        return f'--{flag} {value}: k8s-health refuses it ("Failed to parse value": not label:value)'
    return None


def _health(values: Mapping[str, Any], *, command: Command, into: _Policy, errors: list[str]) -> _Health:
    """k8s-health's flags: where it serves, its DaemonSet filters (the node policy's `daemonSets` when the
    lock checks it), and what it refuses (k8s-health/config/config.go Validate: it panics)."""
    where = command.where
    included, excluded = values.get("in", []), values.get("ex", [])
    errors.extend(
        f"{where}: {problem}"
        for flag, given in (("in", included), ("ex", excluded))
        for value in given
        if (problem := _pair_problem(flag, value))
    )
    if included and excluded:
        errors.append(
            f'{where}: --in with --ex: k8s-health refuses them together ("Cannot specify both Included and '
            'Excluded DaemonSet labels, choose one")'
        )
    if command.env is not None and "NODE_NAME" not in command.env and not command.env_from:
        errors.append(
            f'{where}: no NODE_NAME in the container\'s env: k8s-health refuses to start ("NODE_NAME not specified")'
        )
    for flag in ("failHc", "passHc"):
        if flag in values:
            into.not_carried.append(
                f"{where}: {_shown(flag, values[flag])}: lockd sees DaemonSet pods change at once (a watch)"
            )
    if "baseUrl" in values:
        into.notes.append(
            f"{where}: --baseUrl {values['baseUrl']}: lockd reads DaemonSets through its own API connection"
        )
    namespace = values.get("namespace", "")
    filters = DaemonSetFilter(
        host_network=values.get("hostNet", False),
        namespaces=(namespace,) if namespace else (),
        include=tuple(included),
        exclude=tuple(excluded),
    )
    return _Health(
        command=command, host=values.get("host", ""), port=values.get("port", _HEALTH_PORT), filters=filters
    )


def _init(values: Mapping[str, Any], *, where: str, into: _Policy) -> None:
    into.init_port = values.get("port", _LOCK_PORT) if into.init_port is None else into.init_port
    if "duration" in values:
        into.init_duration = max(into.init_duration, values["duration"])
        into.notes.append(
            f"{where}: --duration {values['duration']}: the init containers' ?duration= sets their slot's "
            "hold on lockd's pod-startup-lock port (never past lockd.podStartupLock.holdTimeout); a slot ends "
            "sooner when its pod is Ready"
        )
    if "pause" in values:
        into.notes.append(
            f"{where}: --pause {values['pause']}: stagger's own init client long-polls instead of asking every "
            "few seconds"
        )


# `$(NODE_IP)` and `$(NODE_NAME)` as host names a URL parser reads (.invalid: no real host has one).
_NODE_HOSTS = {NODE_IP: "node-ip.stagger.invalid", NODE_NAME: "node-name.stagger.invalid"}


def _host(url: str) -> tuple[str | None, int | None]:
    """The host and port a URL names (`$(NODE_IP)` and `$(NODE_NAME)` as the hosts `_NODE_HOSTS` names)."""
    for variable, placeholder in _NODE_HOSTS.items():
        url = url.replace(variable, placeholder)
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None, None
    return parts.hostname, port


def _reaches(url: str, health: _Health) -> bool:
    """Does a lock's --check reach this k8s-health: plain http (it serves no TLS) to its port, on the node
    itself (its IP or name, localhost) when it serves every address, or to the host it binds."""
    if not url.startswith("http://"):
        return False
    host, port = _host(url)
    if host is None or port != health.port:
        return False
    on_node = host in _LOCAL_HOSTS or host in _NODE_HOSTS.values()
    if health.host in ("", "0.0.0.0", "::"):
        return on_node
    return host == health.host.lower() or (host in _LOCAL_HOSTS and health.host in _LOCAL_HOSTS)


def _check(url: str, *, command: Command, healths: Sequence[_Health], into: _Policy) -> None:
    """One `--check`: k8s-health's endpoint is waitForDaemonSets, other http(s) and tcp endpoints
    dependencies (with the lock's --passHc and --failHc)."""
    where = command.where
    expanded, unknown = _expanded(url, _variables(command))
    if unknown:
        into.not_carried.append(
            f"{where}: --check {url}: $({unknown[0]}) is neither the node's IP nor its name (Kubernetes expands "
            "it from the container's env, lockd only $(NODE_IP) and $(NODE_NAME)); add it to dependencies "
            "with the address written out"
        )
        return
    reached = [each for each in healths if _reaches(expanded, each)]
    if reached:
        into.reached += [each for each in reached if each not in into.reached]
        said = (
            "k8s-health's endpoint"
            if reached[0].command
            else f"k8s-health's port ({_HEALTH_PORT}) on the node"
        )
        into.notes.append(f"{where}: --check {url} is {said}: waitForDaemonSets: true")
        return
    if expanded != url:
        into.notes.append(
            f"{where}: --check {url}: {expanded} (lockd expands $(NODE_IP) and $(NODE_NAME) on each node)"
        )
    protocol, _, address = expanded.partition("://")
    dependency = None
    if protocol in ("http", "https") and _host(expanded)[0]:
        dependency = Dependency(kind="http", target=expanded, timeout=_CHECK_TIMEOUT)
    elif protocol == "tcp" and (tcp := _TCP.fullmatch(address)) and 1 <= int(tcp.group(2)) <= 65535:
        dependency = Dependency(kind="tcp", target=address, timeout=_CHECK_TIMEOUT)
    if dependency is None:
        into.not_carried.append(
            f"{where}: --check {url}: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only"
        )
        return
    into.dependencies.append(replace(dependency, interval=into.interval, fail_interval=into.fail_interval))


def _program_values(
    found: Sequence[tuple[Program, Command]], *, errors: list[str]
) -> list[tuple[Program, Command, Mapping[str, Any]]]:
    parsed_all = []
    for program, command in found:
        parsed = parse_flags(command.words, _SPECS[program])
        errors.extend(f"{command.where}: {program}: {problem}" for problem in parsed.problems)
        parsed_all.append((program, command, parsed.values))
    return parsed_all


def _locks_and_checks(
    parsed: Sequence[tuple[Program, Command, Mapping[str, Any]]],
    *,
    healths: Sequence[_Health],
    into: _Policy,
    errors: list[str],
) -> None:
    locks = [(command, values) for program, command, values in parsed if program == "lock"]
    if not locks:
        into.notes.append(
            f"no lock service flags: its defaults, --locks {_DEFAULT_LOCKS} --timeout {_DEFAULT_TIMEOUT}"
        )
        return
    (command, values), *others = locks
    _lock(values, command=command, into=into, errors=errors)
    if not errors:
        for url in values.get("check", []):
            _check(url, command=command, healths=healths or [_Health(command=None)], into=into)
    into.not_carried += [
        f"{other.where}: another lock service's flags: only the first is carried over" for other, _ in others
    ]
    into.node_selector = command.node_selector
    into.owners.setdefault("lock", command.owner)


def convert(inputs: Sequence[Input], *, forced: bool = False) -> Conversion:
    """`forced`: the inputs are pod-startup-lock's (`--from`), so command lines of generic flags are its too."""
    errors: list[str] = []
    found = [pair for each in inputs for pair in commands(each.text, source=each.source, assume_lock=forced)]
    parsed = _program_values(found, errors=errors)
    policy = _Policy()
    healths: list[_Health] = []
    for program, command, values in parsed:
        if program == "k8s-health":
            healths.append(_health(values, command=command, into=policy, errors=errors))
            policy.owners.setdefault("k8s-health", command.owner)
        elif program == "init":
            _init(values, where=command.where, into=policy)
    _locks_and_checks(parsed, healths=healths, into=policy, errors=errors)
    if errors:
        raise InvalidInput(errors)
    policy.not_carried += _unused_healths(healths, reached=policy.reached)
    node = _node_policy(policy)  # it says its own lines too: before they are taken
    chart_values, obsolete = _still_needed(policy)
    return Conversion(
        node_policies=(node,),
        not_carried=tuple(policy.not_carried),
        notes=tuple(policy.notes),
        chart_values=tuple(chart_values),
        no_longer_needed=tuple(obsolete),
    )


def _unused_healths(healths: Sequence[_Health], *, reached: Sequence[_Health]) -> list[str]:
    """The k8s-health command lines whose filters are not the node policy's: no lock --check asks them,
    or another one on the same endpoint comes first."""
    first = reached[0] if reached else None
    lines = []
    for each in healths:
        if each.command is None or each is first:
            continue
        if first is not None and each in reached:
            shown = f" ({first.command.where})" if first.command else ""
            why = f"another k8s-health on the endpoint the lock checks: only the first's{shown} filters are carried over"
        elif first is not None:
            why = "no lock --check asks its endpoint: its DaemonSet filters are not carried over"
        else:
            why = "no lock --check asks its endpoint, so the lock never waited for DaemonSets: no waitForDaemonSets"
        lines.append(f"{each.command.where}: k8s-health's flags: {why}")
    return lines


def _still_needed(policy: _Policy) -> tuple[list[ChartValue], list[str]]:
    """The chart values that let pod-startup-lock's init containers ask lockd unchanged, and its programs
    that are no longer needed."""
    port = policy.init_port or policy.lock_port or _LOCK_PORT
    if policy.init_port and policy.lock_port and policy.init_port != policy.lock_port:
        policy.notes.append(
            f"the init containers ask port {policy.init_port}, the lock listens on {policy.lock_port}: "
            f"lockd.podStartupLock.port is the init containers' port"
        )
    hold = max(policy.timeout, policy.init_duration)
    values = [
        ChartValue(
            "lockd.podStartupLock.port",
            port,
            "pod-startup-lock's init containers ask the node's port as they are; lockd answers them there (a "
            "pod known by its IP asks as itself, its slot ending when it is Ready)",
        )
    ]
    if hold != _DEFAULT_TIMEOUT:
        values.append(
            ChartValue(
                "lockd.podStartupLock.holdTimeout",
                f"{hold}s",
                "the longest a slot asked for on that port is held (the lock's --timeout, or an init "
                "container's longer --duration)",
            )
        )
    lock = policy.owners.get("lock") or "its DaemonSet"
    obsolete = [
        f"pod-startup-lock's lock service ({lock}): delete it before lockd.podStartupLock.port is set, as both "
        f"take the node's port {port}"
    ]
    if policy.reached or "k8s-health" in policy.owners:
        health = policy.owners.get("k8s-health") or "its DaemonSet"
        obsolete.append(
            f"k8s-health ({health}): lockd watches the node's DaemonSets itself (waitForDaemonSets)"
        )
    policy.notes.append(
        "pod-startup-lock's init containers may stay as they are, or give way to stagger's opt-in label "
        '<prefix>/enable: "1" (its own init client, injected by the controller)'
    )
    return values, obsolete


def _node_policy(policy: _Policy) -> NodePolicy:
    selector, problems, _ = label_map(policy.node_selector or None, path="the lock DaemonSet's nodeSelector")
    if problems:
        policy.not_carried.extend(problems)
    elif selector is not None and not selector.is_empty:
        policy.notes.append(
            "the node policy selects the nodes the lock DaemonSet ran on (its nodeSelector); lockd runs on every "
            "node, and the others get stagger's built-in node policy"
        )
    policy.not_carried.append(
        f"a pod-startup-lock lock lasted its whole --timeout ({policy.timeout} s), even once its pod was Ready; "
        f"a stagger slot ends when its pod is Ready, at holdTimeout {policy.timeout}s at the latest (minHold: "
        f"{policy.timeout}s keeps each slot that long)"
    )
    return NodePolicy(
        name="pod-startup-lock",
        node_selector=selector if selector is not None else LabelSelector(),
        throttle=ThrottleConfig(max_concurrent=MaxConcurrent(value=policy.locks)),
        hold_timeout=float(policy.timeout),
        wait_for_daemonsets=bool(policy.reached),
        daemonsets=policy.reached[0].filters if policy.reached else DaemonSetFilter(),
        dependencies=tuple(policy.dependencies),
    )
