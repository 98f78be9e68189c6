"""Pure StatefulSet controller decisions (`sim.cluster.kubernetes.workloads.statefulset`, after
pkg/controller/statefulset): ordered creation behind Running and Ready predecessors, stable names
recreated, Failed pods deleted first, scale-down from the highest ordinal, Parallel, and the status."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sim.cluster.kubernetes.workloads.actions import Action, Create, Delete, Patch
from sim.cluster.kubernetes.workloads.statefulset import (
    POD_INDEX_LABEL,
    POD_NAME_LABEL,
    REVISION_LABEL,
    STATEFULSETS,
    ordinal_of,
    reconcile_statefulset,
    revision_name,
)
from stagger.kube import PODS

NOW = dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "db"}},
    "spec": {"containers": [{"name": "db", "image": "db:1"}]},
}


def statefulset(replicas: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default", "uid": "uid-db", "generation": 2},
        "spec": {
            "replicas": replicas,
            "serviceName": "db-headless",
            "selector": {"matchLabels": {"app": "db"}},
            "template": TEMPLATE,
            **spec,
        },
        "status": {},
    }


def member(
    sts: dict[str, Any],
    ordinal: int,
    *,
    phase: str = "Running",
    ready: bool = True,
    terminating: bool = False,
    revision: str | None = None,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"db-{ordinal}",
            "namespace": "default",
            "uid": f"pod-{ordinal}",
            "labels": {"app": "db", REVISION_LABEL: revision or revision_name(sts)},
            "ownerReferences": [{"kind": "StatefulSet", "name": "db", "uid": "uid-db", "controller": True}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "db"}]},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T11:59:00Z"
    return pod


def created(actions: list[Action]) -> list[str]:
    return [a.body["metadata"]["name"] for a in actions if isinstance(a, Create)]


def deleted(actions: list[Action]) -> list[str]:
    return [a.name for a in actions if isinstance(a, Delete)]


def status_of(actions: list[Action]) -> dict[str, Any]:
    [patch] = [a for a in actions if isinstance(a, Patch)]
    assert (patch.resource, patch.subresource) == (STATEFULSETS, "status")
    return patch.patch["status"]


def test_the_first_pod_has_the_sets_identity_and_is_created_alone() -> None:
    sts = statefulset()
    actions = reconcile_statefulset(sts, [], now=NOW)
    [create] = [a for a in actions if isinstance(a, Create)]
    assert create.resource == PODS and create.namespace == "default"
    pod = create.body
    assert pod["metadata"]["name"] == "db-0" and "generateName" not in pod["metadata"]
    assert pod["metadata"]["labels"] == {
        "app": "db",
        POD_NAME_LABEL: "db-0",
        POD_INDEX_LABEL: "0",
        REVISION_LABEL: revision_name(sts),
    }
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "db",
            "uid": "uid-db",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("db-0", "db-headless")
    assert status_of(actions)["replicas"] == 0


def test_ordered_ready_waits_for_each_predecessor_to_be_running_and_ready() -> None:
    sts = statefulset()
    assert created(reconcile_statefulset(sts, [member(sts, 0, phase="Pending", ready=False)], now=NOW)) == []
    assert created(reconcile_statefulset(sts, [member(sts, 0, ready=False)], now=NOW)) == []
    assert created(reconcile_statefulset(sts, [member(sts, 0)], now=NOW)) == ["db-1"]
    assert created(reconcile_statefulset(sts, [member(sts, 0), member(sts, 1)], now=NOW)) == ["db-2"]


def test_min_ready_seconds_delays_the_next_pod() -> None:
    sts = statefulset(minReadySeconds=30)
    ready = member(sts, 0)
    ready["status"]["conditions"][0]["lastTransitionTime"] = "2024-01-01T11:59:50Z"
    assert created(reconcile_statefulset(sts, [ready], now=NOW)) == []
    assert created(reconcile_statefulset(sts, [ready], now=NOW + dt.timedelta(seconds=30))) == ["db-1"]


def test_a_missing_pod_is_recreated_under_its_name_after_the_old_one_is_gone() -> None:
    sts = statefulset()
    leaving = member(sts, 1, terminating=True)
    actions = reconcile_statefulset(sts, [member(sts, 0), leaving, member(sts, 2)], now=NOW)
    assert created(actions) == [] and deleted(actions) == []
    assert created(reconcile_statefulset(sts, [member(sts, 0), member(sts, 2)], now=NOW)) == ["db-1"]


def test_a_finished_pod_is_deleted_to_be_recreated() -> None:
    sts = statefulset()
    actions = reconcile_statefulset(sts, [member(sts, 0, phase="Failed", ready=False)], now=NOW)
    assert deleted(actions) == ["db-0"] and created(actions) == []


def test_scale_down_removes_the_highest_ordinal_first_one_at_a_time() -> None:
    sts = statefulset(replicas=1)
    pods = [member(sts, 0), member(sts, 1), member(sts, 2)]
    assert deleted(reconcile_statefulset(sts, pods, now=NOW)) == ["db-2"]
    pods[2] = member(sts, 2, terminating=True)
    assert deleted(reconcile_statefulset(sts, pods, now=NOW)) == []  # waits for it to go
    assert deleted(reconcile_statefulset(sts, pods[:2], now=NOW)) == ["db-1"]


def test_scale_down_waits_for_the_remaining_pods_to_be_ready() -> None:
    sts = statefulset(replicas=1)
    pods = [member(sts, 0, ready=False), member(sts, 1)]
    assert deleted(reconcile_statefulset(sts, pods, now=NOW)) == []
    # An unready condemned pod goes when it is the first unavailable one.
    pods = [member(sts, 0), member(sts, 1, phase="Pending", ready=False), member(sts, 2)]
    assert deleted(reconcile_statefulset(sts, pods, now=NOW)) == ["db-2"]
    assert deleted(reconcile_statefulset(sts, pods[:2], now=NOW)) == ["db-1"]


def test_parallel_creates_and_deletes_all_at_once() -> None:
    sts = statefulset(replicas=3, podManagementPolicy="Parallel")
    assert created(reconcile_statefulset(sts, [], now=NOW)) == ["db-0", "db-1", "db-2"]
    assert created(reconcile_statefulset(sts, [member(sts, 1, phase="Pending")], now=NOW)) == ["db-0", "db-2"]
    sts = statefulset(replicas=0, podManagementPolicy="Parallel")
    pods = [member(sts, 0, ready=False), member(sts, 1), member(sts, 2)]
    assert deleted(reconcile_statefulset(sts, pods, now=NOW)) == ["db-2", "db-1", "db-0"]


def test_status_counts_created_ready_and_current_pods() -> None:
    sts = statefulset(replicas=3)
    revision = revision_name(sts)
    pods = [
        member(sts, 0),
        member(sts, 1, phase="Pending", ready=False),
        member(sts, 2, terminating=True),
        member(sts, 3, revision="db-old"),
    ]
    pods.append({**member(sts, 9), "metadata": {**member(sts, 9)["metadata"], "name": "other-9"}})
    assert status_of(reconcile_statefulset(sts, pods, now=NOW)) == {
        "observedGeneration": 2,
        "replicas": 4,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "currentReplicas": 2,
        "updatedReplicas": 2,
        "currentRevision": revision,
        "updateRevision": revision,
        "collisionCount": 0,
    }


def test_ordinals_are_parsed_from_the_sets_name_only() -> None:
    sts = statefulset()
    assert ordinal_of(sts, {"metadata": {"name": "db-12"}}) == 12
    assert [ordinal_of(sts, {"metadata": {"name": n}}) for n in ("db-01", "db-x", "dbx-1", "db-")] == [
        None
    ] * 4


def test_a_set_being_deleted_only_reports_status() -> None:
    sts = statefulset()
    sts["metadata"]["deletionTimestamp"] = "2024-01-01T11:59:00Z"
    actions = reconcile_statefulset(sts, [], now=NOW)
    assert created(actions) == [] and len(actions) == 1
