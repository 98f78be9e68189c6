"""What lockd keeps of the pods and the Node it watches: everything it reads, without managedFields, kubectl's
last-applied copy, the parts of a pod's spec and status it never reads, or the Node's status; and every
reading lockd makes of a pod gives the same answer on the lean copy as on the pod the API server sent."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lockd import daemonsetwait, podprobes, pods
from lockd.clusterwatch import lean_node, lean_pod
from stagger.contracts.podtoken import TOKEN_VOLUME
from stagger.daemonplacement import should_run
from stagger.names import Names
from stagger.podstate import restart_state


def test_a_pod_keeps_all_but_managed_fields_and_the_last_applied_copy() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "uid": "u",
            "labels": {"app": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "x/y": "1"},
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"kind": "ReplicaSet"}],
        },
        "spec": {"nodeName": "n"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    lean = lean_pod(pod)
    assert lean["metadata"] == {
        "name": "p",
        "uid": "u",
        "labels": {"app": "a"},
        "annotations": {"x/y": "1"},
        "ownerReferences": [{"kind": "ReplicaSet"}],
    }
    # Of the containers, the spec keeps their probe plan (none here: the plan every such pod shares).
    assert lean["spec"] == pod["spec"] | {podprobes.PLAN_KEPT: podprobes.NO_PROBE}
    assert lean["status"] == pod["status"]
    assert "managedFields" in pod["metadata"]  # the object given is not changed
    assert lean_pod({"metadata": {"name": "q"}, "status": {}}) == {"metadata": {"name": "q"}, "status": {}}


def test_the_node_keeps_its_metadata_and_taints_only() -> None:
    taints = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": {"zone": "a"}, "managedFields": [{}]},
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": "x://1", "taints": taints},
        "status": {"images": [{"names": ["x"]}] * 50},
    }
    assert lean_node(node) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": {"zone": "a"}},
        "spec": {"taints": taints},
    }
    # Which DaemonSets should run here reads the same on the lean copy (the taint keeps this one off).
    agent = {"metadata": {"name": "agent", "uid": "d"}, "spec": {"template": {"spec": {}}}}
    assert not should_run(agent, lean_node(node)) and not should_run(agent, node)
    assert lean_node({"metadata": {"name": "n"}, "spec": {}}) == {"metadata": {"name": "n"}}


def full_pod(*, init_state: dict[str, Any], app_state: dict[str, Any], ready: bool) -> dict[str, Any]:
    """A pod as kube-apiserver sends it, with what lockd never reads: containers with env, probes and
    volumes, tolerations, condition times, image IDs, last states."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": {"app": "web", Names().enable_label: "1"},
            "annotations": {Names().node_slot_annotation: "2026-11-24T05:00:03Z"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}
            ],
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": "n1",
            "initContainers": [
                {"name": "stagger-wait", "image": "stagger:1", "env": [{"name": "A", "value": "1"}]}
            ],
            "containers": [
                {
                    "name": "app",
                    "image": "example/web:1",
                    "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {
                    "name": TOKEN_VOLUME,
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                },
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
        "status": {
            "phase": "Running" if ready else "Pending",
            "podIP": "10.0.0.7",
            "hostIP": "192.0.2.1",
            "startTime": "2026-11-24T05:00:00Z",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-24T05:00:01Z"},
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-11-24T05:00:02Z",
                },
            ],
            "initContainerStatuses": [
                {
                    "name": "stagger-wait",
                    "ready": False,
                    "state": init_state,
                    "image": "stagger:1",
                    "imageID": "sha256:1",
                    "lastState": {},
                    "restartCount": 0,
                }
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": ready,
                    "state": app_state,
                    "image": "example/web:1",
                    "imageID": "sha256:2",
                    "containerID": "containerd://abc",
                    "lastState": {"terminated": {"exitCode": 1}},
                    "restartCount": 1,
                }
            ],
        },
    }


WAITING = {"waiting": {"reason": "PodInitializing"}}
RUNNING = {"running": {"startedAt": "2026-11-24T05:00:01Z"}}
CRASHING = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
DONE = {"terminated": {"exitCode": 0, "reason": "Completed"}}


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(full_pod(init_state=RUNNING, app_state=WAITING, ready=False), id="init-running"),
        pytest.param(full_pod(init_state=DONE, app_state=WAITING, ready=False), id="app-waiting"),
        pytest.param(full_pod(init_state=DONE, app_state=RUNNING, ready=False), id="app-not-ready"),
        pytest.param(full_pod(init_state=DONE, app_state=RUNNING, ready=True), id="ready"),
        pytest.param(full_pod(init_state=DONE, app_state=CRASHING, ready=False), id="crash-looping"),
    ],
)
def test_every_reading_is_the_same_on_the_lean_copy(pod: dict[str, Any]) -> None:
    sent = copy.deepcopy(pod)
    lean = lean_pod(pod)
    assert pod == sent  # the object given is not changed
    names = Names()
    for reading in (
        pods.stage,
        pods.why_held,
        pods.phase,
        pods.owner_kind,
        pods.key_of,
        lambda p: pods.uses_stagger(p, names=names),
        lambda p: pods.identity_problem(p, node="n1", namespace="shop", name="web-1", uid="u-1"),
        pods.has_token_volume,
        podprobes.pod_plan,
        lambda p: pods.slots_to_rebuild([p], names=names),
        lambda p: daemonsetwait.waiting_for([p], view=None, own_pod=None),
        lambda p: pods.other_starting([p], names=names, exclude_namespaces=(), holders=()),
        restart_state,
        lambda p: (p["spec"].get("nodeName"), p["spec"].get("hostNetwork"), p["status"].get("podIP")),
        lambda p: p["metadata"].get("resourceVersion"),
    ):
        assert reading(lean) == reading(pod)
    # The readings are not vacuous: the pod uses stagger, and while it starts its node slot is rebuilt.
    assert pods.uses_stagger(lean, names=names)
    assert pods.has_token_volume(lean) and pods.has_token_volume(lean_pod(lean))
    assert podprobes.pod_plan(lean).probed  # the app's httpGet readiness probe
    assert (pods.slots_to_rebuild([lean], names=names) != []) == (pods.stage(lean) == "starting")
    # ... and its container, which ran before (restartCount 1), is read as starting again while it runs and
    # is not ready, or waits in CrashLoopBackOff.
    app = pod["status"]["containerStatuses"][0]
    restarting = "restarting" if app["state"] == RUNNING and not app["ready"] else None
    assert restart_state(lean) == ("crashLoopBackOff" if app["state"] == CRASHING else restarting)
    # The kept probe plan is no JSON but a frozen dataclass of a few slots (for most pods the one shared
    # NO_PROBE), in place of the containers: the rest is measured as JSON.
    spec = {key: value for key, value in lean["spec"].items() if key != podprobes.PLAN_KEPT}
    assert len(json.dumps(lean | {"spec": spec})) < len(json.dumps(pod)) / 3
