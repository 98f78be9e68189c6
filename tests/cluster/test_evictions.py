"""Evictions as evict mode makes them, on the simulated cluster (emulator or real control plane,
`backend`): a Job pod held Pending (a nodeSelector no node has, as `hold: nodeSelector` does) is evicted
in spite of a PodDisruptionBudget that allows no disruption, and its Job, with an Ignore rule for
DisruptionTarget (what `POST /mutate/jobs` adds), replaces it and completes with no failure counted."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.objects import is_terminating, name_of, node_name_of
from sim.cluster.simcluster import SimCluster
from stagger.kube import JOBS, NODES, PDBS, PODS
from stagger.objects import condition_true
from tests.backends import Backend
from tests.cluster.helpers import IGNORE_DISRUPTION, cluster_settings, eventually, list_items

pytestmark = pytest.mark.e2e

HOLD_LABEL = "example.com/hold"


def held_job(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": namespace},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "podFailurePolicy": IGNORE_DISRUPTION,
            "template": {
                "metadata": {
                    "labels": {"app": "batch"},
                    "annotations": {
                        "sim.stagger.dev/cpu-seconds": "0.5",
                        "sim.stagger.dev/run-seconds": "2",
                        "sim.stagger.dev/liveness-seconds": "none",
                    },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {HOLD_LABEL: "true"},
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "work", "image": "work:1", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                },
            },
        },
    }


async def test_a_held_job_pod_is_evicted_despite_its_budget_and_not_counted_as_a_failure(
    backend: Backend,
) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings(nodes=1, cores=2)) as cluster:
        client = cluster.client
        await client.create(
            PDBS,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "batch", "namespace": ns},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "batch"}}},
            },
            namespace=ns,
        )
        await client.create(JOBS, held_job(ns), namespace=ns)

        async def pods() -> list[dict[str, Any]]:
            return await list_items(client, PODS, namespace=ns, label_selector="app=batch")

        async def one_pending() -> bool:
            found = await pods()
            return len(found) == 1 and not node_name_of(found[0]) and found[0]["status"]["phase"] == "Pending"

        await eventually(one_pending, within=30, what="the Job's pod, held Pending")

        async def budget_allows_none() -> bool:
            status = (await client.get(PDBS, name="batch", namespace=ns)).get("status") or {}
            return "observedGeneration" in status and status.get("disruptionsAllowed") == 0

        await eventually(budget_allows_none, within=30, what="the budget processed, allowing no disruption")
        [held] = await pods()
        await client.evict(namespace=ns, name=name_of(held))

        async def replaced() -> bool:
            found = [p for p in await pods() if not is_terminating(p)]
            return len(found) == 1 and name_of(found[0]) != name_of(held)

        # On the real control plane the evicted pod keeps the Job's tracking finalizer until the pod
        # garbage collector fails it (every 20 s); only then does the Job replace it.
        await eventually(replaced, within=60, what="a replacement pod")
        job = await client.get(JOBS, name="batch", namespace=ns)
        assert (job.get("status") or {}).get("failed", 0) == 0
        for node in cluster.node_agents:
            await client.patch(NODES, name=node, patch={"metadata": {"labels": {HOLD_LABEL: "true"}}})

        async def finished() -> bool:
            job = await client.get(JOBS, name="batch", namespace=ns)
            return condition_true(job, "Complete") or condition_true(job, "Failed")

        await eventually(finished, within=60, what="the Job to finish")
        job = await client.get(JOBS, name="batch", namespace=ns)
        status = job["status"]
        assert condition_true(job, "Complete"), status
        assert (status.get("succeeded"), status.get("failed", 0)) == (1, 0)
        names = {name_of(p) for p in await pods()}
        assert name_of(held) not in names
