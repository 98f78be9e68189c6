"""Eviction (POST pods/NAME/eviction): 201 Success when the pod's PodDisruptionBudget status allows it,
429 TooManyRequests with the real message and DisruptionBudget cause when not; Pending/terminal pods skip
the budget, unready pods go when the budget is met; DisruptionTarget condition before deletion; the
status the disruption controller computes from minAvailable/maxUnavailable (ints and percentages, the
controllers' scale); two budgets are a 500; without the controller, budgets are never processed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from sim.emulator.disruption import scaled, synced_status
from sim.emulator.server import ApiServerSettings
from tests.emulator.conftest import Core, Http, failure, pod

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
RS = "/apis/apps/v1/namespaces/default/replicasets"


def replicaset(http: Http, replicas: int) -> dict[str, Any]:
    """A ReplicaSet for the pods to belong to: its replicas are what maxUnavailable counts from."""
    labels = {"app": "web"}
    body = {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod()["spec"]},
        },
    }
    response = http.post(RS, body)
    assert response.status_code == 201, response.json()
    created = response.json()
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web",
        "uid": created["metadata"]["uid"],
        "controller": True,
    }


def running_pod(
    core: Core,
    name: str,
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> None:
    manifest = pod(name, labels=labels or {"app": "web"})
    if owner is not None:
        manifest["metadata"]["ownerReferences"] = [owner]
    core.create_namespaced_pod("default", manifest)
    core.create_namespaced_pod_binding(
        name, "default", {"metadata": {"name": name}, "target": {"name": "n1"}}, _preload_content=False
    )
    core.patch_namespaced_pod_status(
        name,
        "default",
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            }
        },
    )


def make_pdb(http: Http, name: str = "web", **spec: Any) -> None:
    body = {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}
    assert http.post(PDBS, body).status_code == 201


def evict(http: Http, name: str, **extra: Any) -> Any:
    return http.post(
        f"{PODS}/{name}/eviction",
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": "default"},
            **extra,
        },
    )


def test_eviction_blocked_by_the_budget_is_429_with_the_real_status(core: Core, http: Http) -> None:
    running_pod(core, "a")
    running_pod(core, "b")
    make_pdb(http, minAvailable=2)
    response = evict(http, "a")
    assert response.status_code == 429
    assert response.json() == failure(
        code=429,
        reason="TooManyRequests",
        message="Cannot evict pod as it would violate the pod's disruption budget.",
        details={
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
                }
            ]
        },
    )
    assert core.read_namespaced_pod("a", "default").metadata.deletion_timestamp is None
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("a", "default", {"metadata": {"name": "a"}})
    assert caught.value.status == 429


def test_allowed_eviction_marks_then_deletes_and_uses_up_the_budget(core: Core, http: Http) -> None:
    owner = replicaset(http, 3)
    for name in ("a", "b", "c"):
        running_pod(core, name, owner=owner)
    make_pdb(http, maxUnavailable=1)
    rv = core.list_namespaced_pod("default").metadata.resource_version
    response = evict(http, "a")
    assert response.status_code == 201
    assert response.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    evicted = core.read_namespaced_pod("a", "default")
    assert evicted.metadata.deletion_timestamp is not None  # bound: graceful deletion
    target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
    assert (target.status, target.reason) == ("True", "EvictionByEvictionAPI")
    stream = http.get(f"{PODS}?watch=1&resourceVersion={rv}&timeoutSeconds=2", stream=True)
    changes = [json.loads(line)["object"] for line in stream.iter_lines() if line]
    assert [bool(c["metadata"].get("deletionTimestamp")) for c in changes] == [False, True]
    assert changes[0]["status"]["conditions"][-1]["type"] == "DisruptionTarget"
    assert evict(http, "b").status_code == 429  # a is no longer healthy: 2 healthy, 2 needed


def test_pending_and_terminal_pods_ignore_the_budget(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("pending", labels={"app": "web"}))
    running_pod(core, "done")
    core.patch_namespaced_pod_status("done", "default", {"status": {"phase": "Succeeded"}})
    make_pdb(http, maxUnavailable=0)
    assert evict(http, "pending").status_code == 201
    assert evict(http, "done").status_code == 201
    assert core.list_namespaced_pod("default").items == []


def test_unready_pod_may_go_when_the_budget_is_met(core: Core, http: Http) -> None:
    running_pod(core, "a")
    running_pod(core, "sick", ready=False)
    make_pdb(http, minAvailable=1)
    assert evict(http, "sick").status_code == 201
    assert evict(http, "a").status_code == 429


def test_pods_not_covered_by_a_budget_are_evicted(core: Core, http: Http) -> None:
    running_pod(core, "a", labels={"app": "other"})
    make_pdb(http, maxUnavailable=0)
    assert evict(http, "a").status_code == 201


def test_two_budgets_are_a_500(core: Core, http: Http) -> None:
    running_pod(core, "a")
    make_pdb(http, "one", maxUnavailable=1)
    make_pdb(http, "two", maxUnavailable=1)
    response = evict(http, "a")
    assert response.status_code == 500
    assert response.json()["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )


def test_eviction_of_a_missing_pod_is_404(http: Http) -> None:
    assert evict(http, "ghost").status_code == 404


def test_budgets_of_bare_pods_by_max_unavailable_expect_none(core: Core, http: Http) -> None:
    running_pod(core, "a")
    make_pdb(http, maxUnavailable=1)
    response = evict(http, "a")
    assert response.status_code == 429
    status = http.get(f"{PDBS}/web").json()["status"]
    assert (status["expectedPods"], status["currentHealthy"], status["disruptionsAllowed"]) == (0, 1, 0)


def test_a_budget_over_job_pods_fails_to_sync_and_stays_unprocessed(core: Core, http: Http) -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-1", "controller": True}
    running_pod(core, "a", owner=owner)
    make_pdb(http, maxUnavailable=1)
    pdb = http.get(f"{PDBS}/web").json()
    assert "observedGeneration" not in pdb["status"]
    condition = pdb["status"]["conditions"][0]
    assert (condition["reason"], condition["message"]) == (
        "SyncFailed",
        "jobs.batch does not implement the scale subresource",
    )
    response = evict(http, "a")
    assert response.status_code == 429
    assert response.json()["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
    assert response.headers["Retry-After"] == "10"


class TestWithoutController:
    @pytest.fixture
    def settings(self) -> ApiServerSettings:
        return ApiServerSettings(disruption_controller=False)

    def test_budgets_are_never_processed(self, core: Core, http: Http) -> None:
        running_pod(core, "a")
        make_pdb(http, minAvailable=0)
        assert http.get(f"{PDBS}/web").json()["status"] == {
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }
        assert evict(http, "a").status_code == 429


WORKLOADS = {
    ("replicasets.apps", "default", "web"): {
        "metadata": {"name": "web", "uid": "rs-1"},
        "spec": {"replicas": 3},
    }
}
OWNED = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": True}


@pytest.mark.parametrize(
    ("spec", "ready", "expected"),
    [
        pytest.param({"minAvailable": 2}, 3, (3, 2, 3, 1), id="min-int"),
        pytest.param({"minAvailable": "50%"}, 3, (3, 2, 3, 1), id="min-percent-rounds-up"),
        pytest.param({"maxUnavailable": 1}, 3, (3, 2, 3, 1), id="max-int"),
        pytest.param({"maxUnavailable": "34%"}, 3, (3, 1, 3, 2), id="max-percent-rounds-up"),
        pytest.param({"maxUnavailable": 0}, 2, (3, 3, 2, 0), id="max-zero-unready"),
        pytest.param({}, 3, (0, 0, 3, 0), id="neither"),
    ],
)
def test_budget_arithmetic(spec: dict[str, Any], ready: int, expected: tuple[int, int, int, int]) -> None:
    pdb = {
        "metadata": {"name": "web", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }
    pods = [
        {
            "metadata": {
                "name": f"p{i}",
                "namespace": "default",
                "labels": {"app": "web"},
                "ownerReferences": [OWNED],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True" if i < ready else "False"}]},
        }
        for i in range(3)
    ]
    status = synced_status(pdb, pods, lambda *key: WORKLOADS.get(key), now=0.0)
    assert status is not None
    assert (
        status["expectedPods"],
        status["desiredHealthy"],
        status["currentHealthy"],
        status["disruptionsAllowed"],
    ) == expected
    assert status["observedGeneration"] == 1
    assert scaled("10%", 15) == 2


def test_pending_pods_go_in_spite_of_a_budget_that_allows_none_and_are_marked_first(
    core: Core, http: Http
) -> None:
    """eviction.go: canIgnorePDB (Pending, Succeeded, Failed or terminating) skips the budget, and
    addConditionAndDeletePod still writes DisruptionTarget (EvictionByEvictionAPI) before the delete; the
    budget is not used up. An unbound pod is deleted at once, a bound one (in Init) gracefully."""
    owner = replicaset(http, 3)
    running_pod(core, "ready", owner=owner)
    for name in ("unscheduled", "in-init"):
        manifest = pod(name, labels={"app": "web"})
        manifest["metadata"]["ownerReferences"] = [owner]
        core.create_namespaced_pod("default", manifest)
    core.create_namespaced_pod_binding(
        "in-init",
        "default",
        {"metadata": {"name": "in-init"}, "target": {"name": "n1"}},
        _preload_content=False,
    )
    make_pdb(http, minAvailable=1)
    status = http.get(f"{PDBS}/web").json()["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 1, 0)
    assert evict(http, "ready").status_code == 429

    rv = core.list_namespaced_pod("default").metadata.resource_version
    assert evict(http, "unscheduled").status_code == 201
    stream = http.get(
        f"{PODS}?watch=1&resourceVersion={rv}&timeoutSeconds=1&fieldSelector=metadata.name%3Dunscheduled",
        stream=True,
    )
    events = [json.loads(line) for line in stream.iter_lines() if line]
    # The condition first; then the deletion (grace 0: the deletionTimestamp write, then the delete).
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert "deletionTimestamp" not in events[0]["object"]["metadata"]
    [target] = [c for c in events[0]["object"]["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )

    assert evict(http, "in-init").status_code == 201
    marked = core.read_namespaced_pod("in-init", "default")
    assert marked.status.phase == "Pending" and marked.metadata.deletion_timestamp is not None
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in marked.status.conditions)
    status = http.get(f"{PDBS}/web").json()["status"]
    assert status["disruptionsAllowed"] == 0 and not status.get("disruptedPods")
