"""LeaderElector (webhook.leader) against the API emulator over real HTTP, with short timings (lease 2 s,
renew deadline 1 s, retry 0.2 s): of two replicas one leads and labels its pod `<prefix>/leader: "1"`,
the other follows; a cancelled leader stops leading, then releases the Lease (what client-go writes) and
unlabels its pod, and the follower takes over within a retry period; a killed leader (no release) is
replaced once the lease duration has passed; a leader cut off from the API server stops leading at its
renew deadline, before the follower takes over, and unlabels its pod once it can; a 409 on renewal is
read again and renewed, or, when another replica took the Lease, ends leadership at once; so does a
deleted Lease (then created again); two replicas starting together elect one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from sim.emulator.server import ApiServer
from sim.kubeclient import client_for_url
from stagger.kube import LEASES, ApiError, RestClient
from stagger.names import Names
from tests.leader.conftest import NAMESPACE, Proxy, RecordingClient, create_pod, pod_labels
from tests.waiting import eventually
from webhook.leader import LeaderElector, LeaderState, Timings, leader_label

TIMINGS = Timings(lease_duration=2.0, renew_deadline=1.0, retry_period=0.2)
LEASE = "stagger-controller"
LABEL = leader_label(Names())
# Requests on a loaded 2-core machine: room on top of the protocol's own times.
SLACK = 0.5


class Replica:
    """One controller replica: its elector, running as a task, and what its hooks saw (with times)."""

    def __init__(self, identity: str, client: RestClient, **options: Any) -> None:
        self.identity = identity
        self.hooks: list[tuple[Any, ...]] = []  # (hook, time); tests may share it with a request log
        self.elector = LeaderElector(
            client=client,
            namespace=NAMESPACE,
            name=LEASE,
            identity=identity,
            timings=TIMINGS,
            names=Names(),
            pod_name=identity,
            pod_namespace=NAMESPACE,
            on_started_leading=lambda: self.hooks.append(("started", time.monotonic())),
            on_stopped_leading=lambda: self.hooks.append(("stopped", time.monotonic())),
            on_new_leader=lambda who: self.hooks.append((f"leader {who}", time.monotonic())),
            **options,
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def wait(self, predicate: Callable[[LeaderState], bool], within: float) -> LeaderState:
        return await asyncio.wait_for(self.elector.wait_for(predicate), within)

    def when(self, hook: str) -> float:
        return float(next(at for name, at in reversed(self.hooks) if name == hook))


def leading(state: LeaderState) -> bool:
    return state.is_leader


@asynccontextmanager
async def replicas(*pairs: tuple[str, RestClient], **options: Any) -> AsyncIterator[list[Replica]]:
    group = [Replica(identity, client, **options) for identity, client in pairs]
    for replica in group:
        await create_pod(pairs[0][1], replica.identity)
    try:
        yield group
    finally:
        for replica in group:
            await replica.stop()


@asynccontextmanager
async def recorded_leader(
    *, api: ApiServer, session: aiohttp.ClientSession
) -> AsyncIterator[tuple[Replica, RecordingClient, list[tuple[Any, ...]]]]:
    """Replica a, alone and leading, on a RecordingClient: (a, its client, the client's request log)."""
    log: list[tuple[Any, ...]] = []
    recording = RecordingClient(base_url=api.url, session=session, log=log)
    async with replicas(("a", recording)) as (a,):
        a.start()
        await a.wait(leading, 5)
        yield a, recording, log


async def lease_spec(client: RestClient) -> dict[str, Any]:
    lease = await client.get(LEASES, name=LEASE, namespace=NAMESPACE)
    return dict(lease["spec"])


async def labelled(client: RestClient, *names: str) -> bool:
    """Of the pods a and b (those that exist), exactly `names` carry the leader label."""
    for name in ("a", "b"):
        try:
            labels = await pod_labels(client, name)
        except ApiError as err:
            if err.status == 404:
                continue
            raise
        if (labels.get(LABEL) == "1") != (name in names):
            return False
    return True


async def test_one_leads_the_other_follows_and_renews(client: RestClient) -> None:
    async with replicas(("a", client), ("b", client)) as (a, b):
        a.start()
        await a.wait(leading, 5)
        b.start()
        state = await b.wait(lambda s: s.leader == "a", 5)
        assert not state.is_leader and state.transitions == 0 and state.last_error is None
        spec = await lease_spec(client)
        assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 2
        assert spec["leaseTransitions"] == 0
        assert spec["renewTime"].endswith("Z") and len(spec["renewTime"]) == len(
            "2026-11-23T10:00:00.000000Z"
        )
        await eventually(lambda: labelled(client, "a"), within=5, what="the leader label on a's pod only")

        # a renews every retry period; b keeps following through several lease durations' worth of renewals.
        renewals: set[str] = set()

        async def renewed_a_few_times() -> bool:
            renewals.add((await lease_spec(client))["renewTime"])
            return len(renewals) >= 4

        await eventually(renewed_a_few_times, within=5, poll=0.05, what="renewals")
        assert a.elector.is_leader and not b.elector.is_leader
        assert [name for name, _ in a.hooks] == ["leader a", "started"]
        assert [name for name, _ in b.hooks] == ["leader a"]
        assert (await lease_spec(client))["acquireTime"] == spec["acquireTime"]


async def test_cancelled_leader_releases_and_the_follower_takes_over_within_a_retry_period(
    api: ApiServer, session: aiohttp.ClientSession, client: RestClient
) -> None:
    log: list[tuple[Any, ...]] = []
    recording = RecordingClient(base_url=api.url, session=session, log=log)
    async with replicas(("a", recording), ("b", client)) as (a, b):
        a.hooks = log  # one log: a's hooks among a's requests
        a.start()
        await a.wait(leading, 5)
        b.start()
        await b.wait(lambda s: s.leader == "a", 5)
        await eventually(lambda: labelled(client, "a"), within=5, what="a labelled")

        await a.stop()
        released_at = time.monotonic()
        await b.wait(leading, TIMINGS.retry_period + SLACK)
        assert b.when("started") - released_at <= TIMINGS.retry_period + SLACK

        # a stopped leading, then released the Lease with one conditional update, then unlabelled its pod.
        names = [entry[0] for entry in log]
        stopped = names.index("stopped")
        release = names.index("PUT", stopped)
        assert all(entry[0] != "PUT" for entry in log[stopped + 1 : release])
        assert log[release][2] == "200"
        after = [entry for entry in log[release + 1 :] if len(entry) == 3]
        assert after[0][0] == "PATCH" and after[0][2] == "200"
        assert not a.elector.is_leader
        spec = await lease_spec(client)
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        await eventually(lambda: labelled(client, "b"), within=5, what="the label moved to b")


async def test_the_release_writes_what_client_go_writes(
    api: ApiServer, session: aiohttp.ClientSession, client: RestClient
) -> None:
    log: list[tuple[Any, ...]] = []
    async with replicas(("a", RecordingClient(base_url=api.url, session=session, log=log))) as (a,):
        a.start()
        await a.wait(leading, 5)
        acquired = await lease_spec(client)
        await a.stop()
        spec = await lease_spec(client)
        assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == acquired["leaseTransitions"] == 0
        assert spec["acquireTime"] == spec["renewTime"] > acquired["renewTime"]
        assert a.elector.leader is None and a.elector.state.leader_changes == 2  # a, then nobody
        assert not (await pod_labels(client, "a")).get(LABEL)


async def test_killed_leader_is_replaced_after_the_lease_duration(client: RestClient) -> None:
    async with replicas(("a", client), ("b", client), release_on_cancel=False) as (a, b):
        a.start()
        await a.wait(leading, 5)
        b.start()
        await b.wait(lambda s: s.leader == "a", 5)
        before = await lease_spec(client)
        await a.stop()  # as if killed: the lease stays a's
        killed_at = time.monotonic()
        assert (await lease_spec(client))["holderIdentity"] == "a"
        await b.wait(leading, TIMINGS.lease_duration + TIMINGS.retry_period + SLACK)
        waited = b.when("started") - killed_at
        # b counts the lease duration from when it first saw a's last renewal, sent at most a retry period
        # (and a request) before the kill.
        assert TIMINGS.lease_duration - TIMINGS.retry_period - 0.2 <= waited
        assert waited <= TIMINGS.lease_duration + TIMINGS.retry_period + SLACK
        spec = await lease_spec(client)
        assert spec["holderIdentity"] == "b"
        assert spec["leaseTransitions"] == before["leaseTransitions"] + 1
        assert spec["acquireTime"] != before["acquireTime"]


async def test_leader_cut_off_stops_leading_at_its_renew_deadline_before_the_takeover(
    api: ApiServer, session: aiohttp.ClientSession, client: RestClient, proxy: Proxy
) -> None:
    through_proxy = client_for_url(session=session, base_url=proxy.url, request_timeout=10.0)
    async with replicas(("a", through_proxy), ("b", client)) as (a, b):
        a.start()
        await a.wait(leading, 5)
        b.start()
        await b.wait(lambda s: s.leader == "a", 5)
        await eventually(lambda: labelled(client, "a"), within=5, what="a labelled")

        proxy.cut = True
        cut_at = time.monotonic()
        await a.wait(lambda s: not s.is_leader, TIMINGS.renew_deadline + SLACK)
        await b.wait(leading, TIMINGS.lease_duration + TIMINGS.retry_period + SLACK)
        stopped, started = a.when("stopped"), b.when("started")
        # a's last renewal was sent at most a retry period before the cut; it gives up a renew deadline
        # after it, and b takes over a lease duration after it: the gap is what keeps them apart.
        assert stopped - cut_at <= TIMINGS.renew_deadline + 0.3  # + the event loop's latency under load
        assert stopped < started
        assert started - stopped >= TIMINGS.lease_duration - TIMINGS.renew_deadline - 0.3
        assert a.elector.state.last_error is not None
        # Cut off, a could not remove its label: both pods carry it until a reaches the API server again.
        await eventually(lambda: labelled(client, "a", "b"), within=5, what="b labelled too")

        proxy.cut = False
        state = await a.wait(lambda s: s.leader == "b", TIMINGS.renew_deadline + SLACK)
        assert not state.is_leader
        await eventually(lambda: labelled(client, "b"), within=5, what="a's label removed")
        await a.wait(lambda s: s.last_error is None, 5)


async def test_a_409_on_renewal_is_read_again_and_renewed(
    api: ApiServer, session: aiohttp.ClientSession, client: RestClient
) -> None:
    async with recorded_leader(api=api, session=session) as (a, recording, log):

        async def someone_labels_the_lease() -> None:
            patch = {"metadata": {"labels": {"touched": "yes"}}}
            await client.patch(LEASES, name=LEASE, namespace=NAMESPACE, patch=patch)

        recording.before_put = someone_labels_the_lease
        await eventually(lambda: answered(log, "409"), within=5, what="a conflict")
        start = next(i for i, entry in enumerate(log) if len(entry) == 3 and entry[2] == "409")
        await eventually(lambda: answered(log[start:], "200", method="PUT"), within=5, what="a renewal")
        # Read again at once (GET right after the 409), then renewed; a never stopped leading.
        assert log[start + 1][0] == "GET" and log[start + 2][0] == "PUT"
        assert a.elector.is_leader and [name for name, _ in a.hooks] == ["leader a", "started"]
        lease = await client.get(LEASES, name=LEASE, namespace=NAMESPACE)
        assert lease["metadata"]["labels"] == {"touched": "yes"}  # the other writer's change is kept
        assert lease["spec"]["holderIdentity"] == "a"


async def test_a_409_because_another_replica_took_the_lease_ends_leadership_at_once(
    api: ApiServer, session: aiohttp.ClientSession, client: RestClient
) -> None:
    async with recorded_leader(api=api, session=session) as (a, recording, log):
        await eventually(lambda: labelled(client, "a"), within=5, what="a labelled")

        async def intruder_takes_the_lease() -> None:
            lease = await client.get(LEASES, name=LEASE, namespace=NAMESPACE)
            lease["spec"]["holderIdentity"] = "intruder"
            lease["spec"]["leaseTransitions"] += 1
            await client.request("PUT", LEASES.path(namespace=NAMESPACE, name=LEASE), body=lease)

        recording.before_put = intruder_takes_the_lease
        state = await a.wait(lambda s: not s.is_leader, TIMINGS.retry_period + SLACK)
        assert state.leader == "intruder" and state.transitions == 1
        assert _answered(log, "409")
        assert [name for name, _ in a.hooks] == ["leader a", "started", "leader intruder", "stopped"]
        await eventually(lambda: labelled(client), within=5, what="a's label removed")


async def test_two_replicas_starting_together_elect_one(client: RestClient) -> None:
    async with replicas(("a", client), ("b", client)) as (a, b):
        a.start()
        b.start()

        async def one_leads() -> bool:
            return a.elector.is_leader or b.elector.is_leader

        await eventually(one_leads, within=5, what="a leader")
        leader, follower = (a, b) if a.elector.is_leader else (b, a)
        await follower.wait(lambda s: s.leader == leader.identity, 5)
        assert leader.elector.is_leader and not follower.elector.is_leader
        await eventually(lambda: labelled(client, leader.identity), within=5, what="one label")
        assert "started" not in [name for name, _ in follower.hooks]


async def answered(log: list[tuple[Any, ...]], status: str, method: str | None = None) -> bool:
    return _answered(log, status, method=method)


def _answered(log: list[tuple[Any, ...]], status: str, *, method: str | None = None) -> bool:
    return any(
        entry[2] == status and (method is None or entry[0] == method) for entry in log if len(entry) == 3
    )


async def test_a_deleted_lease_ends_leadership_then_is_created_again(client: RestClient) -> None:
    async with replicas(("a", client)) as (a,):
        a.start()
        await a.wait(leading, 5)
        await client.delete(LEASES, name=LEASE, namespace=NAMESPACE)
        await a.wait(lambda s: not s.is_leader, TIMINGS.retry_period + SLACK)
        await a.wait(leading, TIMINGS.retry_period + SLACK)
        assert [name for name, _ in a.hooks] == ["leader a", "started", "stopped", "started"]
        assert (await lease_spec(client))["holderIdentity"] == "a"
