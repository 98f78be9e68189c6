"""Which node policy applies to this node, and a sentence saying why: a pure function of the policy file,
the cluster's PacemakerConfig objects (`--pacemaker-configs`, read by `lockd.pacemakerwatch`) and the
node's labels. The highest-priority node policy whose nodeSelector matches applies, else the built-in
default; the file's and the objects' compete as one list with the file's first, so that of equal
priorities the file's wins (and of the file's, the first), then the objects' by name. An object with the
name of one of the file's node policies is left out: the file's wins."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stagger import policy

__all__ = ["OBJECT_SOURCE", "ActivePolicy", "choose_node_policy", "object_source", "shadowed_objects"]

OBJECT_SOURCE = "PacemakerConfig/"
"""The `source` of a node policy read from a PacemakerConfig object: this and the object's name."""


def object_source(name: str) -> str:
    return f"{OBJECT_SOURCE}{name}"


@dataclass(frozen=True)
class ActivePolicy:
    node_policy: policy.NodePolicy
    source: str  # the file path, "PacemakerConfig/<name>", or "built-in"
    why: str


def shadowed_objects(
    *, policy_file: policy.PolicyFile | None, objects: Sequence[policy.NodePolicy]
) -> list[str]:
    """Pure: the names of the objects left out because the file has a node policy of that name."""
    in_file = {node_policy.name for node_policy in policy_file.node_policies} if policy_file else set()
    return sorted({node_policy.name for node_policy in objects} & in_file)


def _candidates(
    file_policies: Sequence[policy.NodePolicy], objects: Sequence[policy.NodePolicy]
) -> list[policy.NodePolicy]:
    """One list, the file's first (in its order), then the objects' by name (a watch delivers them in no
    order worth keeping), none with a name the file has."""
    in_file = {node_policy.name for node_policy in file_policies}
    kept = sorted((o for o in objects if o.name not in in_file), key=lambda node_policy: node_policy.name)
    return [*file_policies, *kept]


def choose_node_policy(
    *,
    policy_file: policy.PolicyFile | None,
    source: str,
    node_labels: Mapping[str, str],
    objects: Sequence[policy.NodePolicy] = (),
) -> ActivePolicy:
    """Pure: which node policy applies to a node with these labels, and a sentence saying why."""
    file_policies = policy_file.node_policies if policy_file is not None else ()
    if not objects:
        if policy_file is None:
            return ActivePolicy(
                policy.DEFAULT_NODE_POLICY, "built-in", "no policy file given: built-in default"
            )
        if not file_policies:
            return ActivePolicy(
                policy.DEFAULT_NODE_POLICY, "built-in", f"{source} has no nodePolicies: built-in default"
            )
    chosen = policy.select_node_policy(_candidates(file_policies, objects), node_labels)
    if chosen is None:
        among = f"nodePolicies entry of {source}" if policy_file is not None else "node policy"
        among += " or PacemakerConfig" if objects else ""
        return ActivePolicy(
            policy.DEFAULT_NODE_POLICY,
            "built-in",
            f"no {among} matches the node labels: built-in default",
        )
    ties = "; PacemakerConfigs too, the file's winning ties" if objects else ""
    if any(chosen is node_policy for node_policy in file_policies):
        return ActivePolicy(
            chosen,
            source,
            f"highest-priority nodePolicies entry of {source} whose nodeSelector matches "
            f"(priority {chosen.priority}{ties})",
        )
    return ActivePolicy(
        chosen,
        object_source(chosen.name),
        f"PacemakerConfig {chosen.name}: the highest-priority node policy whose nodeSelector matches "
        f"(priority {chosen.priority}{ties})",
    )
