"""A cold start on real nodes: the whole cluster off and on again as after a power cut (`RealCluster.
cold_restart`: every process and container killed, the mounts and the runtime's state gone, etcd, images and
kubelet's root-dir kept; the nodes come back before the API server). stagger's own pods come back among the
rest, in whatever order their kubelets start them; the opted-in pods run `stagger-wait` again (a new pod
sandbox re-runs init containers) while lockd and the controller are themselves starting. No deadlock between
the webhook, lockd and the pods: everything is Ready again within COLD_START_BOUND, with the node limit kept."""

from __future__ import annotations

import asyncio
import time

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import Herd, Kube, Release, is_ready, wait_for, workload
from tests.nodes.policies import NODE_LIMIT

COLD_START_BOUND = 180.0
"""Seconds from the API server's return to every pod Ready: the controllers wait out their leases (15 s),
lockd and the controller start, and each node's pods start at most NODE_LIMIT at a time."""


def test_everything_is_ready_again_after_a_cold_start(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    namespace = kube.namespace("cold-start")
    try:
        with Herd(kube, namespace, "app=web") as herd:
            kube.apply(workload("web", namespace, replicas=6, cpu_seconds=1.0))
            herd.wait_ready(6, timeout=120)
        asyncio.run(real_cluster.cold_restart())
        back = time.monotonic()

        def all_ready() -> bool | None:
            pods = kube.pods(namespace, "app=web") + kube.pods(stagger.namespace) + kube.pods("kube-system")
            return True if pods and all(is_ready(p) for p in pods) else None

        with Herd(kube, namespace, "app=web", ever_ready=set(herd.ever_ready)) as after:
            wait_for("every pod Ready again after the cold start", all_ready, timeout=COLD_START_BOUND)
        took = time.monotonic() - back
        stagger.wait_ready(nodes=len(real_cluster.nodes))
        assert took < COLD_START_BOUND
        assert not after.over_node_limit(NODE_LIMIT), after.over_node_limit(NODE_LIMIT)
    finally:
        kube.delete_namespace(namespace)
