"""One conversion of several files: each file's peer found (or named by `--from`), the files of one peer
converted together (pod-startup-lock's lock and k8s-health flags make one node policy), the policies of
every peer put in one policy file with unique names, written as the policy file's YAML
(`stagger.policy.render`) and loaded back by stagger's own loader before it is shown: what `convert`
prints is a file lockd and the controller load, meaning exactly the policies made here. What the converted
cluster still needs comes last among the notes: stagger's chart values (and one `--set` line of those that
are always needed), then the peers' objects to delete."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import yaml

from kubectl_stagger.convert import herd, pacemaker, startuplock, straggler
from kubectl_stagger.convert.common import (
    ChartValue,
    Conversion,
    Input,
    Peer,
    UnknownFormat,
    unique_name,
    yaml_documents,
    yaml_problem,
)
from kubectl_stagger.convert.detect import detect
from stagger import policy
from stagger.policy.render import policy_document

__all__ = ["Converted", "OutputDoesNotLoad", "convert_inputs", "helm_set", "render_text"]

_P = TypeVar("_P", policy.StaggeringPolicy, policy.NodePolicy)

# Each converter with the files of its peer, and whether `--from` named that peer.
_CONVERTERS: dict[Peer, Callable[[Sequence[Input], bool], Conversion]] = {
    "straggler": lambda inputs, forced: straggler.convert(inputs),
    "pod-pacemaker": lambda inputs, forced: pacemaker.convert(inputs),
    "thundering-herd": lambda inputs, forced: herd.convert(inputs),
    "pod-startup-lock": lambda inputs, forced: startuplock.convert(inputs, forced=forced),
}

# With `--from`, each file must still hold that peer's configuration: said, rather than printing nothing.
_LOOKS_LIKE: dict[Peer, Callable[[str], bool]] = {
    "straggler": lambda text: straggler.is_straggler(yaml_documents(text) or []),
    "pod-pacemaker": lambda text: pacemaker.is_pacemaker(yaml_documents(text) or []),
    "thundering-herd": lambda text: herd.is_herd(yaml_documents(text) or []),
    "pod-startup-lock": lambda text: startuplock.is_startup_lock(text, assume_lock=True),
}


@dataclass(frozen=True)
class Converted:
    """The policy file, its YAML as printed, and the lines for stderr (`notes` ends with the chart values
    and the objects no longer needed, as printed)."""

    policy_file: policy.PolicyFile
    text: str
    not_carried: tuple[str, ...]
    notes: tuple[str, ...]
    chart_values: tuple[ChartValue, ...] = ()
    no_longer_needed: tuple[str, ...] = ()


class OutputDoesNotLoad(RuntimeError):
    """The YAML made does not load as the policies made (a bug in convert, not in the input)."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(self.errors))


def _grouped(inputs: Sequence[Input], *, peer: Peer | None) -> dict[Peer, list[Input]]:
    groups: dict[Peer, list[Input]] = {}
    for each in inputs:
        if peer is not None and not _LOOKS_LIKE[peer](each.text):
            problem = yaml_problem(each.text) if peer != "pod-startup-lock" else None
            said = f" (not YAML: {problem})" if problem else ""
            raise UnknownFormat(f"{each.source}: no {peer} configuration found in it{said} (--from {peer})")
        groups.setdefault(peer or detect(each.text, source=each.source), []).append(each)
    return groups


def _unique(
    policies: Sequence[_P], *, peer: Peer, taken: set[str], kind: str
) -> tuple[tuple[_P, ...], list[str]]:
    """`policies` with names no policy of another peer has (a name is unique in a file), and what was renamed."""
    notes: list[str] = []
    renamed: list[_P] = []
    for each in policies:
        name = unique_name(each.name, taken=taken)
        if name != each.name:
            notes.append(
                f"{peer}: the {kind} policy {each.name!r} is named {name!r} (a name is unique in a file)"
            )
        renamed.append(replace(each, name=name))
    return tuple(renamed), notes


