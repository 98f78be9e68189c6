"""pod-startup-lock (serhii-samoilenko/pod-startup-lock): three programs configured by flags alone. The lock
service (lock/config/config.go): `--locks` (1) locks at once, each held `--timeout` (10) seconds, granted
only while every `--check` endpoint answers (lock/service/checker.go: http(s) with a 2xx, tcp accepting;
10 s per request, re-checked every `--failHc` (10) / `--passHc` (60) seconds). k8s-health
(k8s-health/config/config.go): answers 200 once the node's DaemonSets are ready, the lock's `--check` on
its port (9999); `--hostNet`, `--namespace`, `--in`, `--ex` choose the DaemonSets. The init container
(init/main.go): `--duration`, `--pause`.

In stagger: one node policy with `maxConcurrent.value` = locks, `holdTimeout` = timeout,
`waitForDaemonSets` for k8s-health, and `dependencies` for the other checks. The flags come as command
lines in a text file, or in YAML: the programs' DaemonSets (its READMEs), a Helm values' `args`, a list."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from kubectl_stagger.convert.common import Conversion, Input, InvalidInput, label_map, yaml_documents
from kubectl_stagger.convert.goflags import (
    Command,
    FlagKind,
    commands_in_documents,
    commands_in_text,
    parse_flags,
)
from stagger.policy import Dependency, MaxConcurrent, NodePolicy, ThrottleConfig
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
_DEFAULT_LOCKS, _DEFAULT_TIMEOUT, _HEALTH_PORT = 1, 10, 9999
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


@dataclass
class _Policy:
    """The node policy one conversion is making, and what it says on stderr: filled in by the flags of each
    program in turn, then frozen into a NodePolicy (`_node_policy`)."""

    locks: int = _DEFAULT_LOCKS
    timeout: int = _DEFAULT_TIMEOUT
    wait_for_daemonsets: bool = False
    dependencies: list[Dependency] = field(default_factory=list)
    node_selector: Mapping[str, Any] = field(default_factory=dict)
    not_carried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _shown(flag: str, value: object) -> str:
    """A flag as it was written: `--hostNet`, `--in a:b --in c:d`, `--passHc 60`."""
    if value is True:
        return f"--{flag}"
    if isinstance(value, list):
        return " ".join(f"--{flag} {each}" for each in value)
    return f"--{flag} {value}"


def _lock(values: Mapping[str, Any], *, where: str, into: _Policy, errors: list[str]) -> None:
    into.locks = values.get("locks", _DEFAULT_LOCKS)
    into.timeout = values.get("timeout", _DEFAULT_TIMEOUT)
    if into.locks < 1:
        errors.append(f"{where}: --locks {into.locks} never grants a lock; stagger needs at least 1")
    if into.timeout < 1:
        errors.append(f"{where}: --timeout {into.timeout}: a lock must last at least a second")
    for flag in ("failHc", "passHc"):
        if flag in values:
            into.not_carried.append(
                f"{where}: {_shown(flag, values[flag])}: lockd re-checks a dependency on its own schedule (a short cache)"
            )
    if "port" in values or "host" in values:
        into.notes.append(
            f"{where}: lockd listens on its own address (the chart's hostPort 9400), not --host/--port; "
            "pod-startup-lock's init containers may keep asking it there (GET /?duration=S, lockd's compatible path)"
        )


def _health(values: Mapping[str, Any], *, where: str, into: _Policy) -> None:
    into.wait_for_daemonsets = True
    chosen = {
        "hostNet": "only the DaemonSets on the host network",
        "namespace": "only the DaemonSets of one namespace",
        "in": "only the DaemonSets with these labels",
        "ex": "not the DaemonSets with these labels",
    }
    for flag, meaning in chosen.items():
        if flag in values:
            into.not_carried.append(
                f"{where}: {_shown(flag, values[flag])} ({meaning}): stagger's waitForDaemonSets waits for every "
                "DaemonSet of the node"
            )
    for flag in ("failHc", "passHc"):
        if flag in values:
            into.not_carried.append(
                f"{where}: {_shown(flag, values[flag])}: lockd sees DaemonSet pods change at once (a watch)"
            )


def _init(values: Mapping[str, Any], *, where: str, into: _Policy) -> None:
    if "duration" in values:
        into.not_carried.append(
            f"{where}: --duration {values['duration']}: stagger's init client asks for no duration; its slot "
            "ends when the pod is Ready, or at holdTimeout"
        )
    if "pause" in values:
        into.notes.append(
            f"{where}: --pause {values['pause']}: stagger's init client long-polls instead of asking every few seconds"
        )


def _is_k8s_health(url: str, *, health_port: int) -> bool:
    """An http check on the node itself (`$(HOST_IP)`, localhost) at k8s-health's port."""
    protocol, _, address = url.partition("://")
    if protocol not in ("http", "https"):
        return False
    parts = urlsplit(url.replace("$(", "").replace(")", ""))  # `$(HOST_IP)` made a host name for the reading
    try:
        port = parts.port
    except ValueError:
        return False
    return (parts.hostname in _LOCAL_HOSTS or "$(" in address) and port == health_port


