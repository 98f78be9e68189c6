"""`NodeView.check_identity` against the API emulator, with the pods watch paused so that it has not
delivered the caller yet: a pod that asks right after it was created (or recreated with the same name) is
read from the API once and accepted, not refused; a caller that is not a pod of this node is refused after
one read, and asking again within `remember` reads nothing; concurrent asks share one read; made-up names
cannot make more reads than the read budget; with no read left, the check waits for the watch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from lockd.clusterwatch import IdentitySettings, NodeView, Unconfirmed
from sim.emulator.server import ApiServer
from stagger.informer import InformerSettings
from stagger.kube import PODS, RestClient, WatchEventType
from tests.lockd_cluster.conftest import NAMES, NODE, make_node, make_pod
from tests.policies import limit_policy


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def reads(api: ApiServer) -> int:
    """Single-pod GETs the emulator has served (the pods watch lists and watches; it never gets one)."""
    return api.request_counts.get(("get", "pods"), 0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def node_view(kube: RestClient, clock: Clock, identity: IdentitySettings | None = None) -> NodeView:
    return NodeView(
        client=kube,
        node=NODE,
        names=NAMES,
        own_pod=None,
        informer_settings=InformerSettings(),
        identity=identity,
        clock=clock,
    )


async def pause(view: NodeView) -> None:
    """List and watch until synced, then stop watching: later changes stay unseen until `watch`."""
    task = asyncio.create_task(view.run())
    await view.wait_synced()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def watches() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_pod_the_watch_has_not_delivered_is_read_once_and_accepted(
    api: ApiServer, kube: RestClient, clock: Clock
) -> None:
    await make_node(kube)
    view = node_view(kube, clock)
    await pause(view)
    pod = await make_pod(kube, "fresh")
    meta = pod["metadata"]
    who = {"namespace": "default", "name": "fresh", "uid": meta["uid"]}
    # The watch's view alone refuses it: that was a 403 for a pod that exists, on this node.
    assert view.identity_problem(**who) is not None

    before = reads(api)
    assert await view.check_identity(**who) is None
    assert reads(api) == before + 1
    # Put into the pods cache, so the grant that follows finds it (and the next check reads nothing).
    cached = view.pod(("default", "fresh"))
    assert cached is not None and cached["metadata"]["uid"] == meta["uid"]
    assert await view.check_identity(**who) is None
    assert reads(api) == before + 1


async def test_a_recreated_pod_replaces_the_old_one(api: ApiServer, kube: RestClient, clock: Clock) -> None:
    await make_node(kube)
    old = await make_pod(kube, "web-0")
    view = node_view(kube, clock)
    seen: list[tuple[WatchEventType, str]] = []
    view.pods.add_handler(lambda kind, obj: seen.append((kind, obj["metadata"]["uid"])))
    await pause(view)
    await kube.delete(PODS, name="web-0", namespace="default", grace_period_seconds=0)
    new = await make_pod(kube, "web-0")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    seen.clear()

    before = reads(api)
    assert await view.check_identity(namespace="default", name="web-0", uid=new["metadata"]["uid"]) is None
    assert reads(api) == before + 1
    # Slots follow pods: the old pod's end is reported, then the new one.
    assert seen == [("DELETED", old["metadata"]["uid"]), ("MODIFIED", new["metadata"]["uid"])]
    # The old uid is now the stranger (refused after a read: from the cache alone, an older uid and a
    # newer one look the same).
    problem = await view.check_identity(namespace="default", name="web-0", uid=old["metadata"]["uid"])
    assert problem is not None and "does not match" in problem
    assert reads(api) == before + 2


@pytest.mark.parametrize("case", ["missing", "other-node", "spoofed-uid"])
async def test_a_stranger_is_refused_after_one_read_and_remembered(
    api: ApiServer, kube: RestClient, clock: Clock, case: str
) -> None:
    await make_node(kube)
    await make_node(kube, "node-b")
    view = node_view(kube, clock)
    await pause(view)
    pod = await make_pod(kube, "victim", node="node-b" if case == "other-node" else NODE)
    who = {"namespace": "default", "name": "victim", "uid": pod["metadata"]["uid"]}
    if case == "missing":
        who["name"] = "nobody"
    if case == "spoofed-uid":
        who["uid"] = "00000000-0000-0000-0000-000000000000"

    before = reads(api)
    problem = await view.check_identity(**who)
    assert problem is not None
    assert ("does not match" if case == "spoofed-uid" else "no pod default/") in problem
    assert reads(api) == before + 1
    if case == "other-node":
        assert view.pod(("default", "victim")) is None  # another node's pod stays out of this node's cache

    clock.now += 4.9  # within `remember` (5 s): the same answer, nothing read
    assert await view.check_identity(**who) == problem
    assert reads(api) == before + 1
    clock.now += 0.2  # past it: read once more
    assert await view.check_identity(**who) == problem
    assert reads(api) == before + 2


async def test_concurrent_asks_for_one_pod_share_one_read(
    api: ApiServer, kube: RestClient, clock: Clock
) -> None:
    await make_node(kube)
    view = node_view(kube, clock)
    await pause(view)
    before = reads(api)
    answers = await asyncio.gather(
        *(view.check_identity(namespace="default", name="ghost", uid="u") for _ in range(20))
    )
    assert all(answer is not None and "no pod default/ghost" in answer for answer in answers)
    assert reads(api) == before + 1


async def test_made_up_names_cannot_read_more_than_the_budget(
    api: ApiServer, kube: RestClient, clock: Clock
) -> None:
    await make_node(kube)
    # The clock stands still: the budget never refills. Checks with no read left wait `wait` for the watch.
    view = node_view(kube, clock, IdentitySettings(read_burst=3, wait=0.2))
    await pause(view)
    before = reads(api)
    answers = await asyncio.gather(
        *(view.check_identity(namespace="default", name=f"made-up-{i}", uid="u") for i in range(30))
    )
    assert all(answer is not None for answer in answers)
    assert reads(api) == before + 3
    # Three were read (404: refused for good); the rest could not be confirmed: ask again (503), never a
    # final refusal that would make an init client start its pod without a slot.
    unconfirmed = [answer for answer in answers if isinstance(answer, Unconfirmed)]
    assert len(unconfirmed) == 27, answers
    assert all("ask again" in answer for answer in unconfirmed)


async def test_with_no_read_left_the_check_waits_for_the_watch(
    api: ApiServer, kube: RestClient, clock: Clock, watches: list[asyncio.Task[None]]
) -> None:
    await make_node(kube)
    view = node_view(kube, clock, IdentitySettings(read_burst=0, wait=30.0))
    await pause(view)
    pod = await make_pod(kube, "late")
    before = reads(api)
    check = asyncio.create_task(
        view.check_identity(namespace="default", name="late", uid=pod["metadata"]["uid"])
    )
    await asyncio.sleep(0)  # the check is under way, waiting
    assert not check.done()
    watches.append(asyncio.create_task(view.run()))  # the watch catches up
    assert await asyncio.wait_for(check, timeout=10) is None
    assert reads(api) == before


async def test_through_lockd_a_stranger_asking_again_and_again_costs_one_api_read(
    start_lockd, api: ApiServer, kube: RestClient
) -> None:
    await make_node(kube)
    lockd = await start_lockd(limit_policy(1))
    before = reads(api)
    stranger = {"metadata": {"namespace": "default", "name": "nobody", "uid": "u"}}
    for _ in range(20):
        response = await lockd.lock(stranger)
        assert response.status == 403
        assert "no pod default/nobody is bound to node" in (await response.json())["error"]
    assert reads(api) == before + 1
