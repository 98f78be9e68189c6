"""Pure controller decisions: ReplicaSet, Deployment, Job (podFailurePolicy), DaemonSet and garbage collection."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.kubernetes.workloads.actions import Action, Create, Delete, Patch
from sim.cluster.kubernetes.workloads.daemonset import daemon_pod_target, reconcile_daemonset
from sim.cluster.kubernetes.workloads.deployment import (
    TEMPLATE_HASH_LABEL,
    reconcile_deployment,
    rolling_limits,
    template_hash,
)
from sim.cluster.kubernetes.workloads.garbage import orphans
from sim.cluster.kubernetes.workloads.job import JobMemory, observe_job_pod, reconcile_job
from sim.cluster.kubernetes.workloads.replicaset import reconcile_replicaset
from stagger.kube import DAEMONSETS, JOBS, PODS, REPLICASETS
from tests.cluster.helpers import IGNORE_DISRUPTION

NOW = dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)
_uids = itertools.count()
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {"containers": [{"name": "app", "image": "web:1"}]},
}


def owner(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": {"ReplicaSet": "apps/v1", "Deployment": "apps/v1", "DaemonSet": "apps/v1"}.get(
            kind, "batch/v1"
        ),
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": "2024-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": status or {},
    }


def child(
    parent: dict[str, Any],
    *,
    phase: str = "Running",
    ready: bool = True,
    node: str = "n1",
    terminating: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    created: str = "",
    kind: str | None = None,
) -> dict[str, Any]:
    n = next(_uids)
    conds = list(conditions or [])
    conds.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": "2024-01-01T11:00:00Z",
        }
    )
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"{parent['metadata']['name']}-{n}",
            "namespace": "default",
            "uid": f"pod-{n}",
            "creationTimestamp": created or f"2024-01-01T00:{n % 60:02d}:00Z",
            "ownerReferences": [
                {
                    "kind": kind or parent["kind"],
                    "name": parent["metadata"]["name"],
                    "uid": parent["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "app"}]},
        "status": {"phase": phase, "conditions": conds},
    }
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T11:59:00Z"
    return pod


def of(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def status_of(actions: list[Action]) -> dict[str, Any]:
    patches = [a for a in actions if isinstance(a, Patch) and a.subresource == "status"]
    assert len(patches) <= 1
    return patches[0].patch["status"] if patches else {}


# ---------------------------------------------------------------------------------------- ReplicaSet


def test_replicaset_creates_the_missing_pods_from_its_template() -> None:
    rs = owner("ReplicaSet", "web-abc", {"replicas": 3, "template": TEMPLATE})
    actions = reconcile_replicaset(rs, [child(rs)], now=NOW)
    creates = of(actions, Create)
    assert len(creates) == 2
    body = creates[0].body
    assert creates[0].resource == PODS
    assert body["metadata"]["generateName"] == "web-abc-"
    assert body["metadata"]["labels"] == {"app": "web"}
    [ref] = body["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("ReplicaSet", "uid-web-abc", True)
    assert body["spec"] == TEMPLATE["spec"]
    assert status_of(actions)["replicas"] == 1


def test_replicaset_replaces_terminating_and_finished_pods_and_ignores_strangers() -> None:
    rs = owner("ReplicaSet", "web-abc", {"replicas": 2, "template": TEMPLATE})
    other = owner("ReplicaSet", "other", {"replicas": 1, "template": TEMPLATE})
    pods = [child(rs, terminating=True), child(rs, phase="Failed", ready=False), child(rs), child(other)]
    actions = reconcile_replicaset(rs, pods, now=NOW)
    assert len(of(actions, Create)) == 1
    assert of(actions, Delete) == []
    assert status_of(actions) == {
        "replicas": 1,
        "fullyLabeledReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "observedGeneration": 1,
    }


def test_replicaset_scales_down_unscheduled_and_unready_pods_first() -> None:
    rs = owner("ReplicaSet", "web-abc", {"replicas": 1, "template": TEMPLATE})
    ready = child(rs)
    unready = child(rs, ready=False)
    unscheduled = child(rs, phase="Pending", ready=False, node="")
    actions = reconcile_replicaset(rs, [ready, unready, unscheduled], now=NOW)
    assert {d.name for d in of(actions, Delete)} == {
        unready["metadata"]["name"],
        unscheduled["metadata"]["name"],
    }


def test_replicaset_writes_status_only_when_it_changes() -> None:
    rs = owner(
        "ReplicaSet",
        "web-abc",
        {"replicas": 1, "template": TEMPLATE},
        {
            "replicas": 1,
            "fullyLabeledReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "observedGeneration": 1,
        },
    )
    assert reconcile_replicaset(rs, [child(rs)], now=NOW) == []


def test_min_ready_seconds_delays_availability() -> None:
    rs = owner("ReplicaSet", "web-abc", {"replicas": 1, "minReadySeconds": 7200, "template": TEMPLATE})
    assert status_of(reconcile_replicaset(rs, [child(rs)], now=NOW))["availableReplicas"] == 0


# ---------------------------------------------------------------------------------------- Deployment


def deployment(replicas: int = 4, template: dict[str, Any] = TEMPLATE, **spec: Any) -> dict[str, Any]:
    return owner(
        "Deployment",
        "web",
        {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template, **spec},
    )


def test_deployment_creates_one_replicaset_per_template_hash() -> None:
    d = deployment()
    [create] = of(reconcile_deployment(d, [], [], now=NOW), Create)
    rs = create.body
    h = template_hash(TEMPLATE)
    assert rs["metadata"]["name"] == f"web-{h}"
    assert rs["spec"]["replicas"] == 4
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", TEMPLATE_HASH_LABEL: h}
    assert rs["spec"]["template"]["metadata"]["labels"][TEMPLATE_HASH_LABEL] == h
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "uid-web"
    assert template_hash(TEMPLATE) == h
    assert template_hash({**TEMPLATE, "spec": {"containers": []}}) != h


def rs_for(
    d: dict[str, Any], template: dict[str, Any], replicas: int, available: int, created: str
) -> dict[str, Any]:
    h = template_hash(template)
    rs = owner(
        "ReplicaSet",
        f"web-{h}",
        {"replicas": replicas, "template": template},
        {"replicas": replicas, "readyReplicas": available, "availableReplicas": available},
    )
    rs["metadata"]["labels"] = {"app": "web", TEMPLATE_HASH_LABEL: h}
    rs["metadata"]["creationTimestamp"] = created
    rs["metadata"]["ownerReferences"] = [
        {"kind": "Deployment", "name": "web", "uid": "uid-web", "controller": True}
    ]
    return rs


def test_rolling_update_surges_then_scales_old_down_as_new_pods_become_available() -> None:
    v2 = {**TEMPLATE, "spec": {"containers": [{"name": "app", "image": "web:2"}]}}
    d = deployment(replicas=4, template=v2)
    assert rolling_limits(d) == (1, 1)
    old = rs_for(d, TEMPLATE, 4, 4, "2024-01-01T00:00:00Z")
    [create] = of(reconcile_deployment(d, [old], [], now=NOW), Create)
    assert create.body["spec"]["replicas"] == 1  # 4 + maxSurge 1 - 4 existing
    # maxUnavailable 1: one old replica may go at once, while the surge pod is not available yet.
    new = rs_for(d, v2, 1, 0, "2024-01-01T01:00:00Z")
    assert scales(reconcile_deployment(d, [old, new], [], now=NOW)) == {old["metadata"]["name"]: 3}
    # 3 old + 1 new: the new RS grows by the surge room, but nothing more may become unavailable.
    old = rs_for(d, TEMPLATE, 3, 3, "2024-01-01T00:00:00Z")
    assert scales(reconcile_deployment(d, [old, new], [], now=NOW)) == {new["metadata"]["name"]: 2}
    # Once both new pods are available, two more old ones go.
    new = rs_for(d, v2, 2, 2, "2024-01-01T01:00:00Z")
    assert scales(reconcile_deployment(d, [old, new], [], now=NOW)) == {old["metadata"]["name"]: 1}


def scales(actions: list[Action]) -> dict[str, int]:
    return {a.name: a.patch["spec"]["replicas"] for a in of(actions, Patch) if a.subresource is None}


def test_recreate_scales_old_to_zero_before_creating_new_pods() -> None:
    v2 = {**TEMPLATE, "spec": {"containers": [{"name": "app", "image": "web:2"}]}}
    d = deployment(replicas=2, template=v2, strategy={"type": "Recreate"})
    old = rs_for(d, TEMPLATE, 2, 2, "2024-01-01T00:00:00Z")
    pods = [child(old)]
    actions = reconcile_deployment(d, [old], pods, now=NOW)
    scales = {a.name: a.patch["spec"]["replicas"] for a in of(actions, Patch) if a.subresource is None}
    assert scales == {old["metadata"]["name"]: 0}
    assert of(actions, Create)[0].body["spec"]["replicas"] == 0


def test_deployment_status_adds_up_its_replicasets() -> None:
    d = deployment(replicas=4)
    rs = rs_for(d, TEMPLATE, 4, 3, "2024-01-01T00:00:00Z")
    status = status_of(reconcile_deployment(d, [rs], [], now=NOW))
    assert (
        status["replicas"],
        status["updatedReplicas"],
        status["readyReplicas"],
        status["availableReplicas"],
        status["unavailableReplicas"],
    ) == (4, 4, 3, 3, 1)
    available = {c["type"]: c for c in status["conditions"]}["Available"]
    assert (available["status"], available["reason"]) == ("True", "MinimumReplicasAvailable")


# ----------------------------------------------------------------------------------------------- Job

DISRUPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]


def job(parallelism: int = 2, completions: int = 3, backoff_limit: int = 1, **spec: Any) -> dict[str, Any]:
    return owner(
        "Job",
        "batch",
        {
            "parallelism": parallelism,
            "completions": completions,
            "backoffLimit": backoff_limit,
            "template": TEMPLATE,
            **spec,
        },
    )


def test_job_runs_up_to_parallelism_with_job_labels() -> None:
    j = job()
    actions = reconcile_job(j, [], JobMemory(), now=NOW)
    creates = of(actions, Create)
    assert len(creates) == 2
    labels = creates[0].body["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == "batch"
    assert labels["batch.kubernetes.io/controller-uid"] == "uid-batch"
    status = status_of(actions)
    assert status["active"] == 0 and status["startTime"] == "2024-01-01T12:00:00Z"


def test_job_ignores_disruption_failures_under_its_pod_failure_policy() -> None:
    j = job(podFailurePolicy=IGNORE_DISRUPTION)
    evicted = child(j, phase="Failed", ready=False, conditions=DISRUPTED)
    running = child(j)
    actions = reconcile_job(j, [evicted, running], JobMemory(), now=NOW)
    assert len(of(actions, Create)) == 1  # the evicted one is replaced
    status = status_of(actions)
    assert status["failed"] == 0
    assert "conditions" not in status


def test_job_counts_a_disruption_without_the_policy_and_fails_past_backoff_limit() -> None:
    j = job(backoff_limit=1)
    failed = [child(j, phase="Failed", ready=False, conditions=DISRUPTED) for _ in range(2)]
    running = child(j)
    actions = reconcile_job(j, [*failed, running], JobMemory(), now=NOW)
    status = status_of(actions)
    assert status["failed"] == 2
    failed_cond = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert (failed_cond["status"], failed_cond["reason"]) == ("True", "BackoffLimitExceeded")
    assert [d.name for d in of(actions, Delete)] == [running["metadata"]["name"]]
    assert of(actions, Create) == []


def test_job_fail_job_rule_fails_at_once() -> None:
    j = job(
        backoff_limit=5,
        podFailurePolicy={
            "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
        },
    )
    bad = child(j, phase="Failed", ready=False)
    bad["status"]["containerStatuses"] = [{"name": "app", "state": {"terminated": {"exitCode": 42}}}]
    status = status_of(reconcile_job(j, [bad], JobMemory(), now=NOW))
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {"Failed": "PodFailurePolicy"}


def test_job_completes_after_enough_successes() -> None:
    j = job(parallelism=2, completions=2)
    done = [child(j, phase="Succeeded", ready=False) for _ in range(2)]
    actions = reconcile_job(j, done, JobMemory(), now=NOW)
    status = status_of(actions)
    assert status["succeeded"] == 2
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Complete": "True"}
    assert status["completionTime"] == "2024-01-01T12:00:00Z"
    assert of(actions, Create) == []


def test_job_remembers_pods_that_are_gone() -> None:
    j = job(podFailurePolicy=IGNORE_DISRUPTION)
    evicted = child(j, phase="Running", conditions=DISRUPTED, terminating=True)
    broken = child(j, phase="Running", terminating=True)
    memory = observe_job_pod(JobMemory(), j, evicted, deleted=True)
    memory = observe_job_pod(memory, j, broken, deleted=True)
    assert observe_job_pod(memory, j, broken, deleted=True) is memory
    assert observe_job_pod(memory, j, child(j), deleted=False) is memory
    status = status_of(reconcile_job(j, [], memory, now=NOW))
    assert status["failed"] == 1


def test_job_with_pod_failure_policy_waits_for_terminating_pods_to_fail() -> None:
    j = job(parallelism=1, completions=1, podFailurePolicy=IGNORE_DISRUPTION)
    going = child(j, terminating=True, conditions=DISRUPTED)
    assert of(reconcile_job(j, [going], JobMemory(), now=NOW), Create) == []
    plain = job(parallelism=1, completions=1)
    going = child(plain, terminating=True)
    assert len(of(reconcile_job(plain, [going], JobMemory(), now=NOW), Create)) == 1
    failed_only = job(parallelism=1, completions=1, podReplacementPolicy="Failed")
    going = child(failed_only, terminating=True)
    assert of(reconcile_job(failed_only, [going], JobMemory(), now=NOW), Create) == []


@settings(max_examples=50, deadline=None)
@given(
    parallelism=st.integers(min_value=1, max_value=6),
    completions=st.integers(min_value=1, max_value=10),
    phases=st.lists(st.sampled_from(["Running", "Succeeded", "Failed", "Pending"]), max_size=12),
)
def test_job_never_runs_more_than_parallelism_or_needed(
    parallelism: int, completions: int, phases: list[str]
) -> None:
    j = job(parallelism=parallelism, completions=completions, backoff_limit=100)
    pods = [child(j, phase=p, ready=p == "Running") for p in phases]
    actions = reconcile_job(j, pods, JobMemory(), now=NOW)
    succeeded = phases.count("Succeeded")
    active = sum(1 for p in phases if p in ("Running", "Pending"))
    after = active + len(of(actions, Create)) - len(of(actions, Delete))
    if succeeded >= completions:
        assert of(actions, Create) == []
    else:
        assert after <= parallelism
        assert succeeded + after <= max(completions, succeeded + active)


# ----------------------------------------------------------------------------------------- DaemonSet


def node(
    name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_daemonset_one_pod_per_eligible_node_pinned_by_affinity() -> None:
    ds = owner(
        "DaemonSet",
        "agent",
        {"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "nodeSelector": {"os": "linux"}}}},
    )
    nodes = [
        node("a", {"os": "linux"}),
        node("b", {"os": "linux"}),
        node("c", {"os": "windows"}),
        node("d", {"os": "linux"}, taints=[{"key": "gpu", "effect": "NoSchedule"}]),
    ]
    existing = child(ds, node="a")
    misplaced = child(ds, node="c")
    actions = reconcile_daemonset(ds, nodes, [existing, misplaced], now=NOW)
    creates = of(actions, Create)
    assert [daemon_pod_target(c.body) for c in creates] == ["b"]
    assert creates[0].body["spec"].get("nodeName") is None
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in (
        creates[0].body["spec"]["tolerations"]
    )
    assert [d.name for d in of(actions, Delete)] == [misplaced["metadata"]["name"]]
    status = status_of(actions)
    assert (
        status["desiredNumberScheduled"],
        status["currentNumberScheduled"],
        status["numberReady"],
        status["numberMisscheduled"],
    ) == (2, 1, 1, 1)
    assert all(a.resource in (PODS, DAEMONSETS) for a in actions)


def test_daemonset_removes_duplicates_and_failed_pods() -> None:
    ds = owner("DaemonSet", "agent", {"template": TEMPLATE})
    pods = [child(ds, node="a"), child(ds, node="a", ready=False), child(ds, node="b", phase="Failed")]
    actions = reconcile_daemonset(ds, [node("a"), node("b")], pods, now=NOW)
    deleted = {d.name for d in of(actions, Delete)}
    assert deleted == {pods[1]["metadata"]["name"], pods[2]["metadata"]["name"]}
    [create] = of(actions, Create)  # the failed pod's replacement
    assert daemon_pod_target(create.body) == "b"
    assert status_of(actions)["numberReady"] == 1


# ------------------------------------------------------------------------------------ garbage collector


def test_orphans_are_objects_whose_owners_all_are_gone() -> None:
    rs = owner("ReplicaSet", "web-abc", {"replicas": 1})
    orphan = child(rs)
    kept = child(owner("ReplicaSet", "alive", {}))
    foreign = child(owner("Job", "x", {}), kind="SomethingElse")
    going = child(rs, terminating=True)
    result = orphans(
        [orphan, kept, foreign, going], live_uids={"uid-alive"}, owner_kinds={"ReplicaSet", "Job"}
    )
    assert [o["metadata"]["name"] for o in result] == [orphan["metadata"]["name"]]


@pytest.mark.parametrize("resource", [pytest.param(REPLICASETS, id="rs"), pytest.param(JOBS, id="job")])
def test_resources_have_api_paths(resource: Any) -> None:
    assert resource.path(namespace="ns", name="x", subresource="status").endswith(
        f"/namespaces/ns/{resource.plural}/x/status"
    )
