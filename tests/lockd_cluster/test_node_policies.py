"""Cluster-mode node policies: the Node's labels choose the policy (and a relabel switches it without
dropping slots), countAllStarting counts other starting pods, waitForDaemonSets holds grants until this
node's DaemonSet pods are Ready."""

from __future__ import annotations

from stagger.kube import NODES
from tests.lockd_cluster.conftest import NODE, make_node, make_pod, set_ready
from tests.policies import limit_policy
from tests.waiting import eventually

POLICIES = """\
nodePolicies:
- name: general
  throttleConfig: {maxConcurrent: {value: 1}}
- name: big
  priority: 10
  nodeSelector: {size: big}
  throttleConfig: {maxConcurrent: {value: 3}}
"""


async def test_relabelled_node_switches_policy_and_keeps_slots(start_lockd, kube) -> None:
    await make_node(kube)
    pods = [await make_pod(kube, f"p{i}") for i in range(3)]
    lockd = await start_lockd(POLICIES)
    assert (await lockd.status())["policy"]["name"] == "general"
    assert (await lockd.lock(pods[0])).status == 200
    assert (await lockd.lock(pods[1])).status == 423
    await kube.patch(NODES, name=NODE, patch={"metadata": {"labels": {"size": "big"}}})

    async def switched() -> bool:
        return (await lockd.status())["policy"]["name"] == "big"

    await eventually(switched, what="the policy to follow the node label")
    status = await lockd.status()
    assert "priority 10" in status["policy"]["why"]
    assert status["policy"]["nodeLabels"] == {"size": "big"}
    assert [s["name"] for s in status["slots"]] == ["p0"]
    assert (await lockd.lock(pods[1], wait="5")).status == 200
    assert (await lockd.lock(pods[2], wait="5")).status == 200


async def test_count_all_starting_counts_plain_pods_but_not_daemonsets_or_excluded(start_lockd, kube) -> None:
    await make_node(kube)
    plain = await make_pod(kube, "plain", stagger=False)
    await make_pod(kube, "agent", stagger=False, owner=("DaemonSet", "agent"))
    await make_pod(kube, "dns", namespace="kube-system", stagger=False)
    mine = await make_pod(kube, "mine")
    lockd = await start_lockd(limit_policy(1, extra="  countAllStarting: true\n"))
    denied = await lockd.lock(mine)
    assert denied.status == 423
    reason = (await denied.json())["reason"]
    assert (
        reason == "1 of 1 slots in use: 0 granted + 1 other pods starting (maxConcurrent, countAllStarting)"
    )
    await set_ready(kube, plain)
    assert (await lockd.lock(mine, wait="10")).status == 200


async def test_wait_for_daemonsets(start_lockd, kube) -> None:
    await make_node(kube)
    agent = await make_pod(
        kube, "agent-x", namespace="kube-system", stagger=False, owner=("DaemonSet", "agent")
    )
    pod = await make_pod(kube, "app")
    lockd = await start_lockd(limit_policy(5, extra="  waitForDaemonSets: true\n"))
    denied = await lockd.lock(pod)
    assert denied.status == 423
    assert "kube-system/agent" in (await denied.json())["reason"]
    await set_ready(kube, agent)
    assert (await lockd.lock(pod, wait="10")).status == 200


async def test_lockds_own_pod_does_not_block_the_gate(start_lockd, kube) -> None:
    await make_node(kube)
    await make_pod(kube, "lockd-x", namespace="default", stagger=False, owner=("DaemonSet", "lockd"))
    pod = await make_pod(kube, "app")
    lockd = await start_lockd(
        limit_policy(5, extra="  waitForDaemonSets: true\n"), own_pod=("default", "lockd-x")
    )
    assert (await lockd.lock(pod)).status == 200
