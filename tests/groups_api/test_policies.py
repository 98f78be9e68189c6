"""The group pacer's rules through the real controller on the API emulator (lock mode): a bypassed pod is
counted in its group but never held; a pod in two policies needs both pacers; `maxBlockedDuration` lets a
held pod through regardless; a pod without the enable label is not in any group. (Pods created in the
same second are ordered by name: creationTimestamp has whole seconds.) And the Events people
see, for pods held off their nodes (gate mode here): `StaggerHeld` when a pod is first held,
`StaggerReleased` with the group's counts when its grant shows on it; none for the pods a starting
controller finds held (announced when they were held, and at 150,000 pods a restart would otherwise queue
an Event for every one); none from the controller in lock mode, where lockd announces the wait."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sim.emulator.server import ApiServer
from tests.groups_api.controller import Api, Controller, running_controller
from tests.groups_api.test_evict_startup import slow_lists
from tests.webhook.reviews import NAMES, enabled, pod

pytestmark = pytest.mark.e2e

POLICIES = """\
staggeringPolicies:
- name: web
  labelSelector: {matchLabels: {app: web}}
  bypassLabelSelector: {matchLabels: {urgent: "yes"}}
  pacer: {maxConcurrent: {value: 1}}
- name: team
  labelSelector: {matchLabels: {team: a}}
  pacer: {maxConcurrent: {value: 2}}
- name: batch
  labelSelector: {matchLabels: {app: batch}}
  pacer: {maxConcurrent: {value: 1}}
  maxBlockedDuration: 2s
"""


async def _started(api: Api, controller: Controller, name: str) -> dict[str, Any]:
    """Ask for a grant; when granted, record it on the pod as lockd would."""
    answer = await controller.grant(name)
    if answer["granted"]:
        await api.record_grant(name)
    return answer


async def test_pacer_rules_and_events(tmp_path: Path) -> None:
    async with (
        ApiServer() as server,
        running_controller(server=server, tmp_path=tmp_path, policies=POLICIES) as c,
    ):
        api = Api(server, c.session)
        # Bypassed: never held (no staggered label), but it takes the web group's one place.
        urgent = await api.create_pod(pod("urgent", labels=enabled(app="web", urgent="yes")))
        assert NAMES.staggered_label not in urgent["metadata"]["labels"]
        await api.create_pod(pod("web-1", labels=enabled(app="web")))
        # Two policies: web (full, because of the bypassed pod) and team (room for 2).
        await api.create_pod(pod("web-2", labels=enabled(app="web", team="a")))
        await api.create_pod(pod("team-1", labels=enabled(team="a")))
        # Not enabled: never sent to admission, never in a group.
        plain = await api.create_pod(pod("plain", labels={"app": "web"}))
        assert "annotations" not in plain["metadata"]
        await c.until(lambda groups: groups["pods"] == 4)
        assert (await c.grant("web-1"))["granted"] is False  # the bypassed pod counts
        both = await c.grant("web-2")
        assert both["granted"] is False and "web" in both["reason"]  # team has room, web has not
        assert (await _started(api, c, "team-1"))["granted"] is True
        assert (await c.grant("plain"))["granted"] is False  # unknown to the controller: ask again
        rows = {row["policy"]: row for row in (await c.until(lambda g: len(g["groups"]) == 2))["groups"]}
        assert rows["web"]["starting"] == 1 and rows["web"]["held"] == 2
        # The bypassed pod turns Ready: web has room for the oldest held pod (web-1), then "web-2".
        await api.make_ready("urgent")
        await c.until(lambda groups: any(r["policy"] == "web" and r["ready"] == 1 for r in groups["groups"]))
        started = await _started(api, c, "web-1")
        assert started["granted"] is True, started
        assert (await c.grant("web-2"))["granted"] is False

        # maxBlockedDuration: held 2 s, then through regardless.
        await api.create_pod(pod("batch-1", labels=enabled(app="batch")))
        await api.create_pod(pod("batch-2", labels=enabled(app="batch")))
        await c.until(lambda groups: groups["pods"] == 6)
        assert (await _started(api, c, "batch-1"))["granted"] is True
        assert (await c.grant("batch-2"))["granted"] is False
        deadline = time.monotonic() + 10
        while not (answer := await c.grant("batch-2"))["granted"]:
            assert time.monotonic() < deadline, answer
            await asyncio.sleep(0.2)
        assert "maxBlockedDuration" in answer["reason"]

        # Events: in lock mode the pods wait on their nodes, where lockd writes StaggerWaiting and
        # StaggerGranted; the controller writes none (web-1 was held and released long before this).
        assert await _reasons(api, "web-1") == []


async def _reasons(api: Api, name: str) -> list[str]:
    _, events = await api.call(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )
    return [item["reason"] for item in events["items"]]


async def _until_reason(api: Api, name: str, reason: str) -> None:
    deadline = time.monotonic() + 10
    while reason not in await _reasons(api, name):
        assert time.monotonic() < deadline, await _reasons(api, name)
        await asyncio.sleep(0.1)


async def test_held_and_released_once_in_gate_mode_even_across_a_restart(tmp_path: Path) -> None:
    gate = POLICIES.replace(
        "  pacer: {maxConcurrent: {value: 1}}\n- name: team",
        "  pacer: {maxConcurrent: {value: 1}}\n  mode: gate\n- name: team",
    )
    assert gate != POLICIES
    async with ApiServer() as server, aiohttp.ClientSession() as session:
        api = Api(server, session)
        async with running_controller(server=server, tmp_path=tmp_path / "first", policies=gate):
            # The bypassed pod takes web's one place: web-0 is held.
            await api.create_pod(pod("urgent", labels=enabled(app="web", urgent="yes")))
            await api.create_pod(pod("web-0", labels=enabled(app="web")))
            await _until_reason(api, "web-0", "StaggerHeld")
        status, body = await api.call(
            "DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/stagger"
        )
        assert status == 200, body  # the next one registers its own
        # The next controller leads at once and finds web-0 held in its (slowed) list: it announces only
        # what changes after the list.
        async with (
            slow_lists(server.url, delay=1.0) as proxy,
            running_controller(
                server=server,
                tmp_path=tmp_path / "next",
                policies=gate,
                extra=("--no-leader-elect",),
                api_url=proxy.url,
            ) as c,
        ):
            await c.until(lambda groups: groups["pods"] == 2)
            await api.make_ready("urgent")
            await _until_reason(api, "web-0", "StaggerReleased")
        _, events = await api.call(
            "GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dweb-0"
        )
        assert [item["reason"] for item in events["items"]] == ["StaggerHeld", "StaggerReleased"]
        released = events["items"][1]["message"]
        assert released.startswith("released: web ") and "1 Ready" in released, released
