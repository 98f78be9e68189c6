"""Simulated kubelets in pool processes (`ClusterSettings.kubelet_processes`): the herd behaves as with the
kubelets in the simulator's own process (real lockd, real init clients launched by the pools through the
cluster's fork server or by exec), the measurements read the pools' stats, and every pool process is gone
once the cluster has stopped."""

from __future__ import annotations

from dataclasses import replace

import psutil
import pytest

from sim.cli.herd import run_once
from sim.cluster.scenario import StaggerConfig, Workload, workload_manifest
from sim.cluster.simcluster import SimCluster, node_name
from stagger.kube import PODS
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.cli.test_herd_runs import scaled_herd
from tests.cluster.helpers import cluster_settings, eventually, list_items

pytestmark = pytest.mark.e2e


def pool_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "sim.cluster.kubernetes.kubeletpool" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("launch", [pytest.param("fork", id="fork-server"), pytest.param("exec", id="exec")])
async def test_a_staggered_herd_on_pooled_kubelets_starts_two_at_a_time(launch: str) -> None:
    herd = scaled_herd()
    on = await run_once(
        replace(herd, time_scale=4),
        stagger=True,
        cluster_overrides={"kubelet_processes": 2, "initclient_launch": launch},
    )
    assert on.all_ready_seconds is not None, "the staggered herd never converged"
    # Read from the pools: the same figures the in-process kubelets give (tests/cli/test_herd_runs.py).
    assert on.peak_starting == {"sim-node-0": 2, "sim-node-1": 2}
    assert on.restarts == 0
    assert on.timeline[-1][1] == 30
    assert pool_processes() == []


async def test_the_pools_report_every_pod_and_stop_with_the_cluster(backend: Backend) -> None:
    ns = backend.namespace
    settings = cluster_settings(nodes=3, kubelet_processes=2)
    async with SimCluster(api=backend.api, settings=settings) as cluster:
        assert cluster.kubelets == {}
        assert sorted(n for pool in cluster.kubelet_pools for n in pool.nodes) == [
            node_name(i) for i in range(3)
        ]
        assert len(pool_processes()) == 2
        web = Workload(
            kind="Deployment", name="web", namespace=ns, replicas=6, cpu_seconds=1, requests={"cpu": "100m"}
        )
        await cluster.apply(workload_manifest(web, stagger=StaggerConfig()))

        async def all_ready() -> bool:
            pods = await list_items(cluster.client, PODS, namespace=ns, label_selector="app=web")
            return len(pods) == 6 and all(is_pod_ready(p) for p in pods)

        await eventually(all_ready, within=30, what="6 Ready pods")
        stats = await cluster.refresh_node_stats()
        assert sorted(stats) == [node_name(i) for i in range(3)]
        assert sum(len(s.arrivals) for s in stats.values()) == 6
        assert all(s.peak_starting >= 1 for s in stats.values())
    assert pool_processes() == []
    # The last stats outlive the cluster (a benchmark reads them after the run).
    assert sum(len(s.arrivals) for s in cluster.node_stats().values()) == 6
