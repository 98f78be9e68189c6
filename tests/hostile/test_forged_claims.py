"""Attack: forged AdmissionReviews claiming evict mode's places. Admission takes no credentials (the API
server presents none by default), so any pod that reaches the controller's TLS port can post a made-up
review to `/mutate/pods`; in evict mode a review let through claims its pod's place in the group, and that
claim, unbounded, would count as starting for a minute (RESERVATION_SECONDS), holding the real pods created
next.

The bound: a claim admission took lapses unless the pod it names (by the ticket the answer put on it)
shows in the controller's pod watch within `--claim-confirm-timeout` (here 2 s; default 5 s), counted in
`stagger_controller_claims_lapsed_total` and `/status`; its place is the group's again at once, so the
real pod held meanwhile is released (evicted, its owner's replacement let through) within about that
timeout, whether the flood goes on (held pods go first: the forged reviews are then refused places) or
has just ended. Admission keeps answering: 100 forged reviews a second, each answered 200 well within the
API server's webhook timeout (2 s, failurePolicy Fail here, so a late answer would fail the real
creates), while real pods are created through the API emulator. Dry runs claim nothing (the webhook
declares NoneOnDryRun, so the API server sends them too).

The real controller process (`python -m webhook`) on the API emulator over HTTP, the test playing the
pods' owner (a ReplicaSet: an evicted pod's replacement is created by the test)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sim.emulator.server import ApiServer
from tests.emulator.webhook_server import configuration, hook
from tests.groups_api.controller import PODS, WEBHOOKS, Api, Controller, running_controller
from tests.webhook.reviews import NAMES, owned

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

CONFIRM = 2.0  # --claim-confirm-timeout
WEBHOOK_TIMEOUT = 2.0  # the API server's timeoutSeconds for the webhook
RATE = 100  # forged reviews a second
# Held no longer than the forged claim's confirm window, plus the eviction's round trip (generous: the
# machine is shared); without the rule the hold lasted RESERVATION_SECONDS (60 s).
RELEASED_WITHIN = CONFIRM + 6.0
POLICY = """\
staggeringPolicies:
- name: one-at-a-time
  labelSelector: {matchLabels: {app: web}}
  pacer: {maxConcurrent: {value: 1}}
  mode: evict
"""


def held(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(NAMES.staggered_label) == "1"


def ticket(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(NAMES.ticket_annotation)


@dataclass
class Forged:
    """What the forger saw: each answer's status (or error), seconds and whether it let its pod through."""

    answers: list[tuple[int | str, float, bool]]

    def check(self) -> None:
        """Every review answered 200, within the API server's webhook timeout; some let through."""
        assert self.answers, "no forged review answered"
        codes = Counter(status for status, _, _ in self.answers)
        assert set(codes) == {200} and self.slowest < WEBHOOK_TIMEOUT, (codes, self.slowest)
        assert any(through for _, _, through in self.answers)  # the forged reviews did claim places

    @property
    def slowest(self) -> float:
        return max(seconds for _, seconds, _ in self.answers)


async def forge(controller: Controller, *, seconds: float) -> Forged:
    """The forger (tests.hostile.forger) as its own process, RATE reviews a second for `seconds`."""
    ca = controller.certs.folder.parent / "forger-ca.pem"
    controller.certs.ca.cert_pem.write_to_path(str(ca))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.hostile.forger",
        controller.process.url + "/mutate/pods",
        "--ca",
        str(ca),
        "--rate",
        str(RATE),
        "--seconds",
        str(seconds),
        "--timeout",
        "10",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=seconds + 30)
    assert process.returncode == 0, out
    return Forged(answers=[tuple(answer) for answer in json.loads(out)["answers"]])


