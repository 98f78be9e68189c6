"""The leader killed mid-herd: the seed scenario (lock mode) on the simulated cluster with two controller
replicas electing their leader on a Lease (3 s lease, 2 s renew deadline, 0.5 s retry), behind stand-ins
for the chart's Services (admission to any replica, grants to the Lease's holder). Once the group's first
pods have started, the leader is killed (SIGKILL: no release); the other replica takes over after the
lease expires, counts what was granted from the pods, and the herd completes without the group ever
exceeding its pacer's allowance."""

from __future__ import annotations

from pathlib import Path

from sim.cluster.measure.grouprun import run_group
from tests.backends import Backend
from tests.groups_e2e.seed import kill_the_leader, seed_scenario


async def test_the_leader_killed_mid_herd(backend: Backend, tmp_path: Path) -> None:
    leaders: list[str | None] = []

    async with seed_scenario(backend, controller_replicas=2) as scenario:
        run = await run_group(
            scenario,
            api=backend.api,
            during=kill_the_leader(
                leaders, once=lambda group: bool(group.timeline and group.timeline[-1].started >= 4)
            ),
            work_dir=tmp_path,
            controller_lease=(3.0, 2.0, 0.5),
        )
    assert len(leaders) == 2 and leaders[0] != leaders[1], leaders
    assert run.all_ready_seconds is not None, f"not all Ready: {run.timeline[-10:]}\n{run.controller_log}"
    assert run.violations == [], run.violations[:5]
    assert run.timeline[-1].ready == 40
    assert run.restarts == 0
