"""Cluster mode's node policy dependencies: a Node relabel that selects a policy with a dependency has it
checked at once (with the app's one HTTP session, shared with the API client), its pods wait naming it
while it is down, and the waiting long poll is granted (the grant recorded on the pod) once it answers."""

from __future__ import annotations

import asyncio

from stagger.kube import NODES
from tests.lockd_cluster.conftest import NODE, make_node, make_pod
from tests.processes import free_port
from tests.waiting import eventually


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def test_a_relabel_to_a_policy_with_a_dependency_holds_until_it_answers(start_lockd, kube) -> None:
    target = free_port()  # nothing listens there yet
    policies = (
        "nodePolicies:\n"
        "- name: general\n"
        "- name: guarded\n"
        "  priority: 10\n"
        "  nodeSelector: {guard: '1'}\n"
        "  dependencies:\n"
        f"  - tcp: 127.0.0.1:{target}\n"
    )
    await make_node(kube)
    first, second = await make_pod(kube, "p0"), await make_pod(kube, "p1")
    lockd = await start_lockd(policies, dependency_interval=0.2)
    assert (await lockd.status())["dependencies"] == []
    assert (await lockd.lock(first)).status == 200
    await kube.patch(NODES, name=NODE, patch={"metadata": {"labels": {"guard": "1"}}})
    reason = f"waiting for dependency tcp 127.0.0.1:{target}: connection refused"

    async def held() -> bool:
        response = await lockd.lock(second)
        return response.status == 423 and (await response.json())["reason"] == reason

    await eventually(held, what="the guarded policy's dependency to hold the pod")
    (shown,) = (await lockd.status())["dependencies"]
    assert (shown["name"], shown["up"], shown["error"]) == (
        f"tcp 127.0.0.1:{target}",
        False,
        "connection refused",
    )
    poll = asyncio.create_task(lockd.lock(second, wait="30"))
    async with await asyncio.start_server(_close_at_once, "127.0.0.1", target):
        response = await asyncio.wait_for(poll, timeout=10.0)
        assert response.status == 200
    assert [s["name"] for s in (await lockd.status())["slots"]] == ["p0", "p1"]
