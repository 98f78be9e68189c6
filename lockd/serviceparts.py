"""What a lock service is made of beyond its ledger: what the node's pods say (`NodeState`), who completes
a grant (`Finisher`), who announces waits and grants (`Announcer`), and the standalone stand-ins for
them (cluster mode's are in `lockd.clusterwatch`); and what the node's gates read of them (`read_gates`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from lockd import ledger
from lockd.dependencies import Result as DependencyResult
from lockd.dependencies import failing, name_of
from lockd.pods import OtherStarting, restarts_named
from stagger import policy, throttles
from stagger.nodechecks import NO_GATES, GateInputs

__all__ = ["Announcer", "Finisher", "NoNodeState", "NodeState", "Silent", "pods_matter", "read_gates"]


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
    failing dependencies (from the checks' latest `dependencies()`), the other pods starting (`holders`,
    the pods holding slots, count through them). Runs on every ask: a policy without gates reads nothing."""
    if not (node_policy.wait_for_daemonsets or node_policy.dependencies or node_policy.count_all_starting):
        return NO_GATES
    others = (
        node_state.starting_elsewhere(node_policy, set(holders)) if node_policy.count_all_starting else []
    )
    down = failing(node_policy.dependencies, dependencies()) if node_policy.dependencies else []
    return GateInputs(
        daemonsets_waiting=node_state.daemonsets_waiting() if node_policy.wait_for_daemonsets else (),
        dependencies_down=[(name_of(dependency), error) for dependency, error in down],
        dependency_retry=dependency_retry,
        others_starting=len(others),
        others_restarting=restarts_named(others),
    )


def pods_matter(node_policy: policy.NodePolicy) -> bool:
    """Can a change of a pod that is still starting change an answer? Only through the gates that read the
    pods (countAllStarting, waitForDaemonSets)."""
    return node_policy.count_all_starting or node_policy.wait_for_daemonsets
