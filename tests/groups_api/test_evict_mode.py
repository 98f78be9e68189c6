"""`evict` mode through the controller process on the API emulator, pods created over HTTP as a
ReplicaSet would (an ownerReference with controller: true; no simulated kubelet, the tests play the
owner): admission lets the first pod through with a ticket and holds the next (nodeSelector, labels,
annotations); when the first turns Ready the leader evicts the held pod (gone from the API, a
StaggerReleased Event, the evictions metric, an owner's reservation in `/status`) and the owner's
replacement is let through against that reservation, carrying the first hold time, while another owner's
pod is held. A replica that does not lead asks the leader (`POST /v1/groups/admit`, token and TLS), and
holds the pod when it has no leader to ask. The admit API refuses without the token and names a bad
field. The jobs webhook adds the DisruptionTarget Ignore rule to an enabled Job the emulator stores. An
eviction refused by a disruption budget (429) frees the place, backs off and is retried until it works."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sim.emulator.server import ApiServer
from stagger.timestamps import parse_rfc3339
from tests.emulator.webhook_server import configuration, hook
from tests.groups_api.controller import (
    PODS,
    WEBHOOKS,
    Api,
    Controller,
    controller_on_emulator,
    running_controller,
)
from tests.webhook.reviews import NAMES, enabled, owned

pytestmark = pytest.mark.e2e

POLICY = """\
staggeringPolicies:
- name: one-at-a-time
  labelSelector: {matchLabels: {app: web}}
  pacer: {maxConcurrent: {value: 1}}
  mode: evict
