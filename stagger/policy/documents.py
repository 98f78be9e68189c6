"""A policy file's YAML documents (separated by `---`) put together into one `PolicyFile`: each document is
stagger's own format (staggeringPolicies, nodePolicies) or pod-pacemaker's `PacemakerConfig` (or a List of
them), read into node policies; an empty document is skipped. Names stay unique across the documents.

Paths in errors and notes are those of a one-document file when the file has one document, else they start
with the document: `documents[1].nodePolicies[0].name`, `documents[2] (PacemakerConfig "x").spec...`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stagger.policy.model import NodePolicy, PolicyError, PolicyFile, StaggeringPolicy
from stagger.policy.pacemaker import KIND, is_kubernetes_object, read_kubernetes_document
from stagger.policy.rules import Findings, error, got_text, join
from stagger.policy.schema import NOT_A_POLICY_MAPPING, read_policy_mapping

__all__ = ["parse_policy_documents"]

# A policy read from a document, and the path of its name (for a name used twice).
Named = tuple[str, StaggeringPolicy | NodePolicy]


def _read_document(document: Mapping[Any, Any], *, where: str, found: Findings) -> list[Named]:
    """The policies of one document, each with the path of its name."""
    if is_kubernetes_object(document):
        return [
            (read.where, read.policy) for read in read_kubernetes_document(document, where=where, found=found)
        ]
    parsed = read_policy_mapping(document, path=where, found=found)
    if parsed is None:
        return []
    staggering: list[Named] = [
        (join(where, f"staggeringPolicies[{index}].name"), policy)
        for index, policy in enumerate(parsed.staggering_policies)
    ]
    nodes: list[Named] = [
        (join(where, f"nodePolicies[{index}].name"), policy)
        for index, policy in enumerate(parsed.node_policies)
    ]
    return staggering + nodes


def _unique_across_documents(read: Sequence[Named], found: Findings) -> None:
    # A list of stagger's format that names a policy twice does not get here (the list says so itself): a
    # name is used twice by two documents, or by two PacemakerConfigs of one List.
    first: dict[tuple[type, str], str] = {}
    for where, policy in read:
        kind = "node policy" if isinstance(policy, NodePolicy) else "staggering policy"
        seen = first.setdefault((type(policy), policy.name), where)
        if seen != where:
            error(found, where, f"duplicate {kind} name; {seen} has it already", policy.name)


def parse_policy_documents(documents: Sequence[object], *, source: str = "<policy>") -> PolicyFile:
    """Validate and build a policy file from its YAML documents; raises PolicyError listing every problem,
    each naming its document when there are several."""
    found = Findings()
    read: list[Named] = []
    for index, document in enumerate(documents):
        where = f"documents[{index}]" if len(documents) > 1 else ""
        if document is None:
            continue
        if not isinstance(document, Mapping):
            at = f"{source}: {where}" if where else source
            found.errors.append(f"{at}: {NOT_A_POLICY_MAPPING}, or a {KIND} (got {got_text(document)})")
            continue
        read += _read_document(document, where=where, found=found)
    _unique_across_documents(read, found)
    if found.errors:
        raise PolicyError(found.errors, source=source)
    return PolicyFile(
        staggering_policies=tuple(policy for _, policy in read if isinstance(policy, StaggeringPolicy)),
        node_policies=tuple(policy for _, policy in read if isinstance(policy, NodePolicy)),
        notes=tuple(found.notes),
    )
