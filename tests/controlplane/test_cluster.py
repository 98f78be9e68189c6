"""The real control plane as a cluster: kubectl sees the built server version; the official Python client
creates a Deployment and the real controller-manager makes its ReplicaSet and Pods, which the real
scheduler leaves Pending without nodes; a PodDisruptionBudget with maxUnavailable 0 makes the real API
server refuse (429) to evict a Running pod once the disruption controller has counted it, while a Pending
pod is evicted regardless (the eviction API ignores budgets for pods that are not running)."""

from __future__ import annotations

import datetime
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sim.controlplane.launcher import ControlPlane
from tests.controlplane.support import built_version, requires_binaries, wait_for
from tests.tools import tool

pytestmark = [pytest.mark.controlplane, requires_binaries]

PAUSE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet runs


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=str(control_plane.kubeconfig)) as api_client:
        yield api_client


@pytest.fixture
def namespace(api: client.ApiClient) -> str:
    """A fresh namespace per test (left in place: the session's cluster is thrown away whole)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def deployment(name: str, replicas: int, node_selector: dict[str, str]) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="main", image=PAUSE)],
                    node_selector=node_selector,
                ),
            ),
        ),
    )


def pods_of(api: client.ApiClient, namespace: str, app: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def evict(api: client.ApiClient, namespace: str, pod: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    client.CoreV1Api(api).create_namespaced_pod_eviction(pod, namespace, body)


def test_kubectl_reports_the_built_server_version(control_plane: ControlPlane) -> None:
    done = subprocess.run(
        [str(tool("kubectl")), "--kubeconfig", str(control_plane.kubeconfig), "version", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["serverVersion"]
    assert server["gitVersion"] == built_version() == control_plane.version
    assert (server["major"], server["minor"]) == tuple(built_version()[1:].split(".")[:2])


def test_deployment_gets_a_replicaset_and_pending_pods(api: client.ApiClient, namespace: str) -> None:
    # A node selector nothing matches keeps the pods Pending even if another test added a node.
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace, deployment("web", 3, {"stagger.test/no-such-node": "true"})
    )

    def replicaset() -> client.V1ReplicaSet | None:
        sets = client.AppsV1Api(api).list_namespaced_replica_set(namespace).items
        return sets[0] if sets else None

    rs = wait_for(replicaset, within=60, what="the deployment controller's ReplicaSet")
    owner = rs.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Deployment", "web", True)
    assert rs.spec.replicas == 3

    def unschedulable_pods() -> list[client.V1Pod] | None:
        pods = pods_of(api, namespace, "web")
        if len(pods) != 3:
            return None
        scheduled = [
            next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None) for p in pods
        ]
        if not all(c is not None and c.reason == "Unschedulable" for c in scheduled):
            return None
        return pods

    pods = wait_for(unschedulable_pods, within=60, what="3 pods the scheduler found no node for")
    for pod in pods:
        assert pod.status.phase == "Pending"
        assert pod.spec.node_name is None
        assert pod.metadata.owner_references[0].name == rs.metadata.name
        # The service-account admission plugin and the token controller did their part too.
        assert pod.spec.service_account_name == "default"
        assert any(v.projected is not None for v in pod.spec.volumes)


def fake_node(name: str) -> client.V1Node:
    """A Node with no kubelet behind it: Ready, with room for pods, until the node lifecycle controller
    misses its heartbeats (node-monitor-grace-period, 50 s), longer than the test needs it."""
    now = datetime.datetime.now(datetime.UTC)
    capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name}),
        status=client.V1NodeStatus(
            capacity=capacity,
            allocatable=capacity,
            conditions=[
                client.V1NodeCondition(
                    type="Ready",
                    status="True",
                    reason="KubeletReady",
                    message="test node",
                    last_heartbeat_time=now,
                    last_transition_time=now,
                )
            ],
        ),
    )


def run_as_kubelet(api: client.ApiClient, pod: client.V1Pod) -> None:
    """What a kubelet would report once the pod's containers run."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {
        "phase": "Running",
        "startTime": now,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ],
    }
    client.CoreV1Api(api).patch_namespaced_pod_status(
        pod.metadata.name, pod.metadata.namespace, {"status": status}
    )


def test_budget_blocks_eviction_of_a_running_pod(api: client.ApiClient, namespace: str) -> None:
    node = f"node-{namespace}"
    apps, core, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment("db", 3, {"kubernetes.io/hostname": node}))

    def three_pods() -> list[client.V1Pod] | None:
        pods = pods_of(api, namespace, "db")
        return pods if len(pods) == 3 else None

    pending = wait_for(three_pods, within=60, what="3 pods from the ReplicaSet")
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="db"),
            spec=client.V1PodDisruptionBudgetSpec(
                max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "db"})
            ),
        ),
    )

    def budget_status(healthy: int) -> client.V1PodDisruptionBudgetStatus | None:
        pdb = policy.read_namespaced_pod_disruption_budget("db", namespace)
        status = pdb.status
        if status is None or status.observed_generation != pdb.metadata.generation:
            return None
        return status if status.current_healthy == healthy and status.expected_pods == 3 else None

    status = wait_for(
        lambda: budget_status(0), within=60, what="the disruption controller to count 0 healthy"
    )
    assert (status.desired_healthy, status.disruptions_allowed) == (3, 0)

    # A Pending pod is evicted in spite of the budget (the API server's canIgnorePDB); its ReplicaSet
    # replaces it.
    evicted = pending[0].metadata.name
    evict(api, namespace, evicted)

    def replaced() -> list[client.V1Pod] | None:
        pods = three_pods()
        return pods if pods and evicted not in {p.metadata.name for p in pods} else None

    wait_for(replaced, within=60, what="the evicted Pending pod to be replaced")

    # Now a node for the real scheduler to bind them to, and the kubelet's part played by hand. It goes
    # at the end: the session's control plane is shared with the simulated clusters of other tests
    # (`--control-plane real`), whose pods the scheduler would otherwise bind to it too.
    core.create_node(fake_node(node))
    try:
        _bound_pods_are_protected(api, namespace, node, three_pods, budget_status)
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_node(node)


def _bound_pods_are_protected(
    api: client.ApiClient,
    namespace: str,
    node: str,
    three_pods: Callable[[], list[client.V1Pod] | None],
    budget_status: Callable[[int], client.V1PodDisruptionBudgetStatus | None],
) -> None:
    core = client.CoreV1Api(api)

    def bound_pods() -> list[client.V1Pod] | None:
        pods = three_pods()
        return pods if pods and all(p.spec.node_name == node for p in pods) else None

    bound = wait_for(bound_pods, within=90, what=f"the scheduler to bind the 3 pods to {node}")
    for pod in bound:
        run_as_kubelet(api, pod)
    status = wait_for(
        lambda: budget_status(3), within=60, what="the disruption controller to count 3 healthy"
    )
    assert (status.desired_healthy, status.disruptions_allowed) == (3, 0)

    victim = bound[0].metadata.name
    with pytest.raises(ApiException) as refused:
        evict(api, namespace, victim)
    assert refused.value.status == 429, refused.value.body
    assert "disruption budget" in str(refused.value.body)
    assert core.read_namespaced_pod(victim, namespace).metadata.deletion_timestamp is None