async def metric(controller: Controller, name: str) -> float:
    async with controller.session.get(controller.process.probe_url + "/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


async def create(api: Api, obj: dict[str, Any], *, dry_run: bool = False) -> tuple[dict[str, Any], float]:
    """Create the pod through the emulator (its webhook call included): the pod and how long it took."""
    began = time.monotonic()
    path = PODS.format(namespace="default") + ("?dryRun=All" if dry_run else "")
    status, created = await api.call("POST", path, obj)
    assert status in (200, 201), created.get("message", created)
    return dict(created), time.monotonic() - began


async def until_gone(api: Api, name: str, *, within: float) -> float:
    """Seconds until the pod is gone (evicted); fails after `within`."""
    began = time.monotonic()
    while True:
        status, _ = await api.call("GET", PODS.format(namespace="default") + f"/{name}")
        if status == 404:
            return time.monotonic() - began
        assert time.monotonic() - began < within, f"{name} still held after {within:g}s"
        await asyncio.sleep(0.05)


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[tuple[Api, Controller]]:
    async with (
        ApiServer() as server,
        running_controller(
            server=server,
            tmp_path=tmp_path,
            policies=POLICY,
            register=False,
            extra=("--no-leader-elect", "--claim-confirm-timeout", f"{CONFIRM:g}s"),
        ) as controller,
    ):
        api = Api(server, controller.session)
        hooked = configuration(
            "stagger",
            hook(
                "pods.stagger.example.com",
                {"url": f"{controller.process.url}/mutate/pods", "caBundle": controller.certs.ca_bundle},
                objectSelector={"matchLabels": {NAMES.enable_label: "1"}},
                failurePolicy="Fail",  # a late or failed answer fails the real create
                timeoutSeconds=int(WEBHOOK_TIMEOUT),
                sideEffects="NoneOnDryRun",  # as the chart declares it
                reinvocationPolicy="IfNeeded",
            ),
        )
        status, body = await api.call("POST", WEBHOOKS, hooked)
        assert status == 201, body
        yield api, controller


async def test_forged_claims_lapse_and_hold_no_real_pod(leader: tuple[Api, Controller]) -> None:
    api, controller = leader
    # A dry run goes through the webhook and claims nothing.
    dry, _ = await create(api, owned("web-dry", "web"), dry_run=True)
    assert not held(dry) and ticket(dry) is None
    assert (await controller.status())["groups"]["reservations"]["count"] == 0

    # During the flood: a real pod created while a forged claim fills the group's one place is held, and
    # released once that claim lapses, though the flood goes on.
    flooding = asyncio.create_task(forge(controller, seconds=8.0))
    section = await controller.until(lambda groups: groups["reservations"]["count"] >= 1, within=5.0)
    assert section["reservations"]["items"][0]["kind"] == "admitted"
    assert section["reservations"]["confirmTimeoutSeconds"] == CONFIRM
    first, took = await create(api, owned("web-a", "web"))
    assert held(first) and took < WEBHOOK_TIMEOUT
    released = await until_gone(api, "web-a", within=RELEASED_WITHIN)
    # Its owner's replacement goes through against the reservation the eviction left, flood or not.
    replacement, took = await create(api, owned("web-b", "web"))
    assert not held(replacement) and ticket(replacement) and took < WEBHOOK_TIMEOUT
    flood = await flooding
    flood.check()
    section = await controller.until(lambda groups: groups["reservations"]["lapsedUnconfirmed"] >= 1)
    lapsed = await metric(controller, "stagger_controller_claims_lapsed_total")
    assert lapsed == section["reservations"]["lapsedUnconfirmed"] >= 1
    # The replacement showed in the watch: its claim was confirmed, not lapsed.
    assert all(item["id"] != ticket(replacement) for item in section["reservations"]["items"])

    # Just after a flood: the last forged claim holds a real pod created next for its window at most.
    await api.make_ready("web-b")
    await controller.until(lambda groups: groups["groups"][0]["starting"] == 0)
    short = await forge(controller, seconds=1.0)
    short.check()
    after, _ = await create(api, owned("api-a", "api"))
    assert held(after)
    released_after = await until_gone(api, "api-a", within=RELEASED_WITHIN)
    await controller.until(lambda groups: groups["reservations"]["lapsedUnconfirmed"] > lapsed)
    print(
        f"forged: {len(flood.answers) + len(short.answers)} reviews, slowest answer "
        f"{max(flood.slowest, short.slowest) * 1000:.0f} ms; real pods held {released:.2f}s (during the "
        f"flood) and {released_after:.2f}s (after it) with a {CONFIRM:g}s confirm timeout"
    )
