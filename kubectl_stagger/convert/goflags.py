"""Command lines as Go's `flag` package reads them (pod-startup-lock's programs use it): `-name value`,
`--name value`, `-name=value`, a bool flag alone (`--hostNet`); flags end at `--` or at the first argument
that is not a flag; an unknown flag stops the program ("flag provided but not defined"). Also: where the
command lines are in a text (one a line, `\\` continues a line, `#` comments) or in YAML (a container's
`command` and `args`, a Helm values' `args`, a bare list)."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = ["Command", "FlagKind", "Parsed", "commands_in_documents", "commands_in_text", "parse_flags"]

logger = logging.getLogger(__name__)

FlagKind = Literal["string", "int", "bool", "list"]


@dataclass(frozen=True)
class Command:
    """One command line: its words, the container image it runs in (when known), and, for a container of a
    pod template: the node selector and host network of its pods (a DaemonSet's), its environment (`env`:
    each variable as `fieldRef:<path>`, `value:<text>` or `other`; None for a command line of a text,
    whose environment is unknown), whether it has `envFrom` too, and the object it is in ("DaemonSet x")."""

    words: tuple[str, ...]
    where: str
    image: str = ""
    node_selector: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] | None = None
    env_from: bool = False
    host_network: bool = False
    owner: str = ""


@dataclass(frozen=True)
class _Pod:
    """What a container's command line inherits from the pod template (and the object) around it."""

    node_selector: Mapping[str, Any] = field(default_factory=dict)
    host_network: bool = False
    owner: str = ""


@dataclass(frozen=True)
class Parsed:
    """The flags given (as written: a list for repeated ones), and why the rest could not be read."""

    values: Mapping[str, Any]
    problems: tuple[str, ...] = ()


def _flag_value(kind: FlagKind, name: str, text: str) -> tuple[Any, str | None]:
    if kind == "int":
        try:
            return int(text, 0), None  # strconv.ParseInt(text, 0, 64): 0x.., 0o.., 1_000
        except ValueError:
            return None, f"invalid value {text!r} for flag -{name}: parse error"
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("1", "t", "true"):
            return True, None
        if lowered in ("0", "f", "false"):
            return False, None
        return None, f"invalid boolean value {text!r} for -{name}"
    return text, None


def parse_flags(words: Sequence[str], spec: Mapping[str, FlagKind]) -> Parsed:
    """`words` after the program (the words before the first flag: `lock`, `go run lock/main.go`)."""
    start = next(
        (index for index, word in enumerate(words) if word.startswith("-") and word != "-"), len(words)
    )
    values: dict[str, Any] = {}
    problems: list[str] = []
    rest = list(words[start:])
    while rest:
        word = rest.pop(0)
        if word == "--" or not word.startswith("-") or word == "-":
            break
        name = word[2:] if word.startswith("--") else word[1:]
        if not name or name.startswith(("-", "=")):
            problems.append(f"bad flag syntax: {word}")
            break
        name, has_value, value = name.partition("=")
        kind = spec.get(name)
        if kind is None:
            problems.append(f"flag provided but not defined: -{name}")
            continue
        if not has_value and kind != "bool":
            if not rest:
                problems.append(f"flag needs an argument: -{name}")
                break
            value = rest.pop(0)
        parsed, problem = _flag_value(kind, name, value) if (has_value or kind != "bool") else (True, None)
        if problem:
            problems.append(problem)
        elif kind == "list":
            values.setdefault(name, []).append(parsed)
        else:
            values[name] = parsed
    return Parsed(values=values, problems=tuple(problems))


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) with `\\`-continued lines joined and comments and blanks left out."""
    pending, first = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole, pending = (pending + line).strip(), ""
        if whole and not whole.startswith("#"):
            yield first, whole
    if pending.strip():
        yield first, pending.strip()


def commands_in_text(text: str, *, source: str) -> list[Command]:
    commands: list[Command] = []
    for number, line in _logical_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if any(word.startswith("-") for word in words):
            commands.append(Command(words=tuple(words), where=f"{source}:{number}"))
    return commands


def _image(raw: object) -> str:
    if isinstance(raw, Mapping):  # Helm values: {repository, tag}
        return f"{raw.get('repository') or ''}:{raw.get('tag') or ''}"
    return str(raw) if raw is not None else ""


def _strings(raw: object) -> list[str] | None:
    if isinstance(raw, list) and all(isinstance(each, str | int | float) for each in raw):
        return [str(each) for each in raw]
    return None


def _env(raw: object) -> dict[str, str]:
    """A container's `env` as `Command.env` spells it."""
    env: dict[str, str] = {}
    for each in raw if isinstance(raw, list) else []:
        if not isinstance(each, Mapping) or not isinstance(each.get("name"), str):
            continue
        source = each.get("valueFrom")
        field_ref = source.get("fieldRef") if isinstance(source, Mapping) else None
        if isinstance(field_ref, Mapping) and isinstance(field_ref.get("fieldPath"), str):
            env[each["name"]] = f"fieldRef:{field_ref['fieldPath']}"
        elif source is None:
            env[each["name"]] = f"value:{each.get('value') or ''}"
        else:
            env[each["name"]] = "other"
    return env


def _pod(node: Mapping[Any, Any], pod: _Pod) -> _Pod:
    """The pod around a mapping: a pod spec (it has `containers`) sets the node selector and host network;
    a Kubernetes object names the owner."""
    if isinstance(node.get("kind"), str) and isinstance(node.get("metadata"), Mapping):
        pod = _Pod(pod.node_selector, pod.host_network, f"{node['kind']} {node['metadata'].get('name', '')}")
    if isinstance(node.get("containers"), list):
        selector = node.get("nodeSelector")
        pod = _Pod(
            selector if isinstance(selector, Mapping) else {}, node.get("hostNetwork") is True, pod.owner
        )
    return pod


def _walk(node: object, *, where: str, pod: _Pod) -> Iterator[Command]:
    if isinstance(node, Mapping):
        pod = _pod(node, pod)
        words = (_strings(node.get("command")) or []) + (_strings(node.get("args")) or [])
        if words:
            is_container = "name" in node and "image" in node
            yield Command(
                tuple(words),
                where,
                image=_image(node.get("image")),
                node_selector=pod.node_selector,
                env=_env(node.get("env")) if is_container else None,
                env_from=bool(node.get("envFrom")),
                host_network=pod.host_network,
                owner=pod.owner,
            )
        for key, value in node.items():
            if key not in ("command", "args"):
                yield from _walk(value, where=f"{where}.{key}" if where else str(key), pod=pod)
    elif isinstance(node, list):
        listed = _strings(node)
        if listed:
            yield Command(
                tuple(listed), where or "the list", node_selector=pod.node_selector, owner=pod.owner
            )
            return
        for index, value in enumerate(node):
            yield from _walk(value, where=f"{where}[{index}]", pod=pod)


def commands_in_documents(documents: Sequence[Any], *, source: str) -> list[Command]:
    """Every command line of YAML documents: containers' `command` + `args` (with the image, the container's
    env and the pod template's nodeSelector and hostNetwork), a Helm values' `args`, a bare list of words."""
    commands: list[Command] = []
    for index, document in enumerate(documents):
        prefix = f"{source}: " + (f"document {index + 1}: " if len(documents) > 1 else "")
        for command in _walk(document, where="", pod=_Pod()):
            if any(word.startswith("-") for word in command.words):
                commands.append(replace(command, where=prefix + command.where))
    return commands
