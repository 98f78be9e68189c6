"""The simulated cluster on an API server (the emulator with sim's scheduler and controllers, or the real
control plane with its own: `--control-plane`): scale-up to Ready, eviction replaced, Job ignoring a
disruption, DaemonSet and garbage collection."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.kubernetes.nodeagent import pod_subnet
from sim.cluster.objects import is_terminating, name_of, node_name_of
from sim.cluster.scenario import StaggerConfig, Workload, workload_manifest
from sim.cluster.simcluster import SimCluster, node_name
from stagger.kube import DAEMONSETS, DEPLOYMENTS, JOBS, PODS, REPLICASETS, ApiError
from stagger.objects import condition_true
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.cluster.helpers import IGNORE_DISRUPTION, cluster_settings, eventually, list_items

pytestmark = pytest.mark.e2e


async def pods_of(cluster: SimCluster, app: str, namespace: str) -> list[dict[str, Any]]:
    return await list_items(cluster.client, PODS, namespace=namespace, label_selector=f"app={app}")


async def test_a_deployment_scales_up_and_every_pod_becomes_ready(backend: Backend) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings()) as cluster:
        web = Workload(
            kind="Deployment", name="web", namespace=ns, replicas=6, cpu_seconds=1, requests={"cpu": "100m"}
        )
        await cluster.apply(workload_manifest(web, stagger=StaggerConfig()))

        async def all_ready(count: int) -> bool:
            pods = [p for p in await pods_of(cluster, "web", ns) if not is_terminating(p)]
            return len(pods) == count and all(is_pod_ready(p) for p in pods)

        await eventually(lambda: all_ready(6), within=30, what="6 Ready pods")
        pods = await pods_of(cluster, "web", ns)
        assert sorted(node_name_of(p) for p in pods) == [node_name(0)] * 3 + [node_name(1)] * 3
        for pod in pods:
            status = pod["status"]
            node_index = int(node_name_of(pod).rsplit("-", 1)[1])
            assert status["phase"] == "Running"
            assert status["hostIP"] == cluster.node_ip(node_index)
            assert status["podIP"].startswith(f"{pod_subnet(node_index)}.")
            assert {c["type"] for c in status["conditions"]} >= {
                "PodScheduled",
                "Initialized",
                "ContainersReady",
                "Ready",
            }
            [app] = status["containerStatuses"]
            assert app["ready"] and app["started"] and "running" in app["state"] and app["restartCount"] == 0
            [owner] = pod["metadata"]["ownerReferences"]
            assert owner["kind"] == "ReplicaSet"
        [rs] = await list_items(cluster.client, REPLICASETS, namespace=ns)
        assert rs["metadata"]["labels"]["pod-template-hash"] in rs["metadata"]["name"]

        async def deployment_reports(count: int) -> bool:
            d = await cluster.client.get(DEPLOYMENTS, name="web", namespace=ns)
            status = d.get("status") or {}
            return status.get("readyReplicas") == count and status.get("availableReplicas") == count

        await eventually(lambda: deployment_reports(6), within=15, what="the Deployment status")

        await cluster.client.patch(DEPLOYMENTS, name="web", namespace=ns, patch={"spec": {"replicas": 2}})

        async def scaled_down() -> bool:
            return len(await pods_of(cluster, "web", ns)) == 2 and await all_ready(2)

        await eventually(scaled_down, within=30, what="scale-down to 2 pods (terminated and deleted)")
        await eventually(
            lambda: deployment_reports(2), within=15, what="the Deployment status after scale-down"
        )


async def test_an_evicted_pod_is_replaced_by_its_replicaset(backend: Backend) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings()) as cluster:
        web = Workload(kind="Deployment", name="web", namespace=ns, replicas=3, cpu_seconds=0.5)
        await cluster.apply(workload_manifest(web, stagger=StaggerConfig()))

        async def ready_names() -> set[str]:
            return {
                name_of(p)
                for p in await pods_of(cluster, "web", ns)
                if is_pod_ready(p) and not is_terminating(p)
            }

        async def three_ready() -> bool:
            return len(await ready_names()) == 3

        await eventually(three_ready, within=30, what="3 Ready pods")
        before = await ready_names()
        victim = sorted(before)[0]
        await cluster.client.evict(namespace=ns, name=victim)

        async def replaced() -> bool:
            try:
                await cluster.client.get(PODS, name=victim, namespace=ns)
                return False
            except ApiError as exc:
                if exc.status != 404:
                    raise
            names = await ready_names()
            return len(names) == 3 and victim not in names

        await eventually(replaced, within=30, what="the evicted pod gone and a replacement Ready")
        assert len((await ready_names()) - before) == 1


async def test_a_job_does_not_count_an_eviction_as_a_failure(backend: Backend) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings()) as cluster:
        batch = Workload(
            kind="Job",
            name="batch",
            namespace=ns,
            replicas=2,
            completions=3,
            cpu_seconds=0.5,
            run_seconds=20,
            backoff_limit=0,
            liveness_seconds=None,
            pod_failure_policy=IGNORE_DISRUPTION,
        )
        await cluster.apply(workload_manifest(batch, stagger=StaggerConfig()))

        async def running_pod() -> bool:
            return any(is_pod_ready(p) for p in await pods_of(cluster, "batch", ns))

        await eventually(running_pod, within=30, what="a running Job pod")
        victim = next(name_of(p) for p in await pods_of(cluster, "batch", ns) if is_pod_ready(p))
        await cluster.client.evict(namespace=ns, name=victim)

        async def finished() -> bool:
            job = await cluster.client.get(JOBS, name="batch", namespace=ns)
            return condition_true(job, "Complete") or condition_true(job, "Failed")

        await eventually(finished, within=40, what="the Job to finish")
        job = await cluster.client.get(JOBS, name="batch", namespace=ns)
        status = job["status"]
        assert condition_true(job, "Complete"), status
        assert (status.get("succeeded"), status.get("failed", 0)) == (3, 0)
        names = {name_of(p) for p in await pods_of(cluster, "batch", ns)}
        assert victim not in names and len(names) == 3  # the evicted pod was deleted, not kept as a failure


async def test_a_daemonset_runs_one_ready_pod_per_node_and_deleting_owners_collects_dependents(
    backend: Backend,
) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings()) as cluster:
        agent = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {
                        "labels": {"app": "agent"},
                        "annotations": {"sim.stagger.dev/cpu-seconds": "0.5"},
                    },
                    "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
                },
            },
        }
        await cluster.apply(agent)

        async def one_ready_per_node() -> bool:
            pods = [p for p in await pods_of(cluster, "agent", ns) if is_pod_ready(p)]
            return sorted(node_name_of(p) for p in pods) == [node_name(0), node_name(1)]

        await eventually(one_ready_per_node, within=30, what="an agent pod Ready on each node")

        async def ds_reports() -> bool:
            ds = await cluster.client.get(DAEMONSETS, name="agent", namespace=ns)
            status = ds.get("status") or {}
            return status.get("desiredNumberScheduled") == 2 and status.get("numberReady") == 2

        await eventually(ds_reports, within=15, what="the DaemonSet status")

        await cluster.apply(
            workload_manifest(
                Workload(kind="Deployment", name="web", namespace=ns, replicas=2, cpu_seconds=0.5),
                stagger=StaggerConfig(),
            )
        )
        await eventually(lambda: _count(cluster, "web", ns, 2), within=30, what="2 web pods")
        await cluster.client.delete(DEPLOYMENTS, name="web", namespace=ns)
        await cluster.client.delete(DAEMONSETS, name="agent", namespace=ns)

        async def all_collected() -> bool:
            rss = await list_items(cluster.client, REPLICASETS, namespace=ns)
            return not rss and await _count(cluster, "web", ns, 0) and await _count(cluster, "agent", ns, 0)

        await eventually(all_collected, within=30, what="ReplicaSet and pods garbage-collected")


async def _count(cluster: SimCluster, app: str, namespace: str, count: int) -> bool:
    return len(await pods_of(cluster, app, namespace)) == count
