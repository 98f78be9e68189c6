"""The lock API's contract (`stagger.contracts.lock`), written by one end and read by the other: lockd's
real server answers the init client's real request code (`fetch_lock`, over HTTP on loopback), whose
reader keeps every field of each answer that the client reads (200 with its release token, 423, 429).
The group pacer service's bodies are in test_group_bodies.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from initclient.client import Reply, Request, fetch_lock
from stagger.contracts.lock import RELEASE_TOKEN_HEADER, LockParams, LockReply
from tests.lockd import conftest as lockd_conftest
from tests.lockd.conftest import StartLockd

ONE_SLOT = """nodePolicies:
- name: one
  throttleConfig: {maxConcurrent: {value: 1}}
  maxQueue: 1
  maxWait: 90s
"""


@pytest.fixture
def start_lockd(aiohttp_client: Any, tmp_path: Path) -> StartLockd:
    """tests/lockd's fixture of the same name (lockd's real app and server over HTTP on loopback)."""
    return lockd_conftest.start_lockd.__wrapped__(aiohttp_client, tmp_path)  # type: ignore[no-any-return]


async def ask(url: str, name: str) -> Reply:
    """One ask with the init client's own request code and reader, as it runs in a pod."""
    params: LockParams = {"namespace": "shop", "name": name, "wait": "0"}
    request = Request(params=params, connect_timeout=2.0, timeout=5.0)

    def fetch() -> Reply:
        outcome = fetch_lock(lockd_url=url, request=request, wall_now=time.time())
        assert isinstance(outcome, Reply), outcome
        return outcome

    return await asyncio.to_thread(fetch)


def read_fields(raw: dict[str, Any]) -> LockReply:
    """The fields of a raw answer that the client's reply type names."""
    return {key: value for key, value in raw.items() if key in LockReply.__annotations__}  # type: ignore[return-value]


async def test_each_lock_answer_is_read_whole_by_the_init_client(start_lockd: StartLockd) -> None:
    lockd = await start_lockd(ONE_SLOT)
    url = str(lockd.client.make_url("")).rstrip("/")

    granted = await lockd.client.get("/v1/lock", params={"namespace": "shop", "name": "raw"})
    raw = await granted.json()
    assert granted.status == 200 and raw["releaseToken"] == granted.headers[RELEASE_TOKEN_HEADER]

    denied = await ask(url, "second")  # 423: the one slot is held
    full = await ask(url, "third")  # 429: the queue of 1 is full
    assert denied.status == 423 and full.status == 429
    raw_denied = await (
        await lockd.client.get("/v1/lock", params={"namespace": "shop", "name": "second"})
    ).json()
    raw_full = await (
        await lockd.client.get("/v1/lock", params={"namespace": "shop", "name": "third"})
    ).json()
    assert denied.body == read_fields(raw_denied), (denied.body, raw_denied)
    assert full.body == read_fields(raw_full), (full.body, raw_full)
    assert denied.body["maxWait"] == 90.0 and denied.body["position"] == 1

    released = await lockd.client.delete(
        "/v1/lock",
        params={"namespace": "shop", "name": "raw"},
        headers={RELEASE_TOKEN_HEADER: raw["releaseToken"]},
    )
    assert released.status == 200
    mine = await ask(url, "second")  # its turn now: a 200 with its release token
    assert mine.status == 200 and mine.body["granted"] is True and mine.body["releaseToken"]
