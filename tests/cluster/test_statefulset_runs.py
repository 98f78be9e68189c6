"""A StatefulSet on the simulated cluster (sim's StatefulSet controller on the emulator, the real one on
the real control plane: `backend`): pods created one at a time in ordinal order, each once its
predecessor is Ready; an evicted pod recreated under its name; scale-down from the highest ordinal."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sim.cluster.kubernetes.workloads.statefulset import STATEFULSETS
from sim.cluster.objects import name_of, uid_of
from sim.cluster.simcluster import SimCluster
from stagger.kube import PODS, ApiError, RestClient
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.cluster.helpers import cluster_settings, eventually, list_items

pytestmark = pytest.mark.e2e


def statefulset(namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}, "annotations": {"sim.stagger.dev/cpu-seconds": "1"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {"name": "db", "image": "db:1", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                },
            },
        },
    }


class PodLog:
    """Every pod event of the namespace in order, with which pods were Ready at each."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, frozenset[str]]] = []
        self._ready: set[str] = set()

    async def follow(self, client: RestClient, namespace: str, resource_version: str) -> None:
        while True:
            async for event in client.watch(
                PODS, namespace=namespace, resource_version=resource_version, timeout_seconds=60
            ):
                pod = event["object"]
                if event["type"] == "BOOKMARK":
                    resource_version = pod["metadata"]["resourceVersion"]
                    continue
                resource_version = pod["metadata"]["resourceVersion"]
                name = name_of(pod)
                if event["type"] != "DELETED" and is_pod_ready(pod):
                    self._ready.add(name)
                else:
                    self._ready.discard(name)
                self.events.append((event["type"], name, frozenset(self._ready)))

    def ready_when_added(self, name: str) -> frozenset[str]:
        return next(ready for kind, n, ready in self.events if kind == "ADDED" and n == name)

    def deleted(self) -> list[str]:
        return [n for kind, n, _ in self.events if kind == "DELETED"]


async def test_a_statefulset_starts_in_order_recreates_by_name_and_scales_down_from_the_top(
    backend: Backend,
) -> None:
    ns = backend.namespace
    async with SimCluster(api=backend.api, settings=cluster_settings(nodes=2, cores=2)) as cluster:
        client = cluster.client
        log = PodLog()
        start = str((await client.list(PODS, namespace=ns))["metadata"]["resourceVersion"])
        follower = asyncio.create_task(log.follow(client, ns, start))
        try:
            await client.create(STATEFULSETS, statefulset(ns, 3), namespace=ns)

            async def ready(names: set[str]) -> bool:
                pods = await list_items(client, PODS, namespace=ns)
                return {name_of(p) for p in pods if is_pod_ready(p)} == names and len(pods) == len(names)

            await eventually(lambda: ready({"db-0", "db-1", "db-2"}), within=60, what="3 Ready pods")
            assert "db-0" in log.ready_when_added("db-1")
            assert {"db-0", "db-1"} <= log.ready_when_added("db-2")
            pod = await client.get(PODS, name="db-1", namespace=ns)
            assert pod["spec"]["hostname"] == "db-1" and pod["spec"]["subdomain"] == "db"
            assert pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-1"
            [owner] = pod["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["controller"]) == ("StatefulSet", "db", True)

            async def status_is(**expected: int) -> bool:
                status = (await client.get(STATEFULSETS, name="db", namespace=ns)).get("status") or {}
                return all(status.get(k, 0) == v for k, v in expected.items())

            await eventually(
                lambda: status_is(replicas=3, readyReplicas=3, currentReplicas=3, updatedReplicas=3),
                within=20,
                what="the StatefulSet's status",
            )

            await client.evict(namespace=ns, name="db-1")

            async def recreated() -> bool:
                try:
                    pod = await client.get(PODS, name="db-1", namespace=ns)
                except ApiError as exc:
                    if exc.status == 404:
                        return False
                    raise
                return uid_of(pod) != owner_uid and is_pod_ready(pod)

            owner_uid = uid_of(pod)
            await eventually(recreated, within=60, what="db-1 evicted and created again")

            async def eviction_seen() -> bool:
                return "db-1" in log.deleted()

            await eventually(eviction_seen, within=20, what="the watch to see db-1's eviction")
            deleted_before = len(log.deleted())
            await client.patch(STATEFULSETS, name="db", namespace=ns, patch={"spec": {"replicas": 1}})
            await eventually(lambda: ready({"db-0"}), within=60, what="scale-down to db-0")

            # The list shows the scale-down before the watch that `log` follows has delivered both
            # deletions (a watch lags a list; found in CI): the order is read once both arrived.
            async def both_deleted() -> bool:
                return len(log.deleted()) >= deleted_before + 2

            await eventually(both_deleted, within=20, what="the watch to see both deletions")
            assert log.deleted()[deleted_before:] == ["db-2", "db-1"]
            await eventually(
                lambda: status_is(replicas=1, readyReplicas=1, currentReplicas=1),
                within=20,
                what="the StatefulSet's status after scale-down",
            )
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
