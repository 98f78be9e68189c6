"""Which node policy applies to this node, and a sentence saying why: a pure function of the policy file
and the node's labels (the highest-priority `nodePolicies` entry whose nodeSelector matches, else the
built-in default)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stagger import policy

__all__ = ["ActivePolicy", "choose_node_policy"]


@dataclass(frozen=True)
class ActivePolicy:
    node_policy: policy.NodePolicy
    source: str  # the file path, or "built-in"
    why: str


def choose_node_policy(
    *, policy_file: policy.PolicyFile | None, source: str, node_labels: Mapping[str, str]
) -> ActivePolicy:
    """Pure: which node policy applies to a node with these labels, and a sentence saying why."""
    if policy_file is None:
        return ActivePolicy(policy.DEFAULT_NODE_POLICY, "built-in", "no policy file given: built-in default")
    if not policy_file.node_policies:
        return ActivePolicy(
            policy.DEFAULT_NODE_POLICY, "built-in", f"{source} has no nodePolicies: built-in default"
        )
    chosen = policy.select_node_policy(policy_file.node_policies, node_labels)
    if chosen is None:
        return ActivePolicy(
            policy.DEFAULT_NODE_POLICY,
            "built-in",
            f"no nodePolicies entry of {source} matches the node labels: built-in default",
        )
    return ActivePolicy(
        chosen,
        source,
        f"highest-priority nodePolicies entry of {source} whose nodeSelector matches (priority {chosen.priority})",
    )
