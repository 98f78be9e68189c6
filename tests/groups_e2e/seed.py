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


@contextlib.asynccontextmanager
async def seed_scenario(backend: Backend, *, mode: str = "lock", **stagger: Any) -> AsyncIterator[Scenario]:
    """The scenario (`stagger` overrides StaggerConfig fields); the second namespace is removed afterwards
    on a real control plane."""
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
            workloads=(replace(shop, namespace=backend.namespace), replace(blog, namespace=second)),
        )
    finally:
        if backend.real:
            await clean_namespace(backend.client, second)
