"""Evict mode's stub pods (`hold: stub`) on the simulated cluster: every container runs `python -m
webhook.idle`, the first init container (`stagger-hold`) blocks. The pod is scheduled and stays in Init
(Pending, Initialized False) with no CPU used until it is deleted or evicted; its stubs then exit 0. A stub
as a main container runs and is never Ready. On the emulator and the real control plane (`backend`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sim.cluster.objects import name_of, node_name_of
from sim.cluster.simcluster import SimCluster
from sim.cluster.startup import cpu_busy_percent, starting_count
from stagger.kube import PODS, ApiError
from stagger.objects import condition
from tests.backends import Backend
from tests.cluster.helpers import cluster_settings, eventually

pytestmark = pytest.mark.e2e

IDLE = ["python", "-m", "webhook.idle"]
STAGGER_IMAGE = "stagger:test"


def stub(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": STAGGER_IMAGE,
        "command": IDLE,
        "resources": {"requests": {"cpu": "100m"}},
        "ports": [{"containerPort": 8080}] if name == "app" else [],
    }


def held_pod(name: str, namespace: str) -> dict[str, Any]:
    """What admission makes of a pod with one init container and one container, held with `hold: stub`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "held"}},
        "spec": {
            "initContainers": [stub("stagger-hold"), stub("migrate")],
            "containers": [stub("app")],
            "terminationGracePeriodSeconds": 5,
        },
    }


async def get_pod(backend: Backend, name: str) -> dict[str, Any] | None:
    try:
        return await backend.client.get(PODS, name=name, namespace=backend.namespace)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def condition_status(pod: dict[str, Any], kind: str) -> str | None:
    found = condition(pod, kind)
    return None if found is None else str(found.get("status"))


def states(statuses: list[dict[str, Any]]) -> list[str]:
    return [next(iter(s["state"])) for s in statuses]


async def test_a_stub_pod_stays_in_init_idle_until_evicted_and_its_stubs_exit_0(backend: Backend) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings(nodes=1, cores=2)) as cluster:
        await backend.client.create(PODS, held_pod("held", ns), namespace=ns)

        async def holding() -> bool:
            pod = await get_pod(backend, "held")
            return bool(
                pod
                and states((pod.get("status") or {}).get("initContainerStatuses") or [])[:1] == ["running"]
            )

        await eventually(holding, within=30, what="the hold container to run")
        await asyncio.sleep(1.0)  # 20 simulated seconds: nothing more happens
        pod = await get_pod(backend, "held")
        assert pod is not None
        status = pod["status"]
        assert node_name_of(pod) and status["phase"] == "Pending"
        initialized = condition(pod, "Initialized")
        assert initialized is not None and (initialized["status"], initialized["reason"]) == (
            "False",
            "ContainersNotInitialized",
        )
        assert initialized["message"] == "containers with incomplete status: [stagger-hold migrate]"
        assert condition_status(pod, "Ready") == "False"
        assert states(status["initContainerStatuses"]) == ["running", "waiting"]
        assert [s["ready"] for s in status["initContainerStatuses"]] == [False, False]
        assert states(status["containerStatuses"]) == ["waiting"]
        assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
        assert status["initContainerStatuses"][0]["restartCount"] == 0
        for kubelet in cluster.kubelets.values():
            assert cpu_busy_percent(kubelet.model) == 0 and starting_count(kubelet.model) == 0

        rv = str((await backend.client.list(PODS, namespace=ns))["metadata"]["resourceVersion"])
        await cluster.client.evict(namespace=ns, name="held")
        last: dict[str, Any] = {}
        async for event in backend.client.watch(
            PODS, namespace=ns, resource_version=rv, timeout_seconds=20, field_selector="metadata.name=held"
        ):
            if event["type"] in ("MODIFIED", "DELETED"):
                last = event["object"]
            if event["type"] == "DELETED":
                break
        assert last and name_of(last) == "held", "the held pod was not deleted"
        final = last["status"]
        target = condition(last, "DisruptionTarget")
        assert target is not None and target["reason"] == "EvictionByEvictionAPI"
        [hold, migrate] = final["initContainerStatuses"]
        assert (hold["state"]["terminated"]["exitCode"], hold["state"]["terminated"]["reason"]) == (
            0,
            "Completed",
        )
        assert "waiting" in migrate["state"] or migrate["state"]["terminated"]["exitCode"] != 0
        assert final["phase"] == "Failed"  # its containers never ran


async def test_a_stub_container_runs_and_is_never_ready_until_deleted(backend: Backend) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings(nodes=1, cores=2)):
        manifest = held_pod("idle", ns)
        del manifest["spec"]["initContainers"]
        await backend.client.create(PODS, manifest, namespace=ns)

        async def running() -> bool:
            pod = await get_pod(backend, "idle")
            return bool(pod and (pod.get("status") or {}).get("phase") == "Running")

        await eventually(running, within=30, what="the stub container to run")
        await asyncio.sleep(2.0)  # 40 simulated seconds: past the model's default liveness deadline
        pod = await get_pod(backend, "idle")
        assert pod is not None
        [app] = pod["status"]["containerStatuses"]
        assert "running" in app["state"] and not app["ready"] and app["restartCount"] == 0
        assert condition_status(pod, "Ready") == "False"
        assert condition_status(pod, "Initialized") == "True"

        await backend.client.delete(PODS, name="idle", namespace=ns)

        async def gone() -> bool:
            return await get_pod(backend, "idle") is None

        await eventually(gone, within=30, what="the deleted stub pod to go")
