"""A person's view of the simulated cluster (issue 10's acceptance check), on the emulator or the real
control plane (`--control-plane`): a Deployment of 3 replicas created with `kubectl apply` gets its pods
created (by the controller-manager), bound to simulated nodes (by the scheduler) and Ready (by sim's
kubelets); with a PodDisruptionBudget that allows no disruption, evicting one of them is refused with
429 Too Many Requests, and the pod stays."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from sim.cluster.scenario import NodePool
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.kube import PDBS, PODS, ApiError
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.cluster.helpers import eventually, list_items
from tests.tools import tool

APP = "web"


def manifests(namespace: str) -> list[dict[str, Any]]:
    labels = {"app": APP}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        },
    ]


def kubeconfig_for(backend: Backend, tmp_path: Path) -> Path:
    if backend.api.kubeconfig is not None:
        return backend.api.kubeconfig
    assert backend.emulator is not None
    path = tmp_path / "emulator.kubeconfig"
    backend.emulator.write_kubeconfig(path)
    return path


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(tool("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


async def test_kubectl_apply_gets_ready_pods_on_simulated_nodes_and_a_budget_refuses_eviction(
    backend: Backend, tmp_path: Path
) -> None:
    ns = backend.namespace
    settings = ClusterSettings(nodes=NodePool(count=2, cores=4, memory="16Gi"), time_scale=10)
    async with SimCluster(api=backend.api, settings=settings) as cluster:
        config = kubeconfig_for(backend, tmp_path)
        applied = await asyncio.to_thread(
            kubectl, config, "apply", "-f", "-", stdin=yaml.safe_dump_all(manifests(ns))
        )
        assert f"deployment.apps/{APP} created" in applied, applied

        pods: list[dict[str, Any]] = []

        async def three_ready() -> bool:
            pods[:] = await list_items(cluster.client, PODS, namespace=ns, label_selector=f"app={APP}")
            return len(pods) == 3 and all(is_pod_ready(p) for p in pods)

        await eventually(three_ready, within=60, what="3 Ready pods", poll=0.2)
        assert {p["spec"]["nodeName"] for p in pods} <= set(cluster.kubelets)
        for pod in pods:
            [owner] = pod["metadata"]["ownerReferences"]
            assert owner["kind"] == "ReplicaSet"

        listed = json.loads(
            await asyncio.to_thread(
                kubectl, config, "get", "pods", "-n", ns, "-l", f"app={APP}", "-o", "json"
            )
        )
        assert sorted(p["metadata"]["name"] for p in listed["items"]) == sorted(
            p["metadata"]["name"] for p in pods
        )

        async def budget_counted() -> bool:
            status = (await cluster.client.get(PDBS, name=APP, namespace=ns)).get("status") or {}
            return status.get("currentHealthy") == 3 and status.get("observedGeneration") == 1

        await eventually(
            budget_counted, within=60, what="the disruption controller's budget status", poll=0.2
        )
        victim = pods[0]["metadata"]["name"]
        try:
            await cluster.client.evict(namespace=ns, name=victim)
        except ApiError as exc:
            assert exc.status == 429, exc
        else:
            raise AssertionError("the eviction was allowed despite a budget with maxUnavailable 0")
        pod = await cluster.client.get(PODS, name=victim, namespace=ns)
        assert pod["metadata"].get("deletionTimestamp") is None and is_pod_ready(pod)