def _check(url: str, *, where: str, health_port: int, into: _Policy) -> None:
    """One `--check`: k8s-health's port is waitForDaemonSets, other http(s) and tcp endpoints dependencies."""
    protocol, _, address = url.partition("://")
    if _is_k8s_health(url, health_port=health_port):
        into.wait_for_daemonsets = True
        into.notes.append(f"{where}: --check {url} is k8s-health's port: waitForDaemonSets: true")
        return
    if "$(" in url:
        into.not_carried.append(
            f"{where}: --check {url}: Kubernetes expands $(VAR) in a container's args, not in a policy "
            "file; add it to dependencies with the address written out"
        )
        return
    if protocol in ("http", "https") and urlsplit(url).hostname:
        into.dependencies.append(Dependency(kind="http", target=url, timeout=_CHECK_TIMEOUT))
        return
    tcp = _TCP.fullmatch(address) if protocol == "tcp" else None
    if tcp is not None and 1 <= int(tcp.group(2)) <= 65535:
        into.dependencies.append(Dependency(kind="tcp", target=address, timeout=_CHECK_TIMEOUT))
        return
    into.not_carried.append(
        f"{where}: --check {url}: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only"
    )


def _program_values(
    found: Sequence[tuple[Program, Command]], *, errors: list[str]
) -> list[tuple[Program, Command, Mapping[str, Any]]]:
    parsed_all = []
    for program, command in found:
        parsed = parse_flags(command.words, _SPECS[program])
        errors.extend(f"{command.where}: {program}: {problem}" for problem in parsed.problems)
        parsed_all.append((program, command, parsed.values))
    return parsed_all


def convert(inputs: Sequence[Input], *, forced: bool = False) -> Conversion:
    """`forced`: the inputs are pod-startup-lock's (`--from`), so command lines of generic flags are its too."""
    errors: list[str] = []
    found = [pair for each in inputs for pair in commands(each.text, source=each.source, assume_lock=forced)]
    parsed = _program_values(found, errors=errors)
    policy = _Policy()
    locks = [(command, values) for program, command, values in parsed if program == "lock"]
    health_ports = [
        values.get("port", _HEALTH_PORT) for program, _, values in parsed if program == "k8s-health"
    ]
    for program, command, values in parsed:
        if program == "k8s-health":
            _health(values, where=command.where, into=policy)
        elif program == "init":
            _init(values, where=command.where, into=policy)
    if locks:
        (command, values), *others = locks
        _lock(values, where=command.where, into=policy, errors=errors)
        for url in values.get("check", []):
            _check(url, where=command.where, health_port=(health_ports or [_HEALTH_PORT])[0], into=policy)
        policy.not_carried += [
            f"{other.where}: another lock service's flags: only the first is carried over"
            for other, _ in others
        ]
        policy.node_selector = command.node_selector
    else:
        policy.notes.append(
            f"no lock service flags: its defaults, --locks {_DEFAULT_LOCKS} --timeout {_DEFAULT_TIMEOUT}"
        )
    if errors:
        raise InvalidInput(errors)
    node = _node_policy(policy)  # it says its own lines too: before they are taken
    return Conversion(node_policies=(node,), not_carried=tuple(policy.not_carried), notes=tuple(policy.notes))


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
        wait_for_daemonsets=policy.wait_for_daemonsets,
        dependencies=tuple(policy.dependencies),
    )
