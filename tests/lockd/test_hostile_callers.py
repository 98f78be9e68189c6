"""lockd against careless and hostile callers on its host port, over real HTTP: anonymous slots capped at
holdTimeout, release tokens (a DELETE without the holder's token changes nothing), waiters that hang up
or ask to leave the queue, the queue bound (429), strict parameters, request body limits, `/status`
that lists only the first waiters, and policy reloads that keep the last good policy."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from lockd import app as lockd_app
from tests.policies import limit_policy
from tests.waiting import eventually

TOKEN = re.compile(r"[0-9a-f]{32}")


async def _queue_names(lockd) -> list[str]:
    return [q["name"] for q in (await lockd.status())["queue"]]


async def test_an_anonymous_slot_never_outlives_hold_timeout(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(2, hold="90s"))
    response = await lockd.client.get("/", params={"duration": "86400"})
    assert response.status == 200
    text = await response.text()
    assert text.startswith("Lock acquired for 90s") and "cut to the node policy's holdTimeout" in text
    assert response.headers["X-Stagger-Duration"] == "90"
    (slot,) = (await lockd.status())["slots"]
    assert slot["expiresInSeconds"] <= 90
    shorter = await lockd.client.get("/", params={"duration": "30"})
    assert await shorter.text() == "Lock acquired"
    assert shorter.headers["X-Stagger-Duration"] == "30"


async def test_a_bad_anonymous_duration_is_a_json_400(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(2))
    response = await lockd.client.get("/", params={"duration": "forever"})
    assert response.status == 400
    assert "duration" in (await response.json())["error"]
    assert (await lockd.status())["slots"] == []


async def test_anonymous_path_can_be_turned_off_standalone(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(2), allow_anonymous=False)
    response = await lockd.client.get("/", params={"duration": "10"})
    assert response.status == 403
    assert "--allow-anonymous" in (await response.json())["error"]
    assert (await lockd.status())["slots"] == []


async def test_release_needs_the_token_of_the_grant(start_lockd, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    lockd = await start_lockd(limit_policy(1))
    granted = await lockd.lock("holder", uid="u-1")
    body = await granted.json()
    token = body["releaseToken"]
    assert TOKEN.fullmatch(token) and granted.headers["X-Stagger-Release-Token"] == token
    again = await lockd.lock("holder", uid="u-1")
    assert again.status == 200 and "releaseToken" not in await again.json()
    assert "X-Stagger-Release-Token" not in again.headers
    for wrong in ("", "0" * 32, token[:-1]):
        refused = await lockd.release("holder", token=wrong)
        assert refused.status == 403
        assert "release token" in (await refused.json())["error"]
        assert len((await lockd.status())["slots"]) == 1
    status_text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    status_json = await (await lockd.client.get("/status")).text()
    metrics = await (await lockd.client.get("/metrics")).text()
    assert token not in status_text + status_json + metrics
    released = await lockd.release("holder")
    assert released.status == 200 and (await released.json())["released"] is True
    assert token not in caplog.text


async def test_a_long_poll_that_hangs_up_leaves_the_queue_at_once(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    gone = asyncio.create_task(lockd.lock("gone", wait="30"))
    await eventually(lambda: _is_queued(lockd, ["gone"]), what="the long poll to queue")
    gone.cancel()  # the client closes the connection
    await eventually(lambda: _is_queued(lockd, []), what="the closed long poll to leave the queue")


async def test_a_dead_head_does_not_block_a_freed_slot(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    dead = asyncio.create_task(lockd.lock("dead", wait="30"))
    await eventually(lambda: _is_queued(lockd, ["dead"]), what="the first waiter to queue")
    alive = asyncio.create_task(lockd.lock("alive", wait="30"))
    await eventually(lambda: _is_queued(lockd, ["dead", "alive"]), what="the second waiter to queue")
    dead.cancel()
    await lockd.release("holder")
    response = await asyncio.wait_for(alive, timeout=10)
    assert response.status == 200
    slots = [s["name"] for s in (await lockd.status())["slots"]]
    assert slots == ["alive"], "the slot went to the waiter that is still there, not to the one that left"


async def test_delete_of_a_waiting_pod_removes_it_from_the_queue(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    assert (await lockd.lock("waiter", uid="w-1")).status == 423
    assert (await lockd.lock("other", uid="o-1")).status == 423
    stranger = await lockd.client.delete("/v1/lock", params={"namespace": "default", "name": "waiter"})
    assert stranger.status == 403, "without the waiter's uid nothing changes"
    assert await _queue_names(lockd) == ["waiter", "other"]
    response = await lockd.client.delete(
        "/v1/lock", params={"namespace": "default", "name": "waiter", "uid": "w-1"}
    )
    assert response.status == 200
    assert await response.json() == {
        "released": False,
        "leftQueue": True,
        "namespace": "default",
        "name": "waiter",
    }
    assert await _queue_names(lockd) == ["other"]


async def test_the_queue_is_bounded_and_a_full_queue_answers_429(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1), max_queue=3)
    assert (await lockd.lock("holder")).status == 200
    for name in ("w1", "w2", "w3"):
        assert (await lockd.lock(name)).status == 423
    full = await lockd.lock("w4")
    assert full.status == 429
    assert int(full.headers["Retry-After"]) >= 1
    body = await full.json()
    assert body["granted"] is False and body["queueLimit"] == 3 and "maxQueue" in body["reason"]
    assert body["maxWait"] == 600.0, "the init client bounds its wait by the node policy here too"
    assert (await lockd.lock("w2")).status == 423, "a pod already waiting keeps asking"
    status = await lockd.status()
    assert status["waiting"] == 3


async def test_the_node_policy_max_queue_wins_over_the_flag(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1, extra="  maxQueue: 1\n"), max_queue=50)
    assert (await lockd.lock("holder")).status == 200
    assert (await lockd.lock("w1")).status == 423
    assert (await lockd.lock("w2")).status == 429


async def test_status_lists_the_first_100_waiters_and_counts_all(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    await asyncio.gather(*(lockd.lock(f"w-{i:03d}") for i in range(130)))
    status = await lockd.status()
    assert status["waiting"] == 130
    assert len(status["queue"]) == 100
    assert [q["position"] for q in status["queue"][:3]] == [1, 2, 3]
    more = await (await lockd.client.get("/status", params={"limit": "120"})).json()
    assert len(more["queue"]) == 120
    text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    assert "waiting: 130 (first 100 shown; ?limit=N for more)" in text
    bad = await lockd.client.get("/status", params={"limit": "-1"})
    assert bad.status == 400 and "limit" in (await bad.json())["error"]


async def test_status_reasons_are_current_not_the_last_answer(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("holder")).status == 200
    assert (await lockd.lock("first")).status == 423
    assert (await lockd.lock("second")).status == 423
    second = (await lockd.status())["queue"][1]
    assert second["reason"] == "1 pod asked first (first come, first served)"
    await lockd.release("holder")
    # Nobody asked again, but the reasons shown are as of now.
    queue = (await lockd.status())["queue"]
    assert queue[0]["reason"] == "next in line: a slot is free"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        pytest.param({"namespace": "default\n", "name": "a"}, "namespace: not a valid", id="ns-newline"),
        pytest.param({"namespace": "default", "name": "a\n"}, "name: not a valid", id="name-newline"),
        pytest.param(
            {"namespace": "default", "name": "a", "uid": "u\n"}, "uid: not a valid", id="uid-newline"
        ),
        pytest.param({"namespace": "default", "name": "a", "wait": "1_0"}, "wait: expected", id="underscore"),
        pytest.param({"namespace": "default", "name": "a", "wait": "1e1"}, "wait: expected", id="exponent"),
        pytest.param({"namespace": "default", "name": "a", "wait": " 5"}, "wait: expected", id="space"),
        pytest.param(
            {"namespace": "default", "name": "a", "wait": "٣"}, "wait: expected", id="non-ascii-digit"
        ),
        pytest.param({"namespace": "default", "name": "a", "wait": "nan"}, "wait: expected", id="nan"),
    ],
)
async def test_parameters_are_checked_whole(start_lockd, query: dict[str, str], message: str) -> None:
    lockd = await start_lockd(limit_policy(1))
    response = await lockd.client.get("/v1/lock", params=query)
    assert response.status == 400
    assert message in (await response.json())["error"]
    status = await lockd.status()
    assert status["slots"] == [] and status["waiting"] == 0


async def test_a_body_over_the_limit_is_413_and_changes_nothing(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1), max_body=1024)
    response = await lockd.client.post(
        "/v1/lock", params={"namespace": "default", "name": "a"}, data=b"x" * 4096
    )
    assert response.status == 413
    assert "at most 1024 bytes" in (await response.json())["error"]

    async def chunks():
        for _ in range(8):
            yield b"y" * 512

    # A chunked body has no length to check before it is read: refused at once, whatever its size.
    chunked = await lockd.client.post("/v1/lock", params={"namespace": "default", "name": "a"}, data=chunks())
    assert chunked.status == 411
    assert "Content-Length" in (await chunked.json())["error"]
    assert (await lockd.status())["slots"] == []
    small = await lockd.client.post("/v1/lock", params={"namespace": "default", "name": "a"}, data=b"{}")
    assert small.status == 200


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/nowhere", 404, id="unknown-path"),
        pytest.param("PUT", "/v1/lock", 405, id="wrong-method"),
    ],
)
async def test_every_error_is_json(start_lockd, method: str, path: str, status: int) -> None:
    lockd = await start_lockd(limit_policy(1))
    response = await lockd.client.request(method, path)
    assert response.status == status
    assert response.content_type == "application/json"
    assert (await response.json())["error"]


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param("empty", id="emptied"),
        pytest.param("deleted", id="deleted"),
        pytest.param("huge", id="over-256-KiB"),
        pytest.param("alias", id="yaml-alias"),
    ],
)
async def test_a_broken_policy_file_keeps_the_last_good_policy_until_it_reads_well(
    start_lockd, breakage: str
) -> None:
    good = limit_policy(2)
    lockd = await start_lockd(good)
    if breakage == "empty":
        lockd.policy_path.write_text("")
    elif breakage == "deleted":
        lockd.policy_path.unlink()
    elif breakage == "huge":
        lockd.policy_path.write_text(good + "#" * (300 * 1024) + "\n")
    else:
        lockd.policy_path.write_text("nodePolicies:\n- &a {name: a}\n- *a\n")

    async def reported() -> bool:
        return bool((await lockd.status())["policy"].get("lastReloadError"))

    await eventually(reported, what="the reload error to show")
    status = await lockd.status()
    assert status["policy"]["name"] == "test" and status["policy"]["maxConcurrent"] == 2
    assert len(status["policy"]["lastReloadError"]) < 400
    text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    assert "policy reload FAILED, the last good policy stays" in text
    # The same content as the policy in force: the stale error clears although nothing changed.
    lockd.policy_path.write_text(good)

    async def cleared() -> bool:
        return "lastReloadError" not in (await lockd.status())["policy"]

    await eventually(cleared, what="the stale reload error to clear")
    assert lockd_app.POLICY in lockd.app


async def _is_queued(lockd, names: list[str]) -> bool:
    return await _queue_names(lockd) == names
