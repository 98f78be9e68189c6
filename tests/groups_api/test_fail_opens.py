"""Every fail-open counted and explained, through the real controller on the API emulator: a pod whose init
client said it could not reach lockd, one that lockd granted without the group pacer, and one that opted
in after admission (the webhook never saw it) are each marked once, get a Warning Event naming the cause,
and are counted in `stagger_controller_fail_opens_total{cause}` and summed by cause, node and group in
`/status`; a granted pod and a pod still starting are not."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sim.emulator.server import ApiServer
from stagger.contracts.failopen import format_outcome
from tests.groups_api.controller import PODS, Api, Controller, running_controller
from tests.metrics import by_label
from tests.webhook.reviews import ENABLE, NAMES, enabled, pod

pytestmark = pytest.mark.e2e

POLICIES = """\
staggeringPolicies:
- name: web
  labelSelector: {matchLabels: {app: web}}
  pacer: {maxConcurrent: {value: 5}}
"""
WHY = "proceeding without a start-up slot for default/lost: lockd could not be reached (fail-open)"


async def _patch(api: Api, name: str, patch: dict[str, Any], *, status: bool = False) -> None:
    path = PODS.format(namespace="default") + f"/{name}" + ("/status" if status else "")
    code, body = await api.call("PATCH", path, patch, content_type="application/merge-patch+json")
    assert code == 200, body


async def _started(api: Api, name: str, *, message: str | None) -> None:
    """What the kubelet reports once the init client (or, with `message` None, no init client) is done."""
    status: dict[str, Any] = {"phase": "Running"}
    if message is not None:
        terminated = {"exitCode": 0, "reason": "Completed", "message": message}
        status["initContainerStatuses"] = [{"name": "stagger-wait", "state": {"terminated": terminated}}]
    await _patch(api, name, {"status": status}, status=True)


def _on(node: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    created = pod(name, labels=labels)
    created["spec"]["nodeName"] = node
    return created


async def _fail_opens(controller: Controller, count: int, *, within: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        section = (await controller.status())["failOpens"]
        if section.get("pods") == count:
            return dict(section)
        assert time.monotonic() < deadline, f"/status never counted {count}: {section}"
        await asyncio.sleep(0.05)


async def test_each_fail_open_is_marked_counted_and_explained_once(tmp_path: Path) -> None:
    async with (
        ApiServer() as server,
        running_controller(server=server, tmp_path=tmp_path, policies=POLICIES) as controller,
    ):
        api = Api(server, controller.session)
        for name, node in (
            ("lost", "node-a"),
            ("fine", "node-a"),
            ("open", "node-b"),
            ("starting", "node-b"),
        ):
            created = await api.create_pod(_on(node, name, enabled(app="web")))
            assert created["spec"]["initContainers"][0]["name"] == "stagger-wait"  # admission injected it
        await _started(api, "lost", message=format_outcome(cause="lockdUnreachable", reason=WHY))
        await _started(api, "fine", message=format_outcome(cause=None))
        # lockd's grant without the group pacer; its init client was granted.
        await _patch(
            api,
            "open",
            {"metadata": {"annotations": {NAMES.failed_open_annotation: "groupPacerUnreachable"}}},
        )
        await _started(api, "open", message=format_outcome(cause=None))
        # Opted in after admission: the webhook never saw it, so no init client ran.
        await api.create_pod(_on("node-c", "late", {"app": "web"}))
        await _patch(api, "late", {"metadata": {"labels": {ENABLE: "1"}}})
        await _started(api, "late", message=None)

        section = await _fail_opens(controller, 3)
        assert section["byCause"] == {
            "groupPacerUnreachable": 1,
            "lockdUnreachable": 1,
            "webhookNotCalled": 1,
        }
        assert section["byNode"] == {"node-a": 1, "node-b": 1, "node-c": 1}
        assert section["byGroup"] == {"web": 2, "(no group)": 1}  # the late one was never grouped
        assert {(each["name"], each["cause"]) for each in section["recent"]} == {
            ("lost", "lockdUnreachable"),
            ("open", "groupPacerUnreachable"),
            ("late", "webhookNotCalled"),
        }
        for name, cause in (
            ("lost", "lockdUnreachable"),
            ("open", "groupPacerUnreachable"),
            ("late", "webhookNotCalled"),
        ):
            found = await api.get_pod(name)
            assert found["metadata"]["annotations"][NAMES.started_without_slot_annotation] == cause
        for name in ("fine", "starting"):
            found = await api.get_pod(name)
            assert NAMES.started_without_slot_annotation not in (found["metadata"].get("annotations") or {})

        # One Warning Event each, naming the cause; the init client's own line for the one that gave it.
        events = await _events(api, reason="StaggerStartedWithoutSlot", count=3)
        by_pod = {event["involvedObject"]["name"]: event for event in events}
        assert set(by_pod) == {"lost", "open", "late"}
        assert all(event["type"] == "Warning" for event in events)
        assert by_pod["lost"]["message"] == f"started without a start-up slot (lockdUnreachable): {WHY}"
        assert "(webhookNotCalled)" in by_pod["late"]["message"]

        async with controller.session.get(controller.process.probe_url + "/metrics") as response:
            page = await response.text()
        counted = by_label(page, "stagger_controller_fail_opens_total", "cause")
        assert (
            counted["lockdUnreachable"]
            == counted["groupPacerUnreachable"]
            == counted["webhookNotCalled"]
            == 1
        )
        assert counted["maxWait"] == 0
        now = by_label(page, "stagger_controller_pods_started_without_slot", "cause")
        assert sum(now.values()) == 3

        # A later change of a counted pod counts it no more: by the time a fail-open after those changes
        # is counted (the watch brings changes in order), there is no second Event for them.
        await _patch(api, "lost", {"metadata": {"labels": {"touched": "yes"}}})
        ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        await _patch(api, "late", {"status": ready}, status=True)
        await api.create_pod(_on("node-a", "waited", enabled(app="web")))
        await _started(api, "waited", message=format_outcome(cause="maxWait", reason="waited 10m"))
        assert (await _fail_opens(controller, 4))["byCause"]["maxWait"] == 1
        events = await _events(api, reason="StaggerStartedWithoutSlot", count=4)
        assert sorted(event["involvedObject"]["name"] for event in events) == [
            "late",
            "lost",
            "open",
            "waited",
        ]


async def _events(api: Api, *, reason: str, count: int, within: float = 10.0) -> list[dict[str, Any]]:
    """The Events of that reason once there are `count` (the recorder sends them in the background)."""
    deadline = time.monotonic() + within
    while True:
        code, body = await api.call("GET", "/api/v1/namespaces/default/events")
        assert code == 200, body
        found = [event for event in body["items"] if event.get("reason") == reason]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)
