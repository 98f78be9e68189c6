"""Each peer's users moving over on real nodes, with the session release upgraded once for the module to what
`kubectl stagger convert` tells them to set (docs/migration.md): straggler's label prefix, pod-startup-lock's
port 8888, PacemakerConfig objects read live, thundering-herd-scheduler's scheduler name; set back after.

- straggler: its example Deployment (examples/test-slow-deployment.yaml, image and replica count mapped to
  the test bed's, as there is no registry), opted in by straggler's own label, is paced; a Job that carries
  labels of its own and straggler's enable label on its pod template only is held in evict mode (its pods
  evicted and replaced) and completes with no failure counted.
- pod-startup-lock: its own init client (built from its source, testbed/peers) with its README's arguments
  (`--host $(HOST_IP) --port 8888`) and no token is granted by lockd on port 8888 of its node, one pod at a
  time on a one-slot node.
- thundering-herd-scheduler: a Deployment that names its scheduler, which is not installed, is opted in at
  admission, given the default scheduler, scheduled and staggered.
- pod-pacemaker: a PacemakerConfig created with `kubectl apply` (its CRD from its chart) becomes the node's
  policy within seconds, and its deletion hands the node back to the policy file.
- a namespace labelled with the enable label opts in its pods without a label of their own.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import Herd, Kube, Release, is_ready, lockd_status, restarts, wait_for, workload
from tests.nodes.policies import MODE_LABEL, ONE_SLOT_LABEL, POLICIES, STAGGER_IMAGE

DATA = Path(__file__).parent / "data"
STRAGGLER_PREFIX = "v1.straggler.technicianted"
HERD_SCHEDULER = "thundering-herd-scheduler"
STARTUP_LOCK_PORT = 8888
STARTUP_LOCK_INIT_IMAGE = "localhost/stagger-testbed/startup-lock-init:1"

# The session's policies and one for straggler's example (its pods carry `staggerimages: "1"`, as in
# straggler's own examples/config.yaml): one pod, then 2 per Ready one, in lock mode.
PEER_POLICIES: dict[str, Any] = copy.deepcopy(POLICIES)
PEER_POLICIES["staggeringPolicies"] = [
    *POLICIES["staggeringPolicies"],  # type: ignore[misc]
    {
        "name": "straggler-example",
        "labelSelector": {"staggerimages": "1"},
        "maxBlockedDuration": "never",
        "pacer": {"exponential": {"minInitial": 1, "multiplier": 2, "maxStagger": 4}},
    },
]


def _peer_values() -> dict[str, Any]:
    return {
        "prefix": STRAGGLER_PREFIX,
        "policies": PEER_POLICIES,
        "lockd": {"podStartupLock": {"port": STARTUP_LOCK_PORT}, "pacemakerConfigs": True},
        "controller": {"webhook": {"schedulerNames": [HERD_SCHEDULER]}},
    }


@pytest.fixture(scope="module")
def peers(stagger: Release, kube: Kube, real_cluster: RealCluster) -> Iterator[Release]:
    """The session release upgraded for the peers' users; the CRD of PacemakerConfig installed first (lockd
    finds it at start), both undone after."""
    before = dict(stagger.values)
    kube.run("kubectl", "apply", "-f", str(DATA / "pacemaker-crd.yaml"))
    try:
        stagger.upgrade(_peer_values())
        stagger.wait_ready(nodes=len(real_cluster.nodes), timeout=180)
        yield stagger
    finally:
        stagger.upgrade(before)
        stagger.wait_ready(nodes=len(real_cluster.nodes), timeout=180)
        kube.run("kubectl", "delete", "-f", str(DATA / "pacemaker-crd.yaml"), "--wait", check=False)


def _mapped(manifest: dict[str, Any], *, replicas: int) -> dict[str, Any]:
    """The peer's manifest with what no registry here can serve mapped: every image to the stagger image
    (Debian, with `sleep` and `true`), pulled never; and fewer replicas, for the test's time."""
    mapped = copy.deepcopy(manifest)
    mapped["spec"]["replicas"] = replicas
    for container in mapped["spec"]["template"]["spec"]["containers"]:
        container["image"] = STAGGER_IMAGE
        container["imagePullPolicy"] = "Never"
    return mapped


