"""An opted-in Deployment on real nodes: 6 replicas of the test bed's workload (real CPU work before Ready).
Every pod has `stagger-wait` first, which exits 0 before the app container starts; the grant is on the pod
(granted-at and node-slot); at most two pods start at a time on a node (the node policy's maxConcurrent 2);
and lockd's /status, read with curl on the node's address and through the API server's pod proxy, counts
the grants and shows the node's real load."""

from __future__ import annotations

import datetime
import json

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import PREFIX, Herd, Kube, Release, init_status, lockd_status, restarts, workload
from tests.nodes.policies import NODE_LIMIT


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_deployment_starts_at_most_the_node_limit_at_a_time(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    namespace = kube.namespace("deployment")
    before = {n.plan.name: lockd_status(n.plan.address)["counters"]["granted"] for n in real_cluster.nodes}
    try:
        with Herd(kube, namespace, "app=web") as herd:
            kube.apply(workload("web", namespace, replicas=6, cpu_seconds=1.5))
            herd.wait_ready(6, timeout=120)
        pods = kube.pods(namespace, "app=web")
        assert len(pods) == 6
        for pod in pods:
            assert [c["name"] for c in pod["spec"]["initContainers"]] == ["stagger-wait"]
            wait = init_status(pod, "stagger-wait")["state"]["terminated"]
            assert wait["exitCode"] == 0, wait
            app = pod["status"]["containerStatuses"][0]
            assert _time(wait["finishedAt"]) <= _time(app["state"]["running"]["startedAt"])
            annotations = pod["metadata"]["annotations"]
            assert f"{PREFIX}/granted-at" in annotations and f"{PREFIX}/node-slot" in annotations
            # The unready spell the grant was for, as the kubelet stamped it (what a restart compares).
            ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
            assert annotations[f"{PREFIX}/node-slot-unready-since"] <= ready["lastTransitionTime"], (
                annotations
            )
            assert restarts(pod) == 0
        assert herd.max_starting_per_node() <= NODE_LIMIT, [
            s for s in herd.samples if max(s.starting_per_node.values(), default=0) > 1
        ]

        per_node = {name: sum(1 for p in pods if p["spec"]["nodeName"] == name) for name in before}
        for node in real_cluster.nodes:
            status = lockd_status(node.plan.address)
            assert status["counters"]["granted"] - before[node.plan.name] == per_node[node.plan.name], status
            assert status["slots"] == [] and status["waiting"] == 0
            lockd = stagger.lockd_pod(node.plan.name)["metadata"]["name"]
            proxied = json.loads(
                kube.run(
                    "kubectl",
                    "get",
                    "--raw",
                    f"/api/v1/namespaces/{stagger.namespace}/pods/{lockd}:9400/proxy/status",
                )
            )
            assert proxied["node"] == node.plan.name
            assert proxied["load"]["source"] == "stat+psi"
            text = kube.run(
                "kubectl",
                "get",
                "--raw",
                f"/api/v1/namespaces/{stagger.namespace}/pods/{lockd}:9400/proxy/status?format=text",
            )
            assert f"node {node.plan.name}" in text and "counters granted" in text
    finally:
        kube.delete_namespace(namespace)