def _shadowed(nodes: Sequence[policy.NodePolicy]) -> list[str]:
    """Node policies that never apply: an earlier one has the same nodeSelector and priority (ties: the
    first in the file wins)."""
    lines = []
    for index, each in enumerate(nodes):
        for earlier in nodes[:index]:
            if (earlier.node_selector, earlier.priority) == (each.node_selector, each.priority):
                lines.append(
                    f"the node policy {each.name!r} never applies: {earlier.name!r} comes first with the same "
                    f"nodeSelector and priority {each.priority} (give one a higher priority or another nodeSelector)"
                )
                break
    return lines


def _set_value(value: Any) -> str:
    """A value as `helm --set` reads it: a list as {a,b}, a string as it is, others as YAML writes them."""
    if isinstance(value, list | tuple):
        return "{" + ",".join(_set_value(each) for each in value) + "}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def helm_set(values: Sequence[ChartValue]) -> str:
    """The `--set` flags of the values needed whatever the user chooses (quoted where a shell would split
    or expand them)."""
    flags = []
    for each in values:
        if each.when:
            continue
        flag = f"{each.key}={_set_value(each.value)}"
        flags.append(f"--set '{flag}'" if any(c in flag for c in "{}, *?[]$") else f"--set {flag}")
    return " ".join(flags)


def _still_needed(values: Sequence[ChartValue], obsolete: Sequence[str]) -> list[str]:
    """The notes that end the output: each chart value, the `--set` line, what to delete."""
    lines = []
    for each in values:
        shown = json.dumps(each.value) if not isinstance(each.value, str) else each.value
        when = f" ({each.when})" if each.when else ""
        lines.append(f"chart value{when}: {each.key}: {shown}: {each.why}")
    if flags := helm_set(values):
        lines.append(f"chart values as flags of helm install or upgrade: {flags}")
    lines += [f"no longer needed: {each}" for each in obsolete]
    return lines


def render_text(policy_file: policy.PolicyFile, *, sources: Sequence[tuple[Peer, Sequence[Input]]]) -> str:
    said = "; ".join(f"{peer} ({', '.join(each.source for each in group)})" for peer, group in sources)
    header = (
        f"# A stagger policy file, converted by `kubectl stagger convert` from {said}.\n"
        "# What could not be carried over, the chart values it needs and what to delete were said on stderr.\n"
        "# Check it: kubectl stagger check-policy FILE\n"
    )
    return header + yaml.safe_dump(policy_document(policy_file), sort_keys=False, allow_unicode=True)


def convert_inputs(inputs: Sequence[Input], *, peer: Peer | None = None) -> Converted:
    """Raises UnknownFormat, InvalidInput (the peer would refuse it too) or OutputDoesNotLoad."""
    groups = _grouped(inputs, peer=peer)
    staggering: list[policy.StaggeringPolicy] = []
    nodes: list[policy.NodePolicy] = []
    not_carried: list[str] = []
    notes: list[str] = []
    values: list[ChartValue] = []
    obsolete: list[str] = []
    taken: dict[str, set[str]] = {"staggering": set(), "node": set()}
    for found, group in groups.items():
        conversion = _CONVERTERS[found](group, peer is not None)
        found_staggering, renamed = _unique(
            conversion.staggering_policies, peer=found, taken=taken["staggering"], kind="staggering"
        )
        found_nodes, renamed_nodes = _unique(
            conversion.node_policies, peer=found, taken=taken["node"], kind="node"
        )
        staggering += found_staggering
        nodes += found_nodes
        notes += renamed + renamed_nodes
        not_carried += conversion.not_carried
        notes += conversion.notes
        values += [each for each in conversion.chart_values if each not in values]
        obsolete += [each for each in conversion.no_longer_needed if each not in obsolete]
    not_carried += _shadowed(nodes)
    policy_file = policy.PolicyFile(staggering_policies=tuple(staggering), node_policies=tuple(nodes))
    text = render_text(policy_file, sources=list(groups.items()))
    try:
        loaded = policy.parse_policy_text(text, source="<converted>")
    except policy.PolicyError as error:
        raise OutputDoesNotLoad(error.errors) from error
    if loaded != policy_file:
        raise OutputDoesNotLoad([f"it loads as {loaded!r}, not as {policy_file!r}"])
    return Converted(
        policy_file=policy_file,
        text=text,
        not_carried=tuple(not_carried),
        notes=(*notes, *_still_needed(values, obsolete)),
        chart_values=tuple(values),
        no_longer_needed=tuple(obsolete),
    )