def test_stragglers_example_deployment_is_paced(peers: Release, kube: Kube) -> None:
    manifest = yaml.safe_load((DATA / "straggler-test-slow-deployment.yaml").read_text())
    namespace = kube.namespace("peer-straggler")
    try:
        deployment = _mapped(manifest, replicas=4)
        deployment["metadata"]["namespace"] = namespace
        with Herd(kube, namespace, "app=slow-deployment", prefix=STRAGGLER_PREFIX) as herd:
            kube.apply(deployment)
            herd.wait_ready(4, timeout=240)
        pods = kube.pods(namespace, "app=slow-deployment")
        assert all(p["metadata"]["labels"].get(f"{STRAGGLER_PREFIX}/group") for p in pods), pods
        assert herd.held, "no pod was held"
        # 1 first (nothing Ready yet), as the exponential pacer says.
        assert all(s.started <= 1 for s in herd.samples if s.ready == 0), herd.samples[:20]
        assert all(restarts(p) == 0 for p in pods)
    finally:
        kube.delete_namespace(namespace)


def test_a_job_enabled_by_its_template_label_only_is_held_by_evictions(peers: Release, kube: Kube) -> None:
    namespace = kube.namespace("peer-straggler-job")
    try:
        job = workload(
            "batch",
            namespace,
            replicas=4,
            cpu_seconds=1.0,
            labels={MODE_LABEL: "evict-nodeselector"},
            kind="Job",
            exit_after=1.0,
            prefix=STRAGGLER_PREFIX,
        )
        # Labels of its own without the enable label: straggler enables Jobs by their pod template.
        job["metadata"]["labels"] = {"team": "batch"}
        with Herd(kube, namespace, "app=batch", prefix=STRAGGLER_PREFIX) as herd:
            kube.apply(job)

            def complete() -> dict[str, Any] | None:
                status = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/batch").get("status", {})
                return status if status.get("succeeded") == 4 else None

            status = wait_for("the Job's 4 completions", complete, timeout=240)
        stored = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/batch")
        rules = stored["spec"].get("podFailurePolicy", {}).get("rules", [])
        assert any(r.get("action") == "Ignore" for r in rules), stored["spec"]
        assert int(status.get("failed") or 0) == 0, status
        assert herd.held, "no pod was held"
        assert herd.gone(), "no held pod was evicted"
    finally:
        kube.delete_namespace(namespace)


