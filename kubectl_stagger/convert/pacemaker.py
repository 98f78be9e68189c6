"""pod-pacemaker (woehrl01/pod-pacemaker): `PacemakerConfig` objects (apiVersion woehrl.net/v1alpha;
spec.nodeSelector, priority and throttleConfig: rateLimit, maxConcurrent, cpu, io, loadAvg, its numbers
written as strings where its CRD takes strings). stagger's policy loader reads them itself, as node
policies (`stagger.policy.parse_policy_text`, which accepts files of PacemakerConfig documents and says in
`PolicyFile.notes` what it read in another spelling): this is that one reader, not a second one, so what
`convert` prints is what lockd would do with the same file."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubectl_stagger.convert.common import Conversion, Input, InvalidInput
from stagger import policy
from stagger.policy.pacemaker import API_VERSION, KIND, LIST_KINDS

__all__ = ["convert", "is_pacemaker"]

logger = logging.getLogger(__name__)


def _is_config(document: object) -> bool:
    # Its kind, or its API group alone: the reader then says what else is wrong with it.
    return isinstance(document, Mapping) and (
        document.get("kind") == KIND
        or str(document.get("apiVersion", "")).startswith(API_VERSION.split("/")[0] + "/")
    )


def is_pacemaker(documents: Sequence[Any]) -> bool:
    """Any document a PacemakerConfig, or a List of them (`kubectl get pacemakerconfigs -o yaml`)."""
    return any(
        _is_config(each)
        or (
            isinstance(each, Mapping)
            and each.get("kind") in LIST_KINDS
            and isinstance(each.get("items"), list)
            and any(_is_config(item) for item in each["items"])
        )
        for each in documents
    )


def convert(inputs: Sequence[Input]) -> Conversion:
    errors: list[str] = []
    staggering: list[policy.StaggeringPolicy] = []
    nodes: list[policy.NodePolicy] = []
    notes: list[str] = []
    for each in inputs:
        try:
            loaded = policy.parse_policy_text(each.text, source=each.source)
        except policy.PolicyError as error:
            # The loader's errors name a path in the file; said here with the file, as several may be given.
            errors.extend(
                line if line.startswith(each.source) else f"{each.source}: {line}"
                for line in error.errors or (str(error),)
            )
            continue
        staggering += loaded.staggering_policies
        nodes += loaded.node_policies
        notes += (f"{each.source}: {note}" for note in loaded.notes)
    if errors:
        raise InvalidInput(errors)
    return Conversion(staggering_policies=tuple(staggering), node_policies=tuple(nodes), notes=tuple(notes))
