"""Cluster-mode lockd against pods that try to hog or steal slots: the anonymous pod-startup-lock path is
off unless --allow-anonymous (and then capped at holdTimeout), and a slot is given back only with its
release token or by the pod itself (its uid, from its own pod IP) — never with the uid alone, which
`/status` shows."""

from __future__ import annotations

from typing import Any

from lockd.app import CLUSTER
from stagger.kube import PODS
from tests.lockd_cluster.conftest import make_node, make_pod
from tests.policies import limit_policy
from tests.waiting import eventually


async def _set_pod_ip(kube, pod: dict[str, Any], ip: str) -> None:
    await kube.patch(
        PODS,
        name=pod["metadata"]["name"],
        namespace=pod["metadata"]["namespace"],
        subresource="status",
        patch={"status": {"phase": "Pending", "podIP": ip}},
    )


async def test_anonymous_slots_are_off_in_cluster_mode(start_lockd, kube) -> None:
    await make_node(kube)
    lockd = await start_lockd(limit_policy(2))
    response = await lockd.client.get("/", params={"duration": "86400"})
    assert response.status == 403
    assert response.content_type == "application/json"
    assert "--allow-anonymous" in (await response.json())["error"]
    assert (await lockd.status())["slots"] == []


async def test_allow_anonymous_turns_them_on_capped_at_hold_timeout(start_lockd, kube) -> None:
    await make_node(kube)
    lockd = await start_lockd(limit_policy(2, hold="1m"), allow_anonymous=True)
    response = await lockd.client.get("/", params={"duration": "86400"})
    assert response.status == 200
    assert response.headers["X-Stagger-Duration"] == "60"
    (slot,) = (await lockd.status())["slots"]
    assert slot["expiresInSeconds"] <= 60


async def test_the_uid_shown_in_status_does_not_release_a_slot(start_lockd, kube) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "web-1")
    lockd = await start_lockd(limit_policy(1))
    granted = await lockd.lock(pod)
    assert granted.status == 200
    token = (await granted.json())["releaseToken"]
    (slot,) = (await lockd.status())["slots"]
    meta = pod["metadata"]
    query = {"namespace": meta["namespace"], "name": meta["name"], "uid": slot["uid"]}
    # From 127.0.0.1, which is not the pod's IP: the uid alone proves nothing.
    stolen = await lockd.client.delete("/v1/lock", params=query)
    assert stolen.status == 403
    assert len((await lockd.status())["slots"]) == 1
    released = await lockd.client.delete("/v1/lock", params=query, headers={"X-Stagger-Release-Token": token})
    assert released.status == 200


async def test_the_pod_itself_may_give_its_slot_back_from_its_own_ip(start_lockd, kube) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "web-2")
    await _set_pod_ip(kube, pod, "127.0.0.1")  # the test client connects from 127.0.0.1
    lockd = await start_lockd(limit_policy(1))

    async def seen() -> bool:
        # The view has the pod's IP once its watch delivered the status patch.
        view = lockd.app[CLUSTER].view
        stored = view.pod(("default", "web-2")) if view is not None else None
        return bool(stored and (stored.get("status") or {}).get("podIP") == "127.0.0.1")

    await eventually(seen, what="lockd to see the pod's IP")
    assert (await lockd.lock(pod)).status == 200
    meta = pod["metadata"]
    wrong_uid = await lockd.client.delete(
        "/v1/lock", params={"namespace": "default", "name": "web-2", "uid": "not-the-uid"}
    )
    assert wrong_uid.status == 403
    released = await lockd.client.delete(
        "/v1/lock", params={"namespace": "default", "name": "web-2", "uid": meta["uid"]}
    )
    assert released.status == 200
