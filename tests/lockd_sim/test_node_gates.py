"""Cluster-mode lockd's node gates on the simulated cluster, judged from the API server's pod states:
`waitForDaemonSets` holds every grant until a slow DaemonSet's pod is Ready (and, up to `--daemonset-wait`,
while a DaemonSet's pod is not on the node), and `countAllStarting` counts pods that do not use stagger, so
no grant is made while they fill the node's limit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from lockd.pods import owner_kind, stage, uses_stagger
from sim.cluster import podparams
from sim.cluster.scenario import NodePool, Scenario, StaggerConfig, Workload, workload_manifest
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.informer import Informer, InformerSettings
from stagger.kube import EVENTS, PODS, RestClient, WatchEventType
from stagger.names import Names
from stagger.podstate import is_pod_ready
from tests.backends import Backend
from tests.metrics import by_label
from tests.waiting import eventually

NAMES = Names()


def one_node(policy: str) -> Scenario:
    return Scenario(
        name="gates",
        nodes=NodePool(count=1, cores=4, memory="16Gi"),
        workloads=(),
        stagger=StaggerConfig(
            enabled=True, host_port=0, max_wait="5m", policies=policy, lockd_mode="cluster"
        ),
        time_scale=4,
    )


class PodLog:
    """Every pod change seen through a watch; `check` runs on each, in the order the API server made them."""

    def __init__(
        self,
        client: RestClient,
        namespace: str,
        check: Callable[[dict[str, dict[str, Any]], set[str]], None],
    ) -> None:
        self.informer = Informer(
            client=client,
            resource=PODS,
            namespace=namespace,
            settings=InformerSettings(retry_seconds=0.2),
        )
        self.informer.add_handler(self._on_pod)
        self.ever_ready: set[str] = set()
        self._check = check

    def _on_pod(self, kind: WatchEventType, pod: dict[str, Any]) -> None:
        if kind != "DELETED" and is_pod_ready(pod):
            self.ever_ready.add(pod["metadata"]["uid"])
        self._check(self.informer.store, self.ever_ready)

    def pods(self, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [pod for pod in self.informer.objects() if predicate(pod)]


def granted(pod: dict[str, Any]) -> bool:
    return bool((pod["metadata"].get("annotations") or {}).get(NAMES.granted_at_annotation))


async def with_cluster(
    backend: Backend,
    scenario: Scenario,
    log_check: Callable[..., None],
    body: Callable[[SimCluster, PodLog], Awaitable[None]],
) -> None:
    async with SimCluster(api=backend.api, settings=ClusterSettings.from_scenario(scenario)) as cluster:
        log = PodLog(backend.client, backend.namespace, log_check)
        task = asyncio.create_task(log.informer.run())
        try:
            await asyncio.wait_for(log.informer.synced.wait(), timeout=60)
            await body(cluster, log)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def slow_daemonset(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "slow-agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "slow-agent"}},
            "template": {
                "metadata": {
                    "labels": {"app": "slow-agent"},
                    # 12 simulated CPU-seconds on an idle node: about 3 s of wall time at time scale 4.
                    "annotations": {podparams.CPU_SECONDS: "12", podparams.LIVENESS_SECONDS: "none"},
                },
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]},
            },
        },
    }


async def test_wait_for_daemonsets_holds_grants_until_the_daemonset_pod_is_ready(backend: Backend) -> None:
    scenario = one_node(
        "nodePolicies:\n- name: gate\n  waitForDaemonSets: true\n  throttleConfig: {maxConcurrent: {value: 4}}\n"
    )
    violations: list[str] = []
    waited_behind_agent: list[str] = []

    def check(store: dict[str, dict[str, Any]], ever_ready: set[str]) -> None:
        agents = [p for p in store.values() if (owner_kind(p) or ("", ""))[0] == "DaemonSet"]
        agent_ready = bool(agents) and all(p["metadata"]["uid"] in ever_ready for p in agents)
        for pod in store.values():
            if not uses_stagger(pod, names=NAMES) or agent_ready:
                continue
            if granted(pod):
                violations.append(pod["metadata"]["name"])
            elif stage(pod) == "starting":
                waited_behind_agent.append(pod["metadata"]["name"])

    async def body(cluster: SimCluster, log: PodLog) -> None:
        await cluster.apply(slow_daemonset(backend.namespace))

        async def agent_bound() -> bool:
            return bool(
                log.pods(
                    lambda p: (owner_kind(p) or ("", ""))[0] == "DaemonSet" and p["spec"].get("nodeName")
                )
            )

        await eventually(agent_bound, within=30, what="the DaemonSet pod on the node")
        app = Workload(kind="Deployment", name="app", namespace=backend.namespace, replicas=3, cpu_seconds=1)
        await cluster.apply(
            workload_manifest(app, stagger=replace(scenario.stagger, host_port=cluster.host_port))
        )

        async def all_ready() -> bool:
            return len(log.pods(lambda p: uses_stagger(p, names=NAMES) and is_pod_ready(p))) == 3

        await eventually(all_ready, within=120, what="the 3 app pods Ready")

    await with_cluster(backend, scenario, check, body)
    assert violations == []
    assert waited_behind_agent, "the app pods never had to wait: the gate was not exercised"


async def test_wait_for_daemonsets_waits_for_a_pod_not_on_the_node_until_the_bound(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DaemonSet that should run on the node but whose pod is never bound there (it asks for more memory
    than the node has: the DaemonSet controller makes it all the same, and the scheduler leaves it
    Pending): the app's pods wait for it, named in their StaggerWaiting Event, until `--daemonset-wait`;
    then lockd grants and counts the wait it gave up."""
    monkeypatch.setenv("STAGGER_DAEMONSET_WAIT", "3s")  # lockd's processes inherit it
    scenario = one_node(
        "nodePolicies:\n- name: gate\n  waitForDaemonSets: true\n  throttleConfig: {maxConcurrent: {value: 4}}\n"
    )
    huge = slow_daemonset(backend.namespace)
    huge["metadata"]["name"] = "huge-agent"
    [container] = huge["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": {"memory": "64Gi"}}

    async def body(cluster: SimCluster, log: PodLog) -> None:
        await cluster.apply(huge)

        def daemon_pod(pod: dict[str, Any]) -> bool:
            return (owner_kind(pod) or ("", ""))[0] == "DaemonSet"

        async def pending() -> bool:
            return bool(log.pods(daemon_pod))

        await eventually(pending, within=30, what="the DaemonSet's pod (never bound)")
        app = Workload(kind="Deployment", name="app", namespace=backend.namespace, replicas=2, cpu_seconds=1)
        await cluster.apply(
            workload_manifest(app, stagger=replace(scenario.stagger, host_port=cluster.host_port))
        )

        async def all_ready() -> bool:
            return len(log.pods(lambda p: uses_stagger(p, names=NAMES) and is_pod_ready(p))) == 2

        await eventually(all_ready, within=120, what="the 2 app pods Ready after the bound")
        assert all(not pod["spec"].get("nodeName") for pod in log.pods(daemon_pod))  # never bound
        events = await backend.client.list(EVENTS, namespace=backend.namespace)
        waits = [e["message"] for e in events["items"] if e.get("reason") == "StaggerWaiting"]
        assert waits and all(f"{backend.namespace}/huge-agent (no pod on this node yet)" in m for m in waits)
        [lockd] = cluster.lockds.values()
        async with aiohttp.ClientSession() as session, session.get(f"{lockd.spec.url}/metrics") as answer:
            page = await answer.text()
        assert by_label(page, "stagger_lockd_daemonset_waits_given_up_total", "why") == {"podMissing": 1.0}

    await with_cluster(backend, scenario, lambda store, ever_ready: None, body)


