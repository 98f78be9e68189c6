"""Threats of docs/SECURITY.md that no other test showed, each checked where it is decided:

- a malformed request whose broken header line carries a token: the process's log line and its 400 name
  the parser's error only, never the bytes (`stagger.serving`, which lockd and the controller serve
  through);
- a pod that writes a `<prefix>/granted-at` annotation of its own (what a restarted lockd rebuilds its slots
  from), dated far in the future: the slot it gets after the restart still ends `holdTimeout` from then;
- a team's pod that claims another team's group with a `<prefix>/group-key` annotation of its own: when a
  staggering policy matches the pod, admission replaces the claim with the pod's real groups; when none
  does, admission leaves the annotation, and the controller, which reads every pod with its policies,
  drops a claim no policy of the file backs."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
from typing import Any

import jsonpatch
import pytest
from aiohttp import web

from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.pods import slots_to_rebuild
from lockd.service import LockService
from stagger import framing, throttles
from stagger.groupbook import record_from_pod
from stagger.names import Names
from stagger.policy import ExponentialPacer, MaxConcurrent, NodePolicy, StaggeringPolicy, ThrottleConfig
from stagger.selectors import LabelSelector
from stagger.serving import make_runner
from webhook import admission
from webhook.admission import InjectSettings

NAMES = Names()
SETTINGS = InjectSettings(image="registry.example/stagger:0.1.0", lockd_port=9400, max_wait=600.0)
TEAM_A = StaggeringPolicy(
    name="team-a",
    label_selector=LabelSelector.from_labels({"team": "a"}),
    pacer=ExponentialPacer(min_initial=1, multiplier=2, max_stagger=4),
)
TEAM_B = StaggeringPolicy(
    name="team-b",
    label_selector=LabelSelector.from_labels({"team": "b"}),
    pacer=ExponentialPacer(min_initial=1, multiplier=2, max_stagger=4),
)
CLAIM = json.dumps({"team-a": ""}, separators=(",", ":"))
"""What admission writes for a pod of team A's group (the policy has no grouping expression)."""


async def _send(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), timeout=10)
    finally:
        writer.close()


async def test_a_malformed_header_carrying_a_token_is_neither_logged_nor_echoed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    token = secrets.token_hex(24)
    runner = make_runner(
        web.Application(),
        bounds=framing.Bounds(request_timeout=5.0, max_body=1024),
        shutdown_timeout=1.0,
        access_log=None,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = int(runner.addresses[0][1])
        answers = []
        # The forms aiohttp's parsers quote: a bad header name, a bad character in a value, a line too long.
        for line in (
            f"Authorization : Bearer {token}",
            f"Authorization: Bearer {token}\x00",
            f"X-Stagger-Release-Token {token}",
        ):
            raw = f"DELETE /v1/lock HTTP/1.1\r\nHost: x\r\n{line}\r\n\r\n".encode()
            answers.append(await _send(port, raw))
        # A head longer than the door reads is refused there, before any parser quotes it.
        raw = f"DELETE /v1/lock HTTP/1.1\r\nHost: x\r\nX-Stagger-Release-Token: {token}{'0' * 9000}\r\n\r\n"
        too_long = await _send(port, raw.encode())
    finally:
        await runner.cleanup()
    assert too_long.split(b"\r\n", 1)[0].endswith(b" 431 Request Header Fields Too Large"), too_long
    assert token[:16].encode() not in too_long
    for answer in answers:
        assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer
        assert b'"error": "malformed HTTP request' in answer
        assert token[:16].encode() not in answer and token[-16:].encode() not in answer
    assert caplog.text.count("malformed HTTP request from") == len(answers)
    assert token[:16] not in caplog.text and token[-16:] not in caplog.text


def _admitted(pod: dict[str, Any]) -> dict[str, Any]:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "object": pod,
        },
    }
    status, body = admission.review(review, policies=[TEAM_A, TEAM_B], names=NAMES, settings=SETTINGS)
    answer: dict[str, Any] = dict(body)
    assert status == 200, answer
    response: dict[str, Any] = dict(answer["response"])
    assert response["allowed"] is True
    if "patch" not in response:
        return pod
    after = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    # What the API server then adds.
    after["metadata"].update(uid="uid-1", creationTimestamp="2026-11-24T00:00:00Z")
    return dict(after)


def _claiming_pod(labels: dict[str, str]) -> dict[str, Any]:
    """A pod of another namespace that says it is in team A's group."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "intruder",
            "namespace": "team-c",
            "labels": {NAMES.enable_label: "1", **labels},
            "annotations": {NAMES.group_key_annotation: CLAIM},
        },
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
    }


def test_a_pod_in_a_policy_gets_its_real_groups_not_the_ones_it_claims() -> None:
    record = record_from_pod(_admitted(_claiming_pod({"team": "b"})), names=NAMES)
    assert record is not None
    assert set(record.pacer_groups) == {("team-b", "")}


def test_a_pod_in_no_policy_cannot_claim_a_group() -> None:
    # The controller reads pods with its policies: a claim no policy backs is dropped.
    policies = {p.name: p for p in (TEAM_A, TEAM_B)}
    record = record_from_pod(_admitted(_claiming_pod({"team": "c"})), names=NAMES, policies=policies)
    assert record is None or ("team-a", "") not in record.pacer_groups


def test_a_forged_granted_at_in_the_future_holds_a_rebuilt_slot_no_longer_than_hold_timeout() -> None:
    hold_timeout = 120.0
    node_policy = NodePolicy(
        name="one",
        throttle=ThrottleConfig(max_concurrent=MaxConcurrent(value=1)),
        hold_timeout=hold_timeout,
    )
    now, wall = 1000.0, 1_800_000_000.0
    service = LockService(
        active=ActivePolicy(node_policy, "test", "test"),
        cores=1,
        metrics=Metrics(),
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
        clock=lambda: now,
        wall=lambda: wall,
    )
    forged = {
        "metadata": {
            "namespace": "team-c",
            "name": "squatter",
            "uid": "uid-1",
            # Ten years from now.
            "annotations": {NAMES.granted_at_annotation: "2036-11-24T00:00:00Z"},
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": "Pending"},
    }
    held = slots_to_rebuild([forged], names=NAMES)
    assert [slot.name for slot in held] == ["squatter"]
    service.restore(held)
    slot = service.ledger.slots[("team-c", "squatter")]
    assert slot.expires_at <= now + hold_timeout
