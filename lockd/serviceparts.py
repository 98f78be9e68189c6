"""What a lock service is made of beyond its ledger: what the node's pods say (`NodeState`), who completes
a grant (`Finisher`), who announces waits and grants (`Announcer`), and the standalone stand-ins for
them (cluster mode's are in `lockd.clusterwatch`); and what the node's gates read of them (`read_gates`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from lockd import ledger
from lockd.dependencies import Result as DependencyResult
from lockd.dependencies import failing, name_of, pause_after
from lockd.pods import OtherStarting, restarts_named
from stagger import policy, throttles
from stagger.nodechecks import NO_GATES, GateInputs

__all__ = [
    "Announcer",
    "Finisher",
    "NoNodeState",
    "NodeState",
    "Silent",
    "counted_by",
    "counts_others",
    "pods_matter",
    "read_gates",
]


class NodeState(Protocol):
    """What the pods on the node say beyond the slots lockd holds (cluster mode)."""

    def starting_elsewhere(
        self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]
    ) -> list[OtherStarting]: ...

    def daemonsets_waiting(self) -> list[str]: ...


class Finisher(Protocol):
    """Completes a reserved grant (asks the group pacer, records the grant on the pod) or says why not."""

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict: ...


class Announcer(Protocol):
    def waiting(self, waiter: ledger.Waiter) -> None: ...

    def granted(self, slot: ledger.Slot, *, node_policy: policy.NodePolicy) -> None: ...


class NoNodeState:
    def starting_elsewhere(
        self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]
    ) -> list[OtherStarting]:
        return []

    def daemonsets_waiting(self) -> list[str]:
        return []


class Silent:
    def waiting(self, waiter: ledger.Waiter) -> None:
        return None

    def granted(self, slot: ledger.Slot, *, node_policy: policy.NodePolicy) -> None:
        return None


def read_gates(
    node_policy: policy.NodePolicy,
    *,
    node_state: NodeState,
    dependencies: Callable[[], Mapping[policy.Dependency, DependencyResult]],
    dependency_retry: float,
    holders: Iterable[ledger.PodKey],
) -> GateInputs:
    """What the node policy's gates read now, and only those it sets: the DaemonSets waited for, the
    failing dependencies (from the checks' latest `dependencies()`; `dependency_retry`, the
    --dependency-interval, is how soon one without a `failInterval` is checked again), the other pods
    starting (countAllStarting, countDaemonSets; `holders`, the pods holding slots, count through them).
    Runs on every ask: a policy without gates reads nothing."""
    counting = counts_others(node_policy)
    if not (node_policy.wait_for_daemonsets or node_policy.dependencies or counting):
        return NO_GATES
    others = node_state.starting_elsewhere(node_policy, set(holders)) if counting else []
    down = failing(node_policy.dependencies, dependencies()) if node_policy.dependencies else []
    return GateInputs(
        daemonsets_waiting=node_state.daemonsets_waiting() if node_policy.wait_for_daemonsets else (),
        dependencies_down=[(name_of(dependency), error) for dependency, error in down],
        # The answer can change no sooner than a failing dependency's next check.
        dependency_retry=min(
            (pause_after(dependency, ok=False, default=dependency_retry) for dependency, _ in down),
            default=dependency_retry,
        ),
        others_starting=len(others),
        others_restarting=restarts_named(others),
        others_counted_by=counted_by(node_policy),
    )


def counts_others(node_policy: policy.NodePolicy) -> bool:
    """Do pods starting on the node without a slot count against maxConcurrent (countAllStarting, or
    countDaemonSets for DaemonSet pods)?"""
    return node_policy.count_all_starting or node_policy.count_daemonsets


def counted_by(node_policy: policy.NodePolicy) -> str:
    """The keys that count them, for the maxConcurrent reason."""
    keys = [
        ("countAllStarting", node_policy.count_all_starting),
        ("countDaemonSets", node_policy.count_daemonsets),
    ]
    return ", ".join(key for key, on in keys if on)


def pods_matter(node_policy: policy.NodePolicy) -> bool:
    """Can a change of a pod that is still starting change an answer? Only through the gates that read the
    pods (countAllStarting, countDaemonSets, waitForDaemonSets)."""
    return counts_others(node_policy) or node_policy.wait_for_daemonsets
