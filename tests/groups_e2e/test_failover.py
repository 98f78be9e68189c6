"""The leader killed mid-herd: the seed scenario (lock mode) on the simulated cluster with two controller
replicas electing their leader on a Lease (3 s lease, 2 s renew deadline, 0.5 s retry), behind stand-ins
for the chart's Services (admission to any replica, grants to the Lease's holder). Once the group's first
pods have started, the leader is killed (SIGKILL: no release); the other replica takes over after the
lease expires, counts what was granted from the pods, and the herd completes without the group ever
exceeding its pacer's allowance."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from sim.cluster.groupwatch import GroupWatch
from sim.cluster.progress import ProgressWatch, Target
from sim.cluster.scenario import load_scenario
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.kube import NAMESPACES
from stagger.policy import parse_policy_text
from tests.backends import Backend, clean_namespace

SCENARIO = Path(__file__).parents[2] / "sim" / "cluster" / "scenarios" / "groups.yaml"


async def test_the_leader_killed_mid_herd(backend: Backend, tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    second = f"{backend.namespace}-b"
    shop, blog = scenario.workloads
    scenario = replace(
        scenario,
        stagger=replace(scenario.stagger, host_port=0, controller_replicas=2),
        workloads=(replace(shop, namespace=backend.namespace), replace(blog, namespace=second)),
    )
    await backend.client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": second}}
    )
    [policy] = parse_policy_text(scenario.stagger.policies).staggering_policies
    settings = ClusterSettings.from_scenario(scenario, work_dir=tmp_path, controller_lease=(3.0, 2.0, 0.5))
    try:
        async with (
            SimCluster(api=backend.api, settings=settings) as cluster,
            GroupWatch(
                client=cluster.client, clock=cluster.clock, pacer=policy.pacer, selector=policy.label_selector
            ) as group,
            ProgressWatch(client=cluster.client, clock=cluster.clock, target=Target.of(scenario)) as progress,
        ):
            controller = cluster.controller
            assert controller is not None
            await cluster.apply_workloads(scenario)
            deadline = time.monotonic() + 120
            while not (group.timeline and group.timeline[-1].started >= 4 and controller.leader):
                assert time.monotonic() < deadline, f"the herd did not start: {group.timeline[-3:]}"
                await asyncio.sleep(0.1)
            killed = controller.leader
            assert killed is not None
            controller.kill(killed)
            reached = await progress.wait_done(deadline_seconds=scenario.deadline_seconds)
            log = controller.log_tail(30)
            new_leader = controller.leader
    finally:
        if backend.real:
            await clean_namespace(backend.client, second)
    assert reached, f"the herd did not complete after the failover: {group.timeline[-10:]}\n{log}"
    assert new_leader is not None and new_leader != killed, log
    assert group.violations == [], group.violations[:5]
    assert group.timeline[-1].ready == 40
    assert progress.restarts == 0
