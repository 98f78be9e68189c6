"""Cluster-mode lockd against the API emulator: 503 until the first list, 403 for anything that is not a
live pod of this node, one patch per grant, slots that end when the pod is Ready / finishes / is deleted,
minHold, holdTimeout, Events, held slots rebuilt by a restarted lockd, and the waits lockd saw given up
(`stagger_lockd_waits_given_up_total`: a queued pod Ready without its slot, or gone)."""

from __future__ import annotations

from typing import Any

import pytest

from lockd.app import SERVICE
from stagger.kube import PODS, RestClient
from tests.lockd_cluster.conftest import (
    NAMES,
    ClusterLockd,
    StartLockd,
    make_node,
    make_pod,
    pod_events,
    set_ready,
)
from tests.metrics import by_label
from tests.policies import limit_policy
from tests.waiting import eventually


async def first_holds_second_waits(
    *, start_lockd: StartLockd, kube: RestClient
) -> tuple[ClusterLockd, dict[str, Any], dict[str, Any]]:
    """The node, pods `first` and `second` on it, and lockd with one slot: first holds it, second asked
    and waits (423). Returns (lockd, first, second)."""
    await make_node(kube)
    first = await make_pod(kube, "first")
    second = await make_pod(kube, "second")
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock(first)).status == 200
    assert (await lockd.lock(second)).status == 423
    return lockd, first, second


async def test_not_ready_until_the_node_is_listed(start_lockd, kube) -> None:
    # No Node object yet: the node informer cannot sync, so lockd must not grant anything.
    lockd = await start_lockd(limit_policy(1), wait_ready=False)
    pod = {"metadata": {"namespace": "default", "name": "early", "uid": "u"}}
    response = await lockd.lock(pod)
    assert response.status == 503
    assert response.headers["Retry-After"] == "1"
    assert (await lockd.client.get("/readyz")).status == 503
    await make_node(kube)
    await lockd.wait_ready()


async def test_grant_patches_the_pod_once(start_lockd, kube) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "web-1")
    lockd = await start_lockd(limit_policy(2))
    before = pod["metadata"]["resourceVersion"]
    response = await lockd.lock(pod)
    assert response.status == 200
    again = await lockd.lock(pod)
    assert again.status == 200
    stored = await kube.get(PODS, name="web-1", namespace="default")
    assert NAMES.granted_at_annotation in stored["metadata"]["annotations"]
    assert NAMES.staggered_label not in stored["metadata"]["labels"]
    # One write for the grant: the re-ask did not patch again.
    assert int(stored["metadata"]["resourceVersion"]) == int(before) + 1
    status = await lockd.status()
    assert status["mode"] == "cluster"
    assert status["slots"][0]["phase"] == "Pending"
    assert status["slots"][0]["heldBecause"]
    text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    assert "HELD BECAUSE" in text and "mode cluster" in text


@pytest.mark.parametrize(
    "case",
    [
        pytest.param("spoofed-uid", id="spoofed-uid"),
        pytest.param("other-node", id="other-node"),
        pytest.param("finished", id="finished"),
        pytest.param("missing", id="missing"),
    ],
)
async def test_only_live_pods_of_this_node_get_slots(start_lockd, kube, case: str) -> None:
    await make_node(kube)
    await make_node(kube, "node-b")
    pod = await make_pod(kube, "victim", node="node-b" if case == "other-node" else "node-a")
    if case == "finished":
        await set_ready(kube, pod, ready=False, phase="Succeeded")
    lockd = await start_lockd(limit_policy(1))
    meta = dict(pod["metadata"])
    if case == "spoofed-uid":
        meta["uid"] = "00000000-0000-0000-0000-000000000000"
    if case == "missing":
        meta["name"] = "nobody"

    async def forbidden() -> bool:
        response = await lockd.lock({"metadata": meta})
        return response.status == 403

    await eventually(forbidden, what="403")
    response = await lockd.lock({"metadata": meta})
    assert "error" in await response.json()
    status = await lockd.status()
    assert status["slots"] == [] and status["queue"] == []
    stored = await kube.get(PODS, name="victim", namespace="default")
    assert NAMES.granted_at_annotation not in (stored["metadata"].get("annotations") or {})


async def test_uid_is_required(start_lockd, kube) -> None:
    await make_node(kube)
    lockd = await start_lockd(limit_policy(1))
    response = await lockd.client.get("/v1/lock", params={"namespace": "default", "name": "x"})
    assert response.status == 400
    assert "uid: required" in (await response.json())["error"]


