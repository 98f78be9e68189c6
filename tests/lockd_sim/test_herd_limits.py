"""Cluster-mode lockd on the simulated cluster, judged from the API server's pod states (not from lockd):
a 30-replica Deployment on 3 nodes with `maxConcurrent: 2` never has more than 2 pods between grant and
Ready on a node, every pod is patched once, all become Ready, every ask carries the pod's own token,
checked against the API server's published keys with no TokenReview; and killing lockd (SIGKILL) mid-herd and
starting it again keeps the limit, because it rebuilds its slots from the pods before granting."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from lockd.pods import stage
from sim.cluster.scenario import NodePool, Scenario, load_scenario
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.informer import Informer, InformerSettings
from stagger.kube import PODS, RestClient, WatchEventType
from stagger.names import Names
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.metrics import by_label
from tests.waiting import eventually

NAMES = Names()


def herd(*, nodes: int, replicas: int, namespace: str, controller: bool = False) -> Scenario:
    """The herd scenario on `nodes`; with `controller` its admission injects the init client (and the pod's
    token), else the pods carry the init client themselves (opted in by hand)."""
    base = load_scenario()
    [app] = base.workloads
    stagger = replace(base.stagger, enabled=True, host_port=0, lockd_mode="cluster", controller=controller)
    return replace(
        base,
        nodes=NodePool(count=nodes, cores=4, memory="16Gi"),
        workloads=(replace(app, replicas=replicas, namespace=namespace),),
        stagger=stagger,
        time_scale=4,
    )


class StartingWatch:
    """Follows every pod change through a watch and keeps, per node, the peak number of pods that hold a
    grant (`granted-at`) and have not been Ready yet."""

    def __init__(self, client: RestClient, namespace: str) -> None:
        self.informer = Informer(
            client=client,
            resource=PODS,
            namespace=namespace,
            settings=InformerSettings(watch_timeout_seconds=60, retry_seconds=0.2),
        )
        self.informer.add_handler(self._on_pod)
        self.peak: dict[str, int] = defaultdict(int)
        self.ever_ready: set[str] = set()
        self.granted_values: dict[str, set[str]] = defaultdict(set)
        self.tokens: Counter[str] = Counter()  # lockd's stagger_lockd_pod_tokens_total, summed over nodes
        self.ready_uids: set[str] = set()

    def _on_pod(self, kind: WatchEventType, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        granted = (pod["metadata"].get("annotations") or {}).get(NAMES.granted_at_annotation)
        if granted:
            self.granted_values[uid].add(granted)
        if kind != "DELETED" and is_pod_ready(pod):
            self.ever_ready.add(uid)
        starting: dict[str, int] = defaultdict(int)
        for other in self.informer.objects():
            other_uid = other["metadata"]["uid"]
            held = (other["metadata"].get("annotations") or {}).get(NAMES.granted_at_annotation)
            if held and other_uid not in self.ever_ready and stage(other) == "starting":
                starting[other["spec"].get("nodeName", "")] += 1
        for node, count in starting.items():
            self.peak[node] = max(self.peak[node], count)

    def ready_count(self) -> int:
        return sum(1 for pod in self.informer.objects() if is_pod_ready(pod))


async def run_herd(
    backend: Backend, scenario: Scenario, *, kill_after_ready: int | None = None
) -> StartingWatch:
    async with SimCluster(api=backend.api, settings=ClusterSettings.from_scenario(scenario)) as cluster:
        session = backend.session
        watch = StartingWatch(backend.client, backend.namespace)
        task = asyncio.create_task(watch.informer.run())
        try:
            await asyncio.wait_for(watch.informer.synced.wait(), timeout=60)
            await cluster.apply_workloads(scenario)
            total = sum(w.replicas for w in scenario.workloads)
            if kill_after_ready is not None:

                async def some_ready() -> bool:
                    return watch.ready_count() >= kill_after_ready

                await eventually(some_ready, within=120, what=f"{kill_after_ready} pods Ready")
                victim = cluster.lockds["sim-node-0"]
                await victim.kill()
                await victim.start()
                await victim.wait_ready(session=session, deadline=30)

            async def all_ready() -> bool:
                return watch.ready_count() == total

            await eventually(all_ready, within=240, what=f"all {total} pods Ready")
            for lockd in cluster.lockds.values():
                async with session.get(f"{lockd.spec.url}/metrics") as response:
                    watch.tokens.update(
                        by_label(await response.text(), "stagger_lockd_pod_tokens_total", "result")
                    )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return watch


async def test_never_more_than_two_starting_per_node_and_one_patch_per_pod(backend: Backend) -> None:
    scenario = herd(nodes=3, replicas=30, namespace=backend.namespace, controller=True)
    patches_before = await backend.requests(verb="patch", resource="pods")
    reviews_before = await backend.requests(verb="create", resource="tokenreviews")
    watch = await run_herd(backend, scenario)
    assert set(watch.peak) == {"sim-node-0", "sim-node-1", "sim-node-2"}
    assert max(watch.peak.values()) <= 2, dict(watch.peak)
    assert min(watch.peak.values()) == 2, dict(watch.peak)  # the limit was reached, not trivially met
    assert len(watch.granted_values) == 30
    assert all(len(values) == 1 for values in watch.granted_values.values())
    # lockd's one grant patch per pod is the only write to pods themselves (the kubelet writes pods/status).
    assert await backend.requests(verb="patch", resource="pods") - patches_before == 30
    # Every ask came with the pod's own projected token, which lockd checked against the API server's
    # published keys: no TokenReview at all (on a real control plane other clients' reviews count too).
    assert watch.tokens["verified"] >= 30 and watch.tokens["refused"] == watch.tokens["absent"] == 0, (
        watch.tokens
    )
    if backend.emulator is not None:
        assert await backend.requests(verb="create", resource="tokenreviews") - reviews_before == 0


async def test_lockd_killed_and_restarted_mid_herd_keeps_the_limit(backend: Backend) -> None:
    scenario = herd(nodes=2, replicas=20, namespace=backend.namespace)
    watch = await run_herd(backend, scenario, kill_after_ready=4)
    assert max(watch.peak.values()) <= 2, dict(watch.peak)
    assert len(watch.granted_values) == 20
