"""What lockd keeps of the pods and the Node it watches: everything it reads, without managedFields, kubectl's
last-applied copy, or the Node's status."""

from __future__ import annotations

from lockd.cluster import lean_node, lean_pod


def test_a_pod_keeps_all_but_managed_fields_and_the_last_applied_copy() -> None:
    pod = {
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
    assert lean["spec"] is pod["spec"] and lean["status"] is pod["status"]
    assert "managedFields" in pod["metadata"]  # the object given is not changed
    plain = {"metadata": {"name": "q"}, "status": {}}
    assert lean_pod(plain) is plain


def test_the_node_keeps_its_metadata_only() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": {"zone": "a"}, "managedFields": [{}]},
        "status": {"images": [{"names": ["x"]}] * 50},
    }
    assert lean_node(node) == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": {"zone": "a"}},
    }
