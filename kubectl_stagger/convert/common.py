"""What every peer's converter shares: the peers' names, one input file, what a conversion gives (policies,
and the lines for stderr), the errors that stop one, and the readings the peers' Go code does the same
way: keys matched as Go's encoding/json matches struct fields, names made DNS-1123 labels, plain label maps
checked as the API server checks them."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import yaml

from stagger.objectnames import DNS1123_LABEL_MAX, is_dns1123_label
from stagger.policy import NodePolicy, StaggeringPolicy
from stagger.policy.rules import fold_key, lookup
from stagger.selectors import LabelSelector, label_key_problem, label_value_problem

__all__ = [
    "PEERS",
    "ChartValue",
    "Conversion",
    "Input",
    "InvalidInput",
    "Peer",
    "UnknownFormat",
    "go_get",
    "label_map",
    "policy_name",
    "unique_name",
    "unknown_keys",
    "yaml_documents",
    "yaml_problem",
]

logger = logging.getLogger(__name__)

Peer = Literal["straggler", "pod-pacemaker", "thundering-herd", "pod-startup-lock"]
PEERS: tuple[Peer, ...] = get_args(Peer)


@dataclass(frozen=True)
class Input:
    """One file given to `convert`: where it came from (for messages) and its text."""

    source: str
    text: str


@dataclass(frozen=True)
class ChartValue:
    """A value of stagger's chart the converted cluster needs, as a dotted key (`lockd.podStartupLock.port`)
    and its value; `why` in a few words; `when`: the condition under which it is needed ("" always), a
    conditional value is not part of the `--set` line `convert` prints."""

    key: str
    value: Any
    why: str
    when: str = ""


@dataclass(frozen=True)
class Conversion:
    """What a peer's configuration means in stagger. `not_carried` are the things it says that stagger
    cannot (each one sentence: what, and why); `notes` what a reader should know about how the rest was
    carried over (the stagger equivalent chosen, an opt-in label); `chart_values` what stagger's chart must
    be given for the peer's pods and clients to work unchanged; `no_longer_needed` the peer's objects to
    delete once stagger runs (each one sentence)."""

    staggering_policies: tuple[StaggeringPolicy, ...] = ()
    node_policies: tuple[NodePolicy, ...] = ()
    not_carried: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    chart_values: tuple[ChartValue, ...] = ()
    no_longer_needed: tuple[str, ...] = ()


class UnknownFormat(ValueError):
    """The input is none of the peers' formats (or not the one `--from` named)."""


class InvalidInput(ValueError):
    """The input is a peer's format but the peer itself would refuse it (it would not start, or the API
    server would not take the object); `errors` names each problem, each line beginning with the file."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(self.errors))


def yaml_documents(text: str) -> list[Any] | None:
    """Every YAML document of `text` (plain safe YAML), or None when it is not YAML at all."""
    try:
        return [document for document in yaml.safe_load_all(text) if document is not None]
    except (yaml.YAMLError, RecursionError, ValueError):
        return None


def yaml_problem(text: str) -> str | None:
    """Why `text` is not YAML (the parser's first line, with where), or None when it is."""
    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{error.problem or error.context or 'not YAML'}{where}"
    except (yaml.YAMLError, RecursionError, ValueError) as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def go_get(mapping: Mapping[Any, Any], field: str) -> Any:
    """`mapping[field]` as Go's encoding/json (and so sigs.k8s.io/yaml) fills a struct field: the key
    spelt exactly, else one that equals it under Go's folding; None when absent. stagger's own policy file
    is read the same way: this is its walker's lookup, typed for the converters' dict walking."""
    return lookup(mapping, field)


def unknown_keys(mapping: Mapping[Any, Any], fields: Iterable[str]) -> list[str]:
    """The keys of `mapping` that no field matches (Go's decoder drops them without a word)."""
    known = {fold_key(field) for field in fields}
    return [str(key) for key in mapping if not (isinstance(key, str) and fold_key(key) in known)]


_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]+")


def policy_name(raw: object, *, fallback: str) -> str:
    """A DNS-1123 label for a stagger policy from a peer's name: lowercased, other characters made '-',
    cut to 63; `fallback` when nothing is left."""
    text = _NOT_IN_LABEL.sub("-", str(raw).lower()) if raw is not None else ""
    text = text[:DNS1123_LABEL_MAX].strip("-")
    return text if text and is_dns1123_label(text) else fallback


def unique_name(name: str, *, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`... when taken (cut to stay a DNS-1123 label); recorded in `taken`."""
    found, number = name, 2
    while found in taken:
        suffix = f"-{number}"
        found = name[: DNS1123_LABEL_MAX - len(suffix)].rstrip("-") + suffix
        number += 1
    taken.add(found)
    return found


def label_map(raw: object, *, path: str) -> tuple[LabelSelector | None, list[str], list[str]]:
    """A peer's `map[string]string` of labels as a selector, the problems that make it none (an entry no pod
    label can equal: left out, the selector would match more pods than the peer's), and notes: a scalar
    value read as its text (`1` as "1"), as sigs.k8s.io/yaml reads a number or a bool for a string."""
    if raw is None:
        return None, [], []
    if not isinstance(raw, Mapping):
        return None, [f"{path}: not a map of labels (got {raw!r})"], []
    labels: dict[str, str] = {}
    problems: list[str] = []
    notes: list[str] = []
    for key, value in raw.items():
        text = value if isinstance(value, str) else _scalar_text(value)
        problem = label_key_problem(key) or (
            label_value_problem(text) if text is not None else "not a label value"
        )
        if problem:
            problems.append(f"{path}[{key!r}]: {problem} (got {value!r})")
            continue
        assert isinstance(key, str) and text is not None  # for mypy: checked above
        if not isinstance(value, str):
            notes.append(f"{path}[{key!r}]: read as the label value {text!r} (got {value!r}, not a string)")
        labels[key] = text
    return (None if problems else LabelSelector.from_labels(labels)), problems, notes


def _scalar_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None