async def test_count_all_starting_counts_pods_without_stagger(backend: Backend) -> None:
    scenario = one_node(
        "nodePolicies:\n- name: all\n  countAllStarting: true\n  throttleConfig: {maxConcurrent: {value: 2}}\n"
    )
    over_limit_grants: list[tuple[str, int]] = []
    seen_granted: set[str] = set()

    def check(store: dict[str, dict[str, Any]], ever_ready: set[str]) -> None:
        def starting(pod: dict[str, Any]) -> bool:
            return pod["metadata"]["uid"] not in ever_ready and stage(pod) == "starting"

        plain = [p for p in store.values() if not uses_stagger(p, names=NAMES) and starting(p)]
        holders = [p for p in store.values() if uses_stagger(p, names=NAMES) and granted(p) and starting(p)]
        for pod in holders:
            uid = pod["metadata"]["uid"]
            if uid not in seen_granted:
                seen_granted.add(uid)
                # At the moment of a grant, plain starting pods plus granted ones must fit the limit.
                if len(plain) + len(holders) > 2:
                    over_limit_grants.append((pod["metadata"]["name"], len(plain) + len(holders)))

    async def body(cluster: SimCluster, log: PodLog) -> None:
        plain = Workload(
            kind="Deployment",
            name="plain",
            namespace=backend.namespace,
            replicas=2,
            cpu_seconds=6,
            stagger=False,
        )
        await cluster.apply(workload_manifest(plain, stagger=scenario.stagger))

        async def plain_running() -> bool:
            return (
                len(log.pods(lambda p: not uses_stagger(p, names=NAMES) and p["spec"].get("nodeName"))) == 2
            )

        await eventually(plain_running, within=30, what="the plain pods on the node")
        app = Workload(kind="Deployment", name="app", namespace=backend.namespace, replicas=3, cpu_seconds=1)
        await cluster.apply(
            workload_manifest(app, stagger=replace(scenario.stagger, host_port=cluster.host_port))
        )

        async def all_ready() -> bool:
            return len(log.pods(is_pod_ready)) == 5

        await eventually(all_ready, within=120, what="all 5 pods Ready")

    await with_cluster(backend, scenario, check, body)
    assert len(seen_granted) == 3
    assert over_limit_grants == []
