"""What a lock service is made of beyond its ledger: what the node's pods say (`NodeState`), who completes
a grant (`Finisher`), who announces waits and grants (`Announcer`), and the standalone stand-ins for
them. Cluster mode's are in `lockd.cluster`."""

from __future__ import annotations

from typing import Protocol

from lockd import ledger
from lockd.pods import OtherStarting
from stagger import policy, throttles

__all__ = ["Announcer", "Finisher", "NoNodeState", "NodeState", "Silent"]


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
