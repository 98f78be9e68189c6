"""PodDisruptionBudgets and evictions: the status the disruption controller keeps
(pkg/controller/disruption/disruption.go v1.36: trySync, getExpectedScale, countHealthyPods,
updatePdbStatus, failSafe) and how the eviction API judges from it
(pkg/registry/core/pod/storage/eviction.go v1.36: canIgnorePDB, checkAndDecrement).

The pods are made by hand and played Running/Ready as a kubelet would report it, on both backends. Pods
that need a controller belong to a ReplicaSet whose own template names a service account that does not
exist: the real ReplicaSet controller then counts the hand-made pods and cannot add any of its own."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.conformance.support import Conn, invalid_message, pod

LABELS = {"app": "web"}


async def replicaset(kube: Conn, replicas: int) -> dict[str, Any]:
    """A ReplicaSet of `replicas` that can never create a pod itself; returns the controllerRef to it."""
    template_spec = pod("x")["spec"] | {"serviceAccountName": "conformance-missing"}
    created = await kube.created(
        f"/apis/apps/v1/namespaces/{kube.ns}/replicasets",
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": LABELS},
                "template": {"metadata": {"labels": LABELS}, "spec": template_spec},
            },
        },
    )
    uid = created["metadata"]["uid"]
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": uid, "controller": True}


async def running_pod(
    kube: Conn, name: str, *, owner: dict[str, Any] | None = None, ready: bool = True
) -> None:
    """Created, bound to a node and reported Running (Ready or not) as a kubelet would."""
    manifest = pod(name, labels=LABELS)
    if owner is not None:
        manifest["metadata"]["ownerReferences"] = [owner]
    await kube.created(kube.pods, manifest)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"name": "node-1"},
    }
    assert (await kube.post(f"{kube.pods}/{name}/binding", binding)).status == 201
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = "True" if ready else "False"
    status = {
        "phase": "Running",
        "startTime": now,
        "conditions": [
            {"type": kind, "status": state, "lastTransitionTime": now}
            for kind in ("ContainersReady", "Ready")
        ],
    }
    patched = await kube.patch(f"{kube.pods}/{name}/status", {"status": status})
    assert patched.status == 200, patched.body


async def budget(kube: Conn, name: str = "web", **spec: Any) -> None:
    await kube.created(
        kube.pdbs, {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": LABELS}, **spec}}
    )


async def processed(kube: Conn, name: str = "web", **expected: int) -> dict[str, Any]:
    """The budget's status once the controller has processed its current generation (and shows
    `expected`)."""

    async def probe() -> dict[str, Any] | None:
        pdb = await kube.ok(f"{kube.pdbs}/{name}")
        status = pdb["status"] if pdb else {}
        if status.get("observedGeneration") != pdb["metadata"]["generation"]:
            return None
        return status if all(status.get(k) == v for k, v in expected.items()) else None

    return await kube.eventually(probe, what=f"the disruption controller to process {name} with {expected}")


async def evict(kube: Conn, name: str, *, dry_run: bool = False) -> Any:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    return await kube.post(
        f"{kube.pods}/{name}/eviction", body, params={"dryRun": "All"} if dry_run else None
    )


def refused(message: str, *, retry_after: int = 0) -> dict[str, Any]:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": details,
        "code": 429,
    }


async def test_the_status_is_kept_and_evictions_use_it_up(kube: Conn) -> None:
    owner = await replicaset(kube, 3)
    for name in ("a", "b", "c"):
        await running_pod(kube, name, owner=owner)
    await budget(kube, maxUnavailable=1)
    status = await processed(kube, currentHealthy=3)
    assert {k: v for k, v in status.items() if k != "conditions"} == {
        "observedGeneration": 1,
        "disruptionsAllowed": 1,
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
    }
    [condition] = status["conditions"]
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionAllowed",
        "status": "True",
        "observedGeneration": 1,
        "reason": "SufficientPods",
        "message": "",
    }
    dry = await evict(kube, "a", dry_run=True)
    assert dry.status == 201
    assert (await processed(kube))["disruptionsAllowed"] == 1  # a dry run uses nothing up
    allowed = await evict(kube, "a")
    assert allowed.status == 201
    assert allowed.status_fields() == {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
    evicted = await kube.ok(f"{kube.pods}/a")
    assert evicted["metadata"]["deletionTimestamp"]
    status = await processed(kube, currentHealthy=2)
    assert (status["disruptionsAllowed"], status["conditions"][0]["reason"]) == (0, "InsufficientPods")
    blocked = await evict(kube, "b")
    assert blocked.status_fields() == refused(
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    )
    assert not (await kube.ok(f"{kube.pods}/b"))["metadata"].get("deletionTimestamp")


async def test_a_spec_change_is_processed_as_a_new_generation(kube: Conn) -> None:
    owner = await replicaset(kube, 2)
    for name in ("a", "b"):
        await running_pod(kube, name, owner=owner)
    await budget(kube, maxUnavailable=0)
    assert (await processed(kube, currentHealthy=2))["disruptionsAllowed"] == 0
    changed = await kube.patch(f"{kube.pdbs}/web", {"spec": {"maxUnavailable": 1}})
    assert changed.body["metadata"]["generation"] == 2
    status = await processed(kube, disruptionsAllowed=1)
    assert (status["observedGeneration"], status["desiredHealthy"]) == (2, 1)
    assert (await evict(kube, "a")).status == 201


async def test_pods_without_a_controller_are_not_expected_by_max_unavailable(kube: Conn) -> None:
    await running_pod(kube, "a")
    await budget(kube, maxUnavailable=1)
    status = await processed(kube, currentHealthy=1)
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (0, 0, 0)
    reply = await evict(kube, "a")
    # v1.34 named the counts whatever they were; later minors name them only when they are the reason.
    why = (
        "The disruption budget web needs 0 healthy pods and has 1 currently"
        if kube.minor <= 34
        else "The disruption budget web does not allow evicting pods currently"
    )
    assert reply.status_fields() == refused(why)


async def test_an_integer_min_available_counts_the_selected_pods(kube: Conn) -> None:
    await running_pod(kube, "a")
    await running_pod(kube, "sick", ready=False)
    await budget(kube, minAvailable=1)
    status = await processed(kube, currentHealthy=1)
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 1, 0)
    # An unready pod may go while the budget is met (currentHealthy >= desiredHealthy > 0).
    assert (await evict(kube, "sick")).status == 201
    reply = await evict(kube, "a")
    assert reply.status_fields() == refused(
        "The disruption budget web needs 1 healthy pods and has 1 currently"
    )


async def test_a_pending_pod_is_evicted_in_spite_of_the_budget(kube: Conn) -> None:
    owner = await replicaset(kube, 1)
    manifest = pod("pending", labels=LABELS)
    manifest["metadata"]["ownerReferences"] = [owner]
    await kube.created(kube.pods, manifest)
    await budget(kube, maxUnavailable=0)
    await processed(kube, expectedPods=1)
    assert (await evict(kube, "pending")).status == 201
    gone = await kube.get(f"{kube.pods}/pending")
    assert gone.status == 404  # never bound: deleted at once


async def test_a_budget_that_cannot_sync_is_still_being_processed(kube: Conn) -> None:
    job = await kube.created(
        kube.jobs,
        {
            "metadata": {"name": "batch"},
            "spec": {"suspend": True, "template": {"spec": pod("x")["spec"] | {"restartPolicy": "Never"}}},
        },
    )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "batch",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    await running_pod(kube, "worker", owner=owner)
    await budget(kube, maxUnavailable=1)

    async def failed() -> dict[str, Any] | None:
        status = (await kube.ok(f"{kube.pdbs}/web"))["status"]
        return status if status.get("conditions") else None

    status = await kube.eventually(failed, what="the disruption controller to fail the budget's sync")
    assert "observedGeneration" not in status
    [condition] = status["conditions"]
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "SyncFailed",
        "jobs.batch does not implement the scale subresource",
    )
    reply = await evict(kube, "worker")
    assert reply.status_fields() == refused(
        "The disruption budget web is still being processed by the server.", retry_after=10
    )


async def test_an_empty_selector_covers_every_pod(kube: Conn) -> None:
    await running_pod(kube, "a")
    await budget(kube, "some", minAvailable=0)
    await kube.created(kube.pdbs, {"metadata": {"name": "all"}, "spec": {"selector": {}, "minAvailable": 0}})
    reply = await evict(kube, "a")
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        "code": 500,
    }


PERCENT = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex "
    "used for validation is '[0-9]+%')"
)


@pytest.mark.parametrize(
    ("spec", "errors"),
    [
        (
            {"minAvailable": 1, "maxUnavailable": "50%", "selector": {"matchLabels": LABELS}},
            [
                'spec: Invalid value: {"MinAvailable":1,"Selector":{"matchLabels":{"app":"web"}},"MaxUnavailable":'
                '"50%","UnhealthyPodEvictionPolicy":null}: minAvailable and maxUnavailable cannot be both set'
            ],
        ),
        ({"minAvailable": -1}, ["spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"]),
        (
            {"maxUnavailable": "150%"},
            ['spec.maxUnavailable: Invalid value: "150%": must not be greater than 100%'],
        ),
        ({"minAvailable": "x"}, [f'spec.minAvailable: Invalid value: "x": {PERCENT}']),
        (
            {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "Never"},
            [
                'spec.unhealthyPodEvictionPolicy: Unsupported value: "Never": supported values: "AlwaysAllow", '
                '"IfHealthyBudget"'
            ],
        ),
        (
            {"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}},
            [
                'spec.selector.matchExpressions[0].operator: Invalid value: "Bad": not a valid selector operator'
            ],
        ),
        (
            {"maxUnavailable": 1, "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            [
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is "
                "'In' or 'NotIn'"
            ],
        ),
    ],
    ids=["both", "negative", "over-100", "not-a-percent", "eviction-policy", "operator", "no-values"],
)
async def test_budget_specs_are_validated(kube: Conn, spec: dict[str, Any], errors: list[str]) -> None:
    reply = await kube.post(kube.pdbs, {"metadata": {"name": "b"}, "spec": spec})
    assert reply.status == 422
    assert reply.body["message"] == invalid_message("PodDisruptionBudget.policy", "b", *errors)
