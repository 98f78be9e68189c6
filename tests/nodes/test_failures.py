"""Failures on real nodes, with the session release (tests/nodes/policies.py: 2 starts at a time per node):

- lockd's container killed (SIGKILL, as the OOM killer does) mid-herd and restarted by its kubelet: it
  rebuilds its slots from the pods' node-slot annotations, so the node limit holds throughout and every pod
  ends Ready;
- a kubelet restarted mid-herd: the pods it runs go on, and every pod ends Ready within the limits;
- a node whose lockd is not running (the DaemonSet kept off it): its opted-in pods wait for lockd, then
  start without it once the node policy's unreachableWait (30 s here; maxWait is 45 s) is up, as
  docs/design.md promises (fail-open), and the controller counts each with its cause (an annotation and a
  Warning Event), read from the init client's termination message.
"""

from __future__ import annotations

import os
import signal
import time

from sim.realcluster.cluster import RealCluster
from stagger.contracts.failopen import read_outcome
from tests.nodes.kube import Herd, Kube, Release, init_status, is_ready, restarts, wait_for, workload
from tests.nodes.policies import NODE_LIMIT, POLICIES


def _one_starting_on(herd: Herd, node: str) -> bool | None:
    last = herd.samples[-1] if herd.samples else None
    return True if last is not None and last.starting_per_node.get(node, 0) >= 1 else None


def test_lockd_killed_mid_herd_rebuilds_its_slots(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    namespace = kube.namespace("lockd-killed")
    node = real_cluster.nodes[0]
    before = restarts(stagger.lockd_pod(node.plan.name))
    try:
        with Herd(kube, namespace, "app=web") as herd:
            kube.apply(workload("web", namespace, replicas=8, cpu_seconds=2.0))
            wait_for(
                f"a pod starting on {node.plan.name}",
                lambda: _one_starting_on(herd, node.plan.name),
                timeout=90,
            )
            os.kill(node.container_pid("lockd"), signal.SIGKILL)
            herd.wait_ready(8, timeout=240)
        assert not herd.over_node_limit(NODE_LIMIT), herd.over_node_limit(NODE_LIMIT)
        assert all(restarts(p) == 0 for p in kube.pods(namespace, "app=web"))
        assert restarts(stagger.lockd_pod(node.plan.name)) == before + 1
    finally:
        kube.delete_namespace(namespace)


def test_a_kubelet_restarted_mid_herd(stagger: Release, kube: Kube, real_cluster: RealCluster) -> None:
    namespace = kube.namespace("kubelet-restart")
    node = real_cluster.nodes[1]
    try:
        with Herd(kube, namespace, "app=web") as herd:
            kube.apply(workload("web", namespace, replicas=6, cpu_seconds=2.0))
            wait_for(
                f"a pod starting on {node.plan.name}",
                lambda: _one_starting_on(herd, node.plan.name),
                timeout=90,
            )
            node.restart_daemon("kubelet")
            herd.wait_ready(6, timeout=240)
        assert not herd.over_node_limit(NODE_LIMIT), herd.over_node_limit(NODE_LIMIT)
        assert all(restarts(p) == 0 for p in kube.pods(namespace, "app=web"))
    finally:
        kube.delete_namespace(namespace)


def test_a_node_without_lockd_starts_its_pods_after_the_unreachable_bound(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    with_lockd, without = real_cluster.nodes
    label = "stagger-test/lockd"
    kube.run("kubectl", "label", "node", with_lockd.plan.name, f"{label}=yes", "--overwrite")
    namespace = kube.namespace("no-lockd")
    try:
        stagger.upgrade({"policies": POLICIES, "lockd": {"nodeSelector": {label: "yes"}}})
        wait_for(
            f"no lockd on {without.plan.name}",
            lambda: (
                True
                if not [
                    p
                    for p in kube.pods(stagger.namespace, stagger.selector("lockd"))
                    if p["spec"].get("nodeName") == without.plan.name
                ]
                else None
            ),
        )
        app = workload("web", namespace, replicas=2, cpu_seconds=0.2)
        app["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": without.plan.name}
        began = time.monotonic()
        kube.apply(app)

        def ready() -> list | None:
            pods = kube.pods(namespace, "app=web")
            return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

        pods = wait_for("both pods Ready without lockd", ready, timeout=30 + 60)
        took = time.monotonic() - began
        # They waited for lockd (the node policy's unreachableWait, 30 s, reaches them through admission),
        # then went: not after the 45 s of maxWait, which bounds waiting in lockd's queue.
        assert took >= 25, took
        for pod in pods:
            assert init_status(pod, "stagger-wait")["state"]["terminated"]["exitCode"] == 0
            log = kube.run("kubectl", "logs", "-n", namespace, pod["metadata"]["name"], "-c", "stagger-wait")
            assert "could not be reached all along" in log and "unreachable-wait 30s" in log, log
            message = init_status(pod, "stagger-wait")["state"]["terminated"].get("message")
            outcome = read_outcome(message)
            assert outcome is not None and outcome.get("cause") == "lockdUnreachable", message

        # The controller's leader counted both from their status: marked, and a Warning Event naming the cause.
        def counted() -> bool | None:
            marks = [
                (p["metadata"].get("annotations") or {}).get(f"{stagger.prefix}/started-without-slot")
                for p in kube.pods(namespace, "app=web")
            ]
            events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
            warned = [e for e in events if e.get("reason") == "StaggerStartedWithoutSlot"]
            done = marks == ["lockdUnreachable"] * 2 and len(warned) == 2
            return True if done and all("(lockdUnreachable)" in e["message"] for e in warned) else None

        wait_for("the controller to count both fail-opens", counted, timeout=60)
    finally:
        kube.delete_namespace(namespace)
        stagger.upgrade({"policies": POLICIES})
        kube.run("kubectl", "label", "node", with_lockd.plan.name, f"{label}-")
        stagger.wait_ready(nodes=len(real_cluster.nodes))