@pytest.mark.parametrize(
    ("end", "counted"),
    [
        pytest.param("ready", "released", id="ready"),
        pytest.param("finished", "released", id="finished"),
        pytest.param("deleted", "released", id="deleted"),
    ],
)
async def test_slot_ends_with_the_pod(start_lockd, kube, end: str, counted: str) -> None:
    lockd, first, second = await first_holds_second_waits(start_lockd=start_lockd, kube=kube)
    if end == "ready":
        await set_ready(kube, first)
    elif end == "finished":
        await set_ready(kube, first, ready=False, phase="Failed")
    else:
        await kube.delete(PODS, name="first", namespace="default", grace_period_seconds=0)
    response = await lockd.lock(second, wait="10")
    assert response.status == 200
    status = await lockd.status()
    assert status["counters"][counted] == 1
    assert [s["name"] for s in status["slots"]] == ["second"]


async def test_min_hold_keeps_the_slot_after_ready(start_lockd, kube) -> None:
    await make_node(kube)
    first = await make_pod(kube, "first")
    second = await make_pod(kube, "second")
    lockd = await start_lockd(limit_policy(1, extra="  minHold: 1s\n"))
    assert (await lockd.lock(first)).status == 200
    await set_ready(kube, first)

    async def release_scheduled() -> bool:
        return any(s.release_at is not None for s in lockd.app[SERVICE].ledger.slots.values())

    await eventually(release_scheduled, what="the Ready pod to be seen")
    assert (await lockd.lock(second)).status == 423
    assert (await lockd.lock(second, wait="10")).status == 200


async def test_stuck_pod_frees_its_slot_at_hold_timeout(start_lockd, kube) -> None:
    await make_node(kube)
    stuck = await make_pod(kube, "stuck")
    lockd = await start_lockd(limit_policy(1, hold="500ms"))
    assert (await lockd.lock(stuck)).status == 200

    async def expired() -> bool:
        return (await lockd.status())["counters"]["expired"] == 1

    await eventually(expired, what="holdTimeout")


async def test_events_once_per_change(start_lockd, kube) -> None:
    await make_node(kube)
    holder = await make_pod(kube, "holder")
    waiter = await make_pod(kube, "waiter")
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock(holder)).status == 200
    for _ in range(5):
        assert (await lockd.lock(waiter)).status == 423
    await set_ready(kube, holder)
    assert (await lockd.lock(waiter, wait="10")).status == 200

    async def written() -> bool:
        return sorted(await pod_events(kube, "waiter")) == ["StaggerGranted", "StaggerWaiting"]

    await eventually(written, what="one StaggerWaiting and one StaggerGranted")
    # Granted at its first ask: it waited for nothing, and gets no Event (written before the waiter's).
    assert await pod_events(kube, "holder") == []


async def test_restarted_lockd_rebuilds_held_slots_before_granting(start_lockd, kube) -> None:
    await make_node(kube)
    pods = [await make_pod(kube, f"p{i}") for i in range(3)]
    first = await start_lockd(limit_policy(2))
    assert (await first.lock(pods[0])).status == 200
    assert (await first.lock(pods[1])).status == 200
    await first.client.close()
    second = await start_lockd(limit_policy(2))
    status = await second.status()
    assert sorted(s["name"] for s in status["slots"]) == ["p0", "p1"]
    assert (await second.lock(pods[2])).status == 423
    await set_ready(kube, pods[0])
    assert (await second.lock(pods[2], wait="10")).status == 200


async def _given_up(lockd) -> dict[str, float]:  # type: ignore[no-untyped-def]
    text = await (await lockd.client.get("/metrics")).text()
    return by_label(text, "stagger_lockd_waits_given_up_total", "why")


@pytest.mark.parametrize(
    ("end", "why"),
    [
        pytest.param("ready", "startedWithoutSlot", id="ready without a slot"),
        pytest.param("deleted", "podGone", id="deleted"),
    ],
)
async def test_a_queued_pod_that_starts_or_goes_is_a_wait_given_up(
    start_lockd, kube, end: str, why: str
) -> None:
    """The second pod waits behind the first; its init client gives up (fail-open) and the pod becomes
    Ready without a slot, or the pod is deleted: it leaves the queue, counted by why."""
    lockd, _first, second = await first_holds_second_waits(start_lockd=start_lockd, kube=kube)
    if end == "ready":
        await set_ready(kube, second)
    else:
        await kube.delete(PODS, name="second", namespace="default", grace_period_seconds=0)

    async def left() -> bool:
        return (await lockd.status())["queue"] == [] and (await _given_up(lockd)).get(why) == 1

    await eventually(left, what=f"the second pod to leave the queue, counted as {why}")
    assert [s["name"] for s in (await lockd.status())["slots"]] == ["first"]  # the slot is not freed
