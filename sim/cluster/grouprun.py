"""One run of a staggering-group scenario on a simulated cluster: the workloads applied, the group judged
from the pods' states over time (`sim.cluster.groupwatch`) until every pod is Ready or the deadline passes.
Used by `python -m sim groups` and by the end-to-end tests (tests/groups_e2e)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sim.cluster.backend import ApiBackend
from sim.cluster.groupwatch import GroupPoint, GroupWatch
from sim.cluster.progress import ProgressWatch, Target
from sim.cluster.scenario import Scenario, ScenarioError
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.policy import parse_policy_text

__all__ = ["During", "GroupRun", "run_group"]

During = Callable[[SimCluster, GroupWatch], Awaitable[None]]
"""Something to do while the group starts (kill a controller replica, say), once the workloads are applied."""


@dataclass(frozen=True)
class GroupRun:
    mode: str
    pods: int
    all_ready_seconds: float | None
    """Simulated seconds from applying the workloads until every pod was Ready; None if not reached."""
    violations: list[GroupPoint]
    """Moments when more pods had started than the pacer allowed for the Ready count."""
    timeline: list[GroupPoint]
    restarts: int
    controller_log: str

    def most_started(self, low: int, high: int) -> int:
        """The most pods started at once while `low` to `high` pods were Ready."""
        return max((p.started for p in self.timeline if low <= p.ready <= high), default=0)


async def run_group(
    scenario: Scenario, *, api: ApiBackend, during: During | None = None, **cluster: Any
) -> GroupRun:
    """Run `scenario` (stagger on, its first staggering policy judged) on `api`; `cluster` overrides
    ClusterSettings fields."""
    staggering = parse_policy_text(scenario.stagger.policies).staggering_policies
    if not staggering:
        raise ScenarioError("stagger.policies: no staggeringPolicies to judge")
    policy = staggering[0]
    settings = ClusterSettings.from_scenario(scenario, **cluster)
    async with (
        SimCluster(api=api, settings=settings) as sim,
        GroupWatch(
            client=sim.client, clock=sim.clock, pacer=policy.pacer, selector=policy.label_selector
        ) as group,
        ProgressWatch(client=sim.client, clock=sim.clock, target=Target.of(scenario)) as progress,
    ):
        await sim.apply_workloads(scenario)
        if during is not None:
            await during(sim, group)
        reached = await progress.wait_done(deadline_seconds=scenario.deadline_seconds)
        log = sim.controller.log_tail(40) if sim.controller is not None else ""
    return GroupRun(
        mode=policy.mode,
        pods=sum(w.replicas for w in scenario.workloads),
        all_ready_seconds=progress.done_at if reached else None,
        violations=list(group.violations),
        timeline=list(group.timeline),
        restarts=progress.restarts,
        controller_log=log,
    )
