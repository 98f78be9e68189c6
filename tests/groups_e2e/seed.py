"""The seed scenario (sim/cluster/scenarios/groups.yaml) for one test: its two Deployments in the test's
namespace and a second one, any free host port, and the mode asked for; the check that its group started
4, then 16, then all; and a leader killed during a run."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.cluster.measure.grouprun import During, GroupRun
from sim.cluster.measure.groupwatch import GroupWatch
from sim.cluster.scenario import Scenario, load_scenario
from sim.cluster.simcluster import SimCluster
from stagger.kube import NAMESPACES
from tests.backends import Backend, clean_namespace

SCENARIO = Path(__file__).parents[2] / "sim" / "cluster" / "scenarios" / "groups.yaml"
# Long enough that the first four pods are granted before one of them is Ready (4 wall seconds at the
# scenario's time scale 4, however slowly a loaded machine starts their init clients), short enough that a
# run takes about half the demo's time.
TEST_CPU_SECONDS = 16.0


@contextlib.asynccontextmanager
async def seed_scenario(
    backend: Backend, *, mode: str = "lock", cpu_seconds: float = TEST_CPU_SECONDS, **stagger: Any
) -> AsyncIterator[Scenario]:
    """The scenario (`stagger` overrides StaggerConfig fields); the second namespace is removed afterwards
    on a real control plane. Each pod needs `cpu_seconds` to start (the demo's 20 by default in the file,
    TEST_CPU_SECONDS here: the same shape of run in less time)."""
    scenario = load_scenario(SCENARIO)
    policies = scenario.stagger.policies.replace("mode: lock", f"mode: {mode}")
    assert f"mode: {mode}" in policies
    second = f"{backend.namespace}-b"
    shop, blog = scenario.workloads
    await backend.client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": second}}
    )
    try:
        yield replace(
            scenario,
            stagger=replace(scenario.stagger, policies=policies, host_port=0, **stagger),
            workloads=(
                replace(shop, namespace=backend.namespace, cpu_seconds=cpu_seconds),
                replace(blog, namespace=second, cpu_seconds=cpu_seconds),
            ),
        )
    finally:
        if backend.real:
            await clean_namespace(backend.client, second)


def check_4_then_16_then_all(run: GroupRun) -> None:
    """The seed group's run, judged from the pods over time: every pod ends Ready with no restart, the pods
    started never exceed the pacer's allowance, and they reach it: 4 started while it is 4 (0 or 1 Ready:
    which one depends on how fast this machine starts the init clients), 16 while fewer than 16 are Ready."""
    assert run.all_ready_seconds is not None, f"not all Ready: {run.timeline[-10:]}\n{run.controller_log}"
    assert run.violations == [], run.violations[:5]
    assert any(p.started == 4 and p.allowance == 4 for p in run.timeline), run.timeline[:12]
    assert any(p.started >= 16 and p.ready < 16 for p in run.timeline), run.timeline
    assert run.timeline[-1].ready == 40
    assert run.restarts == 0


def kill_the_leader(leaders: list[str | None], *, once: Callable[[GroupWatch], bool]) -> During:
    """What to do during a run with two controller replicas: once `once(group)` holds, kill the Lease's
    holder (SIGKILL: no release) and wait until the other replica holds it; `leaders` gets both names."""

    async def during(cluster: SimCluster, group: GroupWatch) -> None:
        controller = cluster.controller
        assert controller is not None
        started = await group.wait_until(lambda: once(group), within=120)
        assert started, f"the herd did not get there: {group.timeline[-3:]}"
        # The Lease is read every 0.1 s by ControllerProcess, which has no event to await.
        deadline = time.monotonic() + 60
        while not controller.leader:
            assert time.monotonic() < deadline, "no leader"
            await asyncio.sleep(0.1)
        leaders.append(controller.leader)
        controller.kill(controller.leader)
        while controller.leader in (None, leaders[0]):
            assert time.monotonic() < deadline, "no other replica took over"
            await asyncio.sleep(0.1)
        leaders.append(controller.leader)

    return during
