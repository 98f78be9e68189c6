"""The seed scenario end to end on the simulated cluster (sim's kubelets, a real lockd per node, real init
clients, the real controller as the mutating webhook), on the API emulator or the real control plane
(`pytest --control-plane`): two Deployments in two namespaces, the same image, 40 pods in one image-pull
group (exponential 4/4/16), in `lock` and in `gate` mode.

Judged from the pods' states over time (sim.cluster.groupwatch): the pods started never exceed the pacer's
allowance for the Ready count at that moment; they reach it (4 started while the allowance is 4, 16 or
more before 16 are Ready); every pod ends Ready, with no container restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sim.cluster.groupwatch import GroupWatch
from sim.cluster.progress import ProgressWatch, Target
from sim.cluster.scenario import load_scenario
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.kube import NAMESPACES
from stagger.policy import parse_policy_text
from tests.backends import Backend, clean_namespace

SCENARIO = Path(__file__).parents[2] / "sim" / "cluster" / "scenarios" / "groups.yaml"


@pytest.mark.parametrize("mode", ["lock", "gate"])
async def test_the_seed_group_starts_4_then_16_then_all(mode: str, backend: Backend, tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    policies = scenario.stagger.policies.replace("mode: lock", f"mode: {mode}")
    assert f"mode: {mode}" in policies
    # The test's own namespaces, and any free port: runs must not collide.
    second = f"{backend.namespace}-b"
    shop, blog = scenario.workloads
    scenario = replace(
        scenario,
        stagger=replace(scenario.stagger, policies=policies, host_port=0),
        workloads=(replace(shop, namespace=backend.namespace), replace(blog, namespace=second)),
    )
    await backend.client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": second}}
    )
    [policy] = parse_policy_text(policies).staggering_policies
    settings = ClusterSettings.from_scenario(scenario, work_dir=tmp_path)
    try:
        async with (
            SimCluster(api=backend.api, settings=settings) as cluster,
            GroupWatch(
                client=cluster.client, clock=cluster.clock, pacer=policy.pacer, selector=policy.label_selector
            ) as group,
            ProgressWatch(client=cluster.client, clock=cluster.clock, target=Target.of(scenario)) as progress,
        ):
            await cluster.apply_workloads(scenario)
            reached = await progress.wait_done(deadline_seconds=scenario.deadline_seconds)
            assert cluster.controller is not None
            log = cluster.controller.log_tail(40)
    finally:
        if backend.real:
            await clean_namespace(backend.client, second)
    assert reached, f"not every pod became Ready; the group's timeline: {group.timeline[-10:]}\n{log}"
    assert group.violations == [], group.violations[:5]
    # The allowance is reached: 4 started while it is 4 (0 or 1 Ready: which one depends on how fast this
    # machine starts the init clients), 16 while fewer than 16 are Ready.
    assert any(p.started == 4 and p.allowance == 4 for p in group.timeline), group.timeline[:12]
    assert any(p.started >= 16 and p.ready < 16 for p in group.timeline), group.timeline
    assert group.timeline[-1].ready == 40
    assert progress.restarts == 0
