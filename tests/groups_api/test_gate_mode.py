"""`gate` mode on the API emulator: admission adds the `<prefix>/pacing` scheduling gate, and the leader's
gate reconciler removes it from the oldest held pods as the pacer allows (exponential 4/4/16), recording
`granted-at` and taking the `staggered` label off in the same guarded JSON patch.

Covers: the four oldest are released at once and the others stay gated; two pods turning Ready release the
rest (allowance 8); `kubectl get pods -l <prefix>/staggered=1` (a label selector) lists exactly the pods
still held; a pod whose gate list changed by hand keeps its other gates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.groups_api.controller import PODS, Api, Controller, controller_on_emulator
from tests.webhook.reviews import NAMES, enabled, image_policy, pod

pytestmark = pytest.mark.e2e


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Api, Controller]]:
    async with controller_on_emulator(tmp_path=tmp_path, policies=image_policy("gate")) as setup:
        yield setup


def _gated(found: dict[str, Any]) -> bool:
    return any(g["name"] == NAMES.scheduling_gate for g in found["spec"].get("schedulingGates") or [])


async def _pods(api: Api) -> dict[str, dict[str, Any]]:
    status, listed = await api.call("GET", PODS.format(namespace="default"))
    assert status == 200
    return {item["metadata"]["name"]: item for item in listed["items"]}


async def _until_gated(api: Api, want: set[str], *, within: float = 20.0) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + within
    while True:
        pods = await _pods(api)
        gated = {name for name, found in pods.items() if _gated(found)}
        if gated == want:
            return pods
        assert time.monotonic() < deadline, f"gated {sorted(gated)}, want {sorted(want)}"
        await asyncio.sleep(0.05)


async def test_gates_come_off_the_oldest_as_the_pacer_allows(setup: tuple[Api, Controller]) -> None:
    api, _controller = setup
    names = [f"web-{i}" for i in range(6)]
    for name in names:
        created = await api.create_pod(pod(name, labels=enabled(staggerimages="1")))
        assert _gated(created)
    pods = await _until_gated(api, set(names[4:]))
    for name in names[:4]:
        metadata = pods[name]["metadata"]
        assert NAMES.granted_at_annotation in metadata["annotations"]
        assert NAMES.staggered_label not in metadata["labels"]
        assert "schedulingGates" not in pods[name]["spec"]
    status, held = await api.call(
        "GET", PODS.format(namespace="default") + f"?labelSelector={NAMES.staggered_label}%3D1"
    )
    assert status == 200
    assert sorted(item["metadata"]["name"] for item in held["items"]) == names[4:]
    await api.make_ready(names[0])
    await api.make_ready(names[1])
    await _until_gated(api, set())


async def test_other_gates_stay_on(setup: tuple[Api, Controller]) -> None:
    api, _controller = setup
    obj = pod("web-x", labels=enabled(staggerimages="1"))
    obj["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    await api.create_pod(obj)
    deadline = time.monotonic() + 20
    while True:
        found = await api.get_pod("web-x")
        if not _gated(found):
            break
        assert time.monotonic() < deadline, found["spec"]
        await asyncio.sleep(0.05)
    assert found["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert NAMES.granted_at_annotation in found["metadata"]["annotations"]
