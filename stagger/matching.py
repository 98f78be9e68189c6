"""Which staggering policies a pod is in, under which grouping keys, and what that puts on the pod.

A pod is in a policy when the policy's labelSelector matches its labels and the grouping expression
yields a key for it (a policy without an expression groups all its pods under the key ""; one whose
expression finds nothing in this pod does not apply to it). Pacing is per (policy name, key) pair: two
pods in different combinations of policies that share (image-pull, nginx:1.25) share image-pull's pacer
for nginx:1.25. A pod matched by a policy's bypassLabelSelector is never held for that policy, but still
counts against its pair's pacing.

What admission writes on the pod, and what the controller reads back:
- label `<prefix>/group`: a hash of every matched (policy, key) pair, a valid label value (lockd asks the
  group pacer service for pods that carry it);
- annotation `<prefix>/policies`: the matched policy names, comma-joined, for people;
- annotation `<prefix>/group-key`: JSON `{"<policy>": "<key>", ...}` of every matched pair (bypassed ones
  too: they count), compact with sorted keys. This is what the controller counts pods by.

Pure functions of the pod and the policies: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stagger.policy import Hold, Mode, StaggeringPolicy

__all__ = [
    "GROUP_HASH_CHARS",
    "Pair",
    "Placement",
    "PolicyMatch",
    "counted_groups",
    "group_key_annotation",
    "group_label_value",
    "match_pod",
    "pacer_groups",
    "parse_group_key",
    "pod_labels",
    "policies_annotation",
]

Pair = tuple[str, str]
"""(policy name, grouping key): the unit a pacer counts."""

# 20 hex digits of SHA-256 are 80 bits: no two combinations of a cluster collide in practice, and with the
# "g" in front the label value stays far below the 63-character limit.
GROUP_HASH_CHARS = 20


@dataclass(frozen=True)
class PolicyMatch:
    """The pod is in `policy_name`'s group `key`; `bypassed`: it is never held for this policy."""

    policy_name: str
    key: str
    bypassed: bool


@dataclass(frozen=True)
class Placement:
    """Every staggering policy a pod is in, in policy-file order, and what follows from them.

    `mode` is the first matched policy's mode. Policies that match the same pods should share a mode:
    a pod is held one way only, so a different mode of a later policy is ignored and `warnings` says so.
    `max_blocked_duration` is the smallest of the policies the pod waits for (non-bypassed), or of all
    matched policies when it is bypassed in every one (it then waits for none of them); math.inf when they
    all say "never" (admission then keeps the init client at the controller's maxWait, and the group book
    releases the pod after that: `stagger.groupbook.decisions`).
    """

    matches: tuple[PolicyMatch, ...]
    group: str
    mode: Mode
    max_blocked_duration: float
    warnings: tuple[str, ...] = ()
    hold: Hold = "nodeSelector"  # the first matched policy's, like `mode` (evict mode only)

    @property
    def fully_bypassed(self) -> bool:
        """Bypassed in every matched policy: the pod is never held, only counted."""
        return all(match.bypassed for match in self.matches)


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    """`metadata.labels` of a pod; anything that is not a string-to-string entry is left out."""
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {key: value for key, value in labels.items() if isinstance(key, str) and isinstance(value, str)}


def _grouping_key(policy: StaggeringPolicy, pod: Mapping[str, Any]) -> str | None:
    if policy.grouping is None:
        return ""
    # An expression that finds nothing (a pod without the field) means the policy does not group this pod,
    # which is different from finding an empty string.
    if not policy.grouping.find(pod):
        return None
    return policy.grouping_key(pod)


def group_label_value(pairs: Sequence[Pair]) -> str:
    """The `<prefix>/group` label value of a pod in `pairs`: "g" and a stable hash of the sorted pairs."""
    text = json.dumps(sorted(pairs), separators=(",", ":"))
    return "g" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:GROUP_HASH_CHARS]


def match_pod(pod: Mapping[str, Any], policies: Sequence[StaggeringPolicy]) -> Placement | None:
    """The policies `pod` is in (file order), or None when it is in none.

    Exceptions of a grouping expression are not caught here: the caller decides (admission lets the pod
    through unchanged).
    """
    labels = pod_labels(pod)
    matched: list[tuple[StaggeringPolicy, PolicyMatch]] = []
    for policy in policies:
        if not policy.label_selector.matches(labels):
            continue
        key = _grouping_key(policy, pod)
        if key is None:
            continue
        bypass = policy.bypass_label_selector
        matched.append((policy, PolicyMatch(policy.name, key, bypass is not None and bypass.matches(labels))))
    if not matched:
        return None
    first = matched[0][0]
    warnings = tuple(
        f"stagger: staggering policy {policy.name} has mode {policy.mode}, but {first.name} (mode "
        f"{first.mode}) matched first; the pod is paced in mode {first.mode}"
        for policy, _ in matched[1:]
        if policy.mode != first.mode
    )
    waited_for = [policy for policy, match in matched if not match.bypassed] or [p for p, _ in matched]
    matches = tuple(match for _, match in matched)
    return Placement(
        matches=matches,
        group=group_label_value([(match.policy_name, match.key) for match in matches]),
        mode=first.mode,
        max_blocked_duration=min(policy.max_blocked_duration for policy in waited_for),
        warnings=warnings,
        hold=first.hold,
    )


def pacer_groups(placement: Placement) -> tuple[Pair, ...]:
    """The (policy, key) pairs whose pacers the pod waits for: its non-bypassed matches."""
    return tuple((match.policy_name, match.key) for match in placement.matches if not match.bypassed)


def counted_groups(placement: Placement) -> tuple[Pair, ...]:
    """Every (policy, key) pair the pod counts in, bypassed ones included."""
    return tuple((match.policy_name, match.key) for match in placement.matches)


def policies_annotation(placement: Placement) -> str:
    """The `<prefix>/policies` annotation: the matched policy names, comma-joined, in file order."""
    return ",".join(match.policy_name for match in placement.matches)


def group_key_annotation(placement: Placement) -> str:
    """The `<prefix>/group-key` annotation: `{"<policy>": "<key>"}` of every match, compact, sorted keys."""
    return json.dumps(
        {match.policy_name: match.key for match in placement.matches},
        sort_keys=True,
        separators=(",", ":"),
    )


def parse_group_key(text: object) -> dict[str, str] | None:
    """The pairs of a `<prefix>/group-key` annotation, or None when it is not a JSON object of strings."""
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: deeply nested brackets
        return None
    if not isinstance(value, dict):
        return None
    pairs = {policy: key for policy, key in value.items() if isinstance(key, str)}
    return pairs if len(pairs) == len(value) else None