def _startup_lock_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """pod-startup-lock's init/README.md example pod, its init container as the README writes it; the app is
    the test bed's workload (Ready after 1 CPU-second), pinned to `node`. No stagger label: not opted in."""
    app = workload("x", namespace, replicas=1, cpu_seconds=1.0)["spec"]["template"]["spec"]["containers"][0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "myapp"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 2,
            "containers": [app],
            "initContainers": [
                {
                    "name": "startup-lock-init-container",
                    "image": STARTUP_LOCK_INIT_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["--host", "$(HOST_IP)", "--port", str(STARTUP_LOCK_PORT), "--duration", "15"],
                    "env": [{"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
                }
            ],
        },
    }


def test_pod_startup_locks_own_init_client_is_granted_on_its_port(
    peers: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    node = real_cluster.nodes[0].plan
    kube.run("kubectl", "label", "node", node.name, f"{ONE_SLOT_LABEL}=1", "--overwrite")
    namespace = kube.namespace("peer-startup-lock")
    try:
        wait_for(
            "the one-slot node policy",
            lambda: True if lockd_status(node.address)["policy"]["name"] == "one-slot" else None,
            timeout=30,
        )
        with Herd(kube, namespace, "app=myapp") as herd:
            kube.apply(*(_startup_lock_pod(f"myapp-{i}", namespace, node.name) for i in range(3)))
            herd.wait_ready(3, timeout=180)
        # One slot: never two of them started and not yet Ready at once.
        assert herd.max_starting_per_node() <= 1, herd.samples
        for i in range(3):
            log = kube.run(
                "kubectl", "logs", "-n", namespace, f"myapp-{i}", "-c", "startup-lock-init-container"
            )
            assert "Lock acquired" in log, log
        # Someone waited: lockd answered 423 on the port before it answered 200.
        waited = [
            kube.run("kubectl", "logs", "-n", namespace, f"myapp-{i}", "-c", "startup-lock-init-container")
            for i in range(3)
        ]
        assert any("status: 423" in log for log in waited), waited
    finally:
        kube.delete_namespace(namespace)
        kube.run("kubectl", "label", "node", node.name, f"{ONE_SLOT_LABEL}-")


def test_a_pod_naming_the_herd_scheduler_is_scheduled_and_staggered(peers: Release, kube: Kube) -> None:
    namespace = kube.namespace("peer-herd")
    try:
        deployment = workload("herd", namespace, replicas=4, cpu_seconds=1.0, prefix=None)
        deployment["spec"]["template"]["spec"]["schedulerName"] = HERD_SCHEDULER
        with Herd(kube, namespace, "app=herd", prefix=STRAGGLER_PREFIX) as herd:
            kube.apply(deployment)
            herd.wait_ready(4, timeout=180)
        pods = kube.pods(namespace, "app=herd")
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "default-scheduler", pod["spec"]
            assert pod["metadata"]["labels"].get(f"{STRAGGLER_PREFIX}/enable") == "1", pod["metadata"]
            assert any(c["name"].startswith("stagger") for c in pod["spec"].get("initContainers", [])), pod[
                "spec"
            ]
        assert herd.max_starting_per_node() <= 2
    finally:
        kube.delete_namespace(namespace)


def test_a_namespace_with_the_enable_label_opts_in_its_pods(peers: Release, kube: Kube) -> None:
    namespace = kube.namespace("peer-namespace")
    try:
        kube.run("kubectl", "label", "namespace", namespace, f"{STRAGGLER_PREFIX}/enable=1")
        deployment = workload("every", namespace, replicas=2, cpu_seconds=0.5, prefix=None)
        with Herd(kube, namespace, "app=every", prefix=STRAGGLER_PREFIX) as herd:
            kube.apply(deployment)
            herd.wait_ready(2, timeout=120)
        for pod in kube.pods(namespace, "app=every"):
            assert pod["metadata"]["labels"].get(f"{STRAGGLER_PREFIX}/enable") == "1", pod["metadata"]
            assert pod["spec"].get("initContainers"), pod["spec"]
    finally:
        kube.delete_namespace(namespace)


def test_a_pacemaker_config_object_sets_the_nodes_limit_within_seconds(
    peers: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    node = real_cluster.nodes[1].plan
    config = {
        "apiVersion": "woehrl.net/v1alpha",
        "kind": "PacemakerConfig",
        "metadata": {"name": "peer-pacemaker"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node.name},
            "priority": 100,
            "throttleConfig": {"maxConcurrent": {"value": 1}},
        },
    }
    kube.apply(config)
    try:
        status = wait_for(
            f"lockd on {node.name} to take PacemakerConfig peer-pacemaker",
            lambda: s if (s := lockd_status(node.address))["policy"]["name"] == "peer-pacemaker" else None,
            timeout=20,
        )
        assert "1" in json.dumps(status["policy"]), status["policy"]
    finally:
        kube.run("kubectl", "delete", "pacemakerconfig", "peer-pacemaker", "--wait")
    wait_for(
        f"lockd on {node.name} back to the policy file's",
        lambda: True if lockd_status(node.address)["policy"]["name"] == "default" else None,
        timeout=20,
    )


def test_lockd_is_ready_on_every_node_after_the_upgrade(peers: Release, kube: Kube) -> None:
    """The upgrade itself: every lockd Ready with the new flags (the port, the objects' watch)."""
    for pod in kube.pods(peers.namespace, peers.selector("lockd")):
        assert is_ready(pod), pod["status"]
        args = " ".join(pod["spec"]["containers"][0].get("args", []))
        env = json.dumps(pod["spec"]["containers"][0].get("env", []))
        assert str(STARTUP_LOCK_PORT) in args + env, (args, env)
