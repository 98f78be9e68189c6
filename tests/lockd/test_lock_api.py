"""lockd's lock contract over real HTTP: 200/423/400/404, Retry-After, FIFO, long poll, holdTimeout,
idle waiters, and the pod-startup-lock compatible `GET /`."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from lockd import app as lockd_app
from tests.policies import limit_policy
from tests.waiting import eventually


async def test_grant_then_reask_holds_one_slot(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(2))
    first = await lockd.lock("web-1", uid="abc-123")
    assert first.status == 200
    body = await first.json()
    assert body["granted"] is True
    assert (body["namespace"], body["name"]) == ("default", "web-1")
    assert body["grantedAt"].endswith("Z")
    again = await lockd.lock("web-1", uid="abc-123")
    assert again.status == 200
    assert (await again.json())["grantedAt"] == body["grantedAt"]
    status = await lockd.status()
    assert [(s["name"], s["uid"]) for s in status["slots"]] == [("web-1", "abc-123")]
    assert status["counters"]["granted"] == 1


async def test_full_node_answers_423_with_reason_position_and_retry_after(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(2))
    assert (await lockd.lock("a")).status == 200
    assert (await lockd.lock("b")).status == 200
    denied = await lockd.lock("c")
    assert denied.status == 423
    assert int(denied.headers["Retry-After"]) >= 1
    body = await denied.json()
    assert body == {
        "granted": False,
        "reason": "2 of 2 slots in use (maxConcurrent)",
        "position": 1,
        "maxWait": 600.0,
    }
    second = await lockd.lock("d")
    assert (await second.json())["position"] == 2


async def test_freed_slot_goes_to_the_oldest_waiter(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    assert (await lockd.lock("older")).status == 423
    assert (await lockd.lock("newer")).status == 423
    released = await lockd.release("holder")
    assert released.status == 200
    assert (await released.json())["released"] is True
    newer = await lockd.lock("newer")
    assert newer.status == 423
    assert (await newer.json())["position"] == 2
    assert (await lockd.lock("older")).status == 200
    status = await lockd.status()
    assert [q["name"] for q in status["queue"]] == ["newer"]


async def test_long_poll_answers_soon_after_the_slot_frees(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    waiter = asyncio.create_task(lockd.lock("waiter", wait="20"))
    await eventually(lambda: _queued(lockd, "waiter"), what="the waiter to queue")
    released_at = time.monotonic()
    await lockd.release("holder")
    response = await asyncio.wait_for(waiter, timeout=10)
    assert response.status == 200
    # The contract is 100 ms; a loaded CI machine gets a generous margin.
    assert time.monotonic() - released_at < 2.0


async def _queued(lockd, name: str) -> bool:
    return any(q["name"] == name for q in (await lockd.status())["queue"])


async def test_long_poll_times_out_with_423(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    started = time.monotonic()
    response = await lockd.lock("waiter", wait="0.5")
    assert response.status == 423
    assert 0.4 <= time.monotonic() - started < 5


async def test_long_poll_serves_waiters_in_order(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    order: list[str] = []

    async def wait_for(name: str) -> None:
        response = await lockd.lock(name, wait="20")
        assert response.status == 200
        order.append(name)
        await lockd.release(name)

    tasks = []
    for name in ("w1", "w2", "w3"):
        tasks.append(asyncio.create_task(wait_for(name)))
        await eventually(lambda name=name: _queued(lockd, name), what=f"{name} to queue")
    await lockd.release("holder")
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)
    assert order == ["w1", "w2", "w3"]


async def test_slot_expires_after_hold_timeout(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1, hold="300ms"))
    assert (await lockd.lock("stuck")).status == 200

    async def expired() -> bool:
        status = await lockd.status()
        return not status["slots"] and status["counters"]["expired"] == 1

    await eventually(expired, what="the slot to expire")
    assert (await lockd.lock("next")).status == 200


async def test_idle_waiter_leaves_the_queue(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1), waiter_idle_timeout=0.3)
    assert (await lockd.lock("holder")).status == 200
    assert (await lockd.lock("gone")).status == 423
    assert (await lockd.lock("stays")).status == 423

    async def gone_left() -> bool:
        await lockd.lock("stays")
        return [q["name"] for q in (await lockd.status())["queue"]] == ["stays"]

    await eventually(gone_left, what="the idle waiter to leave")
    metrics = await (await lockd.client.get("/metrics")).text()
    # At least "gone": on a loaded machine "stays" may also miss its 0.3 s and be asked back in by gone_left.
    given_up = re.search(r'^stagger_lockd_waits_given_up_total\{why="stoppedAsking"\} (\S+)$', metrics, re.M)
    assert given_up is not None and float(given_up.group(1)) >= 1, metrics


async def test_release_of_a_pod_without_slot_is_404(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    response = await lockd.release("nobody")
    assert response.status == 404
    assert "holds no slot and is not waiting" in (await response.json())["error"]


async def test_post_is_the_same_as_get(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    response = await lockd.client.post("/v1/lock", params={"namespace": "default", "name": "p"})
    assert response.status == 200


@pytest.mark.parametrize(
    ("query", "message"),
    [
        pytest.param({"name": "a"}, "namespace: required", id="no-namespace"),
        pytest.param({"namespace": "default"}, "name: required", id="no-name"),
        pytest.param({"namespace": "Default", "name": "a"}, "namespace: not a valid", id="bad-namespace"),
        pytest.param({"namespace": "default", "name": "a_b"}, "name: not a valid", id="bad-name"),
        pytest.param(
            {"namespace": "default", "name": "a", "wait": "soon"}, "wait: expected a number", id="wait-nan"
        ),
        pytest.param(
            {"namespace": "default", "name": "a", "wait": "61"},
            "wait: must be between 0 and 60",
            id="wait-big",
        ),
        pytest.param(
            {"namespace": "default", "name": "a", "wait": "-1"},
            "wait: expected a number of seconds",
            id="wait-neg",
        ),
        pytest.param({"namespace": "default", "name": "a", "uid": "x y"}, "uid: not a valid", id="bad-uid"),
    ],
)
async def test_bad_parameters_get_400_and_change_nothing(start_lockd, query, message) -> None:
    lockd = await start_lockd(limit_policy(1))
    before = await lockd.status()
    response = await lockd.client.get("/v1/lock", params=query)
    assert response.status == 400
    assert message in (await response.json())["error"]
    after = await lockd.status()
    assert (after["slots"], after["queue"], after["counters"]) == (
        before["slots"],
        before["queue"],
        before["counters"],
    )


async def test_pod_startup_lock_compatibility(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    acquired = await lockd.client.get("/", params={"duration": "1"})
    assert acquired.status == 200
    assert await acquired.text() == "Lock acquired"
    locked = await lockd.client.get("/")
    assert locked.status == 423
    assert await locked.text() == "Locked"
    assert "Retry-After" in locked.headers

    async def freed() -> bool:
        return (await lockd.client.get("/")).status == 200

    await eventually(freed, what="the anonymous slot to end after its duration")
    assert (await lockd.client.get("/", params={"duration": "zero"})).status == 400


async def test_when_every_connection_is_busy_a_new_one_is_refused_at_once(start_lockd) -> None:
    """--max-connections 16 and 16 pods long-polling in the queue: a 17th connection is closed before it
    is read (refused, counted), and the waiters keep their places. (An idle connection would have been
    closed for it instead: tests/lockd/test_server.py floods lockd with those.)"""
    lockd = await start_lockd(limit_policy(1), max_connections=16)
    assert (await lockd.lock("holder")).status == 200
    polls = [asyncio.create_task(lockd.lock(f"w{n}", wait="30")) for n in range(16)]
    queue = lockd.app[lockd_app.SERVICE].ledger.queue

    async def all_polling() -> bool:
        return len(queue) == 16 and all(waiter.polling for waiter in queue.values())

    try:
        await eventually(all_polling, what="16 long polls in progress")
        host, port = lockd.client.server.host, lockd.client.server.port
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: lockd\r\n\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), timeout=5)
        except ConnectionResetError:
            answer = b""
        finally:
            writer.close()
        assert answer == b""  # closed before a byte of an answer
        assert lockd.app[lockd_app.METRICS].connections_shed.values == {"refused": 1}
        assert len(queue) == 16
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
