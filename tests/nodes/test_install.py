"""`helm install` of charts/stagger on real nodes with the image `make image` builds, as a user runs it: lockd
Ready on every node (its hostPort reachable on the node's address), two controller replicas of which one
leads, and the pods webhook reached by kube-apiserver through the controller's Service: a pod labelled as
NOTES.txt says gets the init client, its grant, and starts; one without the label is left alone; `helm test`
passes; `kubectl stagger status` reads every node's lockd through the API server. The nodes' runtime is
containerd 2 (built by `make node-tools`), as the Node objects and crictl on each node report it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import ENABLE, PREFIX, Kube, Release, is_ready, lockd_status, wait_for, workload
from tests.nodes.policies import NODE_LIMIT


def test_every_node_runs_containerd_2(kube: Kube, real_cluster: RealCluster) -> None:
    """kubelet 1.37 needs the CRI RuntimeConfig call, which containerd 1.6 lacks: the nodes run containerd 2."""
    versions = {
        node["metadata"]["name"]: node["status"]["nodeInfo"]["containerRuntimeVersion"]
        for node in kube.get("/api/v1/nodes")["items"]
    }
    assert set(versions) == {node.plan.name for node in real_cluster.nodes}, versions
    assert all(v.startswith("containerd://2.") for v in versions.values()), versions
    for node in real_cluster.nodes:
        reported = dict(line.split(":", 1) for line in node.crictl("version").splitlines() if ":" in line)
        assert reported["RuntimeName"].strip() == "containerd", reported
        assert reported["RuntimeVersion"].strip().startswith("2."), reported


def test_lockd_runs_on_every_node_and_answers_on_its_address(
    stagger: Release, real_cluster: RealCluster
) -> None:
    for node in real_cluster.nodes:
        pod = stagger.lockd_pod(node.plan.name)
        assert is_ready(pod)
        status = lockd_status(node.plan.address, stagger.lockd_port())
        assert status["node"] == node.plan.name
        assert status["mode"] == "cluster"
        # The node's real load, read by lockd in its container from /proc/stat and PSI.
        assert status["load"]["source"] == "stat+psi", status["load"]
        assert 0 <= status["load"]["cpuPercent"] <= 100
        assert status["policy"]["maxConcurrent"] == NODE_LIMIT
        assert status["policy"]["cores"] >= 1


def test_one_controller_replica_leads(stagger: Release, kube: Kube) -> None:
    controllers = kube.pods(stagger.namespace, stagger.selector("controller"))
    assert len(controllers) == 2 and all(is_ready(p) for p in controllers)
    leaders = [p for p in controllers if p["metadata"]["labels"].get(f"{stagger.prefix}/leader") == "1"]
    assert len(leaders) == 1, [p["metadata"]["labels"] for p in controllers]


def test_the_webhook_injects_the_init_client_through_the_service(stagger: Release, kube: Kube) -> None:
    namespace = kube.namespace("install-webhook")
    try:
        opted = workload("opted", namespace, replicas=1, cpu_seconds=0.2)
        plain = workload("plain", namespace, replicas=1, cpu_seconds=0.2)
        del plain["spec"]["template"]["metadata"]["labels"][next(iter(ENABLE))]
        kube.apply(opted, plain)

        def both_ready() -> list[dict] | None:
            pods = kube.pods(namespace)
            return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

        pods = {
            p["metadata"]["labels"]["app"]: p for p in wait_for("both pods Ready", both_ready, timeout=90)
        }
        assert [c["name"] for c in pods["opted"]["spec"]["initContainers"]] == ["stagger-wait"]
        assert f"{PREFIX}/granted-at" in pods["opted"]["metadata"]["annotations"]
        assert not pods["plain"]["spec"].get("initContainers")
        assert f"{PREFIX}/granted-at" not in (pods["plain"]["metadata"].get("annotations") or {})
    finally:
        kube.delete_namespace(namespace)


def test_helm_test_passes(stagger: Release, kube: Kube) -> None:
    """The chart's test pod (kubectl stagger selftest, in the image) reaches the webhook through its Service
    with the release's CA, and its node's lockd on the node's address."""
    out = kube.run("helm", "test", stagger.name, "-n", stagger.namespace, "--logs", "--timeout", "120s")
    assert "Succeeded" in out, out
    assert "ok  webhook https://" in out and "ok  lockd http://" in out, out


def test_kubectl_stagger_status_lists_the_nodes_and_the_controller(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    """`kubectl stagger status`, with only the admin kubeconfig: every node's lockd through the real API
    server's pod proxy, and the leading controller."""
    script = Path(sys.executable).parent / "kubectl-stagger"
    done = subprocess.run(
        [str(script), "status", "-n", stagger.namespace, "--kubeconfig", kube.kubeconfig, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["controller"] is not None and "error" not in report["controller"], report["controller"]
    nodes = {row["node"]: row for row in report["nodes"]}
    assert set(nodes) == {node.plan.name for node in real_cluster.nodes}, report["nodes"]
    assert all("error" not in row for row in nodes.values()), report["nodes"]
