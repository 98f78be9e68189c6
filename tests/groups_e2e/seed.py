"""The seed scenario (sim/cluster/scenarios/groups.yaml) for one test: its two Deployments in the test's
namespace and a second one, any free host port, and the mode asked for."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.cluster.scenario import Scenario, load_scenario
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
