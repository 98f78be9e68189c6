"""Helpers for the integration tests of the simulated cluster."""

from __future__ import annotations

from typing import Any

from sim.cluster.kubernetes.controllers import ControllerSettings
from sim.cluster.kubernetes.scheduler import SchedulerSettings
from sim.cluster.scenario import NodePool
from sim.cluster.simcluster import ClusterSettings
from stagger.informer import InformerSettings
from stagger.kube import Resource, RestClient
from tests.waiting import eventually

__all__ = ["IGNORE_DISRUPTION", "cluster_settings", "eventually", "list_items"]

# A Job's podFailurePolicy that does not count an eviction (the DisruptionTarget condition) as a failure.
IGNORE_DISRUPTION = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def cluster_settings(
    *, nodes: int = 2, cores: float = 4, time_scale: float = 20, **more: Any
) -> ClusterSettings:
    """A small simulated cluster whose informers re-watch quickly (`more`: other ClusterSettings fields)."""
    informer = InformerSettings(watch_timeout_seconds=30, retry_seconds=0.2)
    return ClusterSettings(
        nodes=NodePool(count=nodes, cores=cores, memory="8Gi"),
        time_scale=time_scale,
        informer=informer,
        scheduler=SchedulerSettings(informer=informer),
        controllers=ControllerSettings(informer=informer),
        **more,
    )


async def list_items(client: RestClient, resource: Resource, **kwargs: Any) -> list[dict[str, Any]]:
    return list((await client.list(resource, **kwargs)).get("items") or [])