"""
TIMINGS = ("--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "0.5s")


def notes(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def held(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(NAMES.staggered_label) == "1"


async def until_gone(api: Api, name: str, *, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while True:
        status, _ = await api.call("GET", PODS.format(namespace="default") + f"/{name}")
        if status == 404:
            return
        assert time.monotonic() < deadline, f"{name} still there"
        await asyncio.sleep(0.05)


async def metric(controller: Controller, name: str) -> float:
    async with controller.session.get(controller.process.probe_url + "/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[tuple[Api, Controller]]:
    async with controller_on_emulator(
        tmp_path=tmp_path, policies=POLICY, extra=("--no-leader-elect",)
    ) as setup:
        yield setup


async def test_held_evicted_and_replaced_against_the_owner_s_reservation(
    leader: tuple[Api, Controller],
) -> None:
    api, controller = leader
    first = await api.create_pod(owned("web-a", "web"))
    assert not held(first) and notes(first)[NAMES.ticket_annotation]
    assert NAMES.granted_at_annotation in notes(first)
    await controller.until(lambda groups: groups["pods"] == 1)

    second = await api.create_pod(owned("web-b", "web"))
    assert held(second)
    assert second["spec"]["nodeSelector"] == {NAMES.hold_node_label: "true"}
    assert notes(second)[NAMES.hold_annotation] == "nodeSelector"
    held_since = parse_rfc3339(notes(second)[NAMES.held_since_annotation])
    assert held_since is not None
    await controller.until(lambda groups: groups["pods"] == 2)
    assert await metric(controller, 'stagger_controller_evictions_total{result="evicted"}') == 0

    await api.make_ready("web-a")
    await until_gone(api, "web-b")
    section = await controller.until(lambda groups: groups["reservations"]["count"] == 1)
    (reservation,) = section["reservations"]["items"]
    assert reservation["kind"] == "owner" and reservation["owner"] == "uid-web"
    assert section["evictions"]["evicted"] == 1
    assert await metric(controller, 'stagger_controller_evictions_total{result="evicted"}') == 1

    # Another owner's new pod: no room (the reservation counts as starting), held.
    other = await api.create_pod(owned("api-a", "api"))
    assert held(other)
    # The owner's replacement goes through against its reservation, with the chain's first hold.
    replacement = await api.create_pod(owned("web-c", "web"))
    assert not held(replacement)
    assert notes(replacement)[NAMES.ticket_annotation] == reservation["id"]
    assert parse_rfc3339(notes(replacement)[NAMES.held_since_annotation]) == pytest.approx(
        held_since, abs=0.01
    )
    await controller.until(lambda groups: groups["reservations"]["count"] == 0 and groups["pods"] == 3)
    assert (
        await metric(
            controller, 'stagger_controller_evict_admissions_total{basis="reserved",outcome="admit"}'
        )
        == 1
    )

    status, events = await api.call("GET", "/api/v1/namespaces/default/events")
    assert status == 200
    released = [
        e
        for e in events["items"]
        if e["reason"] == "StaggerReleased" and e["involvedObject"]["name"] == "web-b"
    ]
    assert released and "evicted" in released[0]["message"]


async def test_a_replica_that_does_not_lead_asks_the_leader(tmp_path: Path) -> None:
    async with (
        ApiServer() as server,
        running_controller(
            server=server, tmp_path=tmp_path / "a", policies=POLICY, extra=TIMINGS, register=False
        ) as first,
    ):
        ca = tmp_path / "leader-ca.crt"
        first.certs.ca.cert_pem.write_to_path(str(ca))
        async with (
            running_controller(
                server=server,
                tmp_path=tmp_path / "b",
                policies=POLICY,
                extra=(*TIMINGS, "--leader-url", first.process.url, "--leader-ca-file", str(ca)),
                granting=False,
            ) as follower,
            running_controller(
                server=server,
                tmp_path=tmp_path / "c",
                policies=POLICY,
                extra=TIMINGS,
                register=False,
                granting=False,
            ) as alone,
        ):
            api = Api(server, follower.session)
            # Admission goes to the follower (its configuration is the one registered): it asks the leader.
            admitted = await api.create_pod(owned("web-a", "web"))
            assert not held(admitted) and notes(admitted)[NAMES.ticket_annotation]
            await first.until(lambda groups: groups["pods"] == 1 and groups["reservations"]["count"] == 0)
            again = await api.create_pod(owned("web-b", "web"))
            assert held(again)  # the leader said no room
            assert await metric(follower, 'stagger_controller_evict_admissions_total{basis="forwarded"') == 2

            # The admit API itself: the token, the fields, only the leader answers.
            body = {"pacerGroups": [["one-at-a-time", ""]], "owner": "x", "dryRun": True}
            assert (await first.post("/v1/groups/admit", body, token="wrong"))[0] == 401
            status, answer = await first.post("/v1/groups/admit", {**body, "pacerGroups": [["x"]]})
            assert status == 400 and "pacerGroups[0]" in answer["error"]
            status, answer = await first.post("/v1/groups/admit", body)
            assert status == 200 and answer["admit"] is False and "ticket" not in answer
            status, answer = await alone.post("/v1/groups/admit", body)
            assert status == 503 and answer["leader"]

            # A replica without --leader-url holds whatever it is asked about, and says why in its metrics.
            status, _ = await api.call("DELETE", WEBHOOKS + "/stagger")
            assert status == 200
            await alone_hook(api, alone)
            lonely = await api.create_pod(owned("web-z", "zed"))
            assert held(lonely)
            assert (
                await metric(
                    alone, 'stagger_controller_evict_admissions_total{basis="unanswered",outcome="hold"}'
                )
                == 1
            )


async def alone_hook(api: Api, controller: Controller) -> None:
    hooked = configuration(
        "stagger-alone",
        hook(
            "pods.stagger.example.com",
            {"url": f"{controller.process.url}/mutate/pods", "caBundle": controller.certs.ca_bundle},
            objectSelector={"matchLabels": {NAMES.enable_label: "1"}},
            failurePolicy="Ignore",
            timeoutSeconds=5,
        ),
    )
    status, body = await api.call("POST", WEBHOOKS, hooked)
    assert status == 201, body


async def test_the_jobs_webhook_adds_the_ignore_rule(leader: tuple[Api, Controller]) -> None:
    api, controller = leader
    jobs_hook = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "stagger-jobs"},
        "webhooks": [
            {
                "name": "jobs.stagger.example.com",
                "clientConfig": {
                    "url": f"{controller.process.url}/mutate/jobs",
                    "caBundle": controller.certs.ca_bundle,
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["jobs"],
                    }
                ],
                "objectSelector": {"matchLabels": {NAMES.enable_label: "1"}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }
    status, body = await api.call("POST", WEBHOOKS, jobs_hook)
    assert status == 201, body
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crunch", "labels": enabled()},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": enabled(app="web")},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]},
            },
        },
    }
    status, created = await api.call("POST", "/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 201, created["message"]
    assert created["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],  # defaulted by the API server
    }
    assert created["spec"]["template"]["metadata"]["annotations"][NAMES.evictable_annotation] == "1"


async def test_a_refused_eviction_backs_off_and_is_retried(tmp_path: Path) -> None:
    async with (
        ApiServer() as server,
        running_controller(
            server=server,
            tmp_path=tmp_path,
            policies=POLICY,
            extra=("--no-leader-elect", "--eviction-backoff", "0.2s"),
        ) as controller,
    ):
        api = Api(server, controller.session)
        await api.create_pod(owned("web-a", "web"))
        assert held(await api.create_pod(owned("web-b", "web")))
        # A held pod that runs (as a stub pod could, had its init container been changed by hand) is
        # guarded by its disruption budget: the Eviction API answers 429.
        status, body = await api.call(
            "PATCH",
            PODS.format(namespace="default") + "/web-b/status",
            {"status": {"phase": "Running"}},
            content_type="application/merge-patch+json",
        )
        assert status == 200, body
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 5, "selector": {"matchLabels": {"app": "web"}}},
        }
        status, body = await api.call(
            "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", budget
        )
        assert status == 201, body
        await api.make_ready("web-a")
        section = await controller.until(lambda groups: groups["evictions"]["throttled"] >= 2)
        assert section["evictions"]["evicted"] == 0 and section["reservations"]["count"] == 0
        status, _ = await api.call("GET", PODS.format(namespace="default") + "/web-b")
        assert status == 200
        status, body = await api.call("DELETE", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
        assert status == 200, body
        await until_gone(api, "web-b")
        section = await controller.until(lambda groups: groups["evictions"]["evicted"] == 1)
        assert await metric(controller, 'stagger_controller_evictions_total{result="throttled"}') >= 2
