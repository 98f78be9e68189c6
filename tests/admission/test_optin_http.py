"""The opt-in routes over HTTPS, on the real controller process (`python -m webhook`, as tests/webhook/
test_http.py runs it): `POST /mutate/pods/namespace` labels and injects a pod that has not opted out;
`POST /mutate/pods/scheduler` does so for a pod naming one of STAGGER_SCHEDULER_NAMES, gives it the
default scheduler with a warning, and leaves any other pod alone (the path is not trusted), and with no
names configured opts nobody in; a pod matching two routes is mutated once; each route is counted apart in
stagger_controller_requests_total, and the configured names are logged at start."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.webhook.process import Certs, Webhook, running_webhook, tls_args
from tests.webhook.reviews import ENABLE, enabled, image_policy, pod, review

pytestmark = pytest.mark.slow

REPLACED = "stagger: schedulerName straggler replaced by default-scheduler"


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs.write(tmp_path / "tls")


def start(certs: Certs, tmp_path: Path, *, env: dict[str, str]) -> Any:
    policies = tmp_path / "policies.yaml"
    policies.write_text(image_policy("lock"))
    return running_webhook(*tls_args(certs), "--policies", str(policies), env=env)


@pytest.fixture
def hook(certs: Certs, tmp_path: Path) -> Iterator[Webhook]:
    with start(certs, tmp_path, env={"STAGGER_SCHEDULER_NAMES": "straggler,peer"}) as running:
        yield running


@pytest.fixture
async def session(certs: Certs) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=certs.client_context())) as client:
        yield client


async def admit(
    session: aiohttp.ClientSession, hook: Webhook, path: str, obj: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod as the answer's patch leaves it, the AdmissionReview response)."""
    async with session.post(hook.url + path, json=review(obj)) as answer:
        assert answer.status == 200, await answer.text()
        response = (await answer.json())["response"]
    assert response["allowed"] is True
    if "patch" not in response:
        return obj, response
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops), response


def init_names(obj: dict[str, Any]) -> list[str]:
    return [c["name"] for c in obj["spec"].get("initContainers", [])]


def with_scheduler(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["spec"]["schedulerName"] = name
    return obj


@pytest.mark.parametrize(
    ("path", "obj", "label", "scheduler", "warnings"),
    [
        pytest.param("/mutate/pods/namespace", pod(labels={"app": "web"}), "1", None, [], id="namespace"),
        pytest.param(
            "/mutate/pods/namespace", pod(labels={ENABLE: "0"}), "0", None, [], id="namespace:opted-out"
        ),
        pytest.param(
            "/mutate/pods/scheduler",
            with_scheduler(pod(labels={"staggerimages": "1"}), "straggler"),
            "1",
            "default-scheduler",
            [REPLACED],
            id="scheduler",
        ),
        pytest.param(
            "/mutate/pods/scheduler",
            with_scheduler(pod(labels={"staggerimages": "1"}), "other"),
            None,
            "other",
            [],
            id="scheduler:other",
        ),
        pytest.param(
            "/mutate/pods/scheduler", pod(labels=enabled()), "1", None, [], id="scheduler:none-named"
        ),
        pytest.param("/mutate/pods", pod(labels={"app": "web"}), None, None, [], id="label:not-labelled"),
    ],
)
async def test_each_route_over_https(
    hook: Webhook,
    session: aiohttp.ClientSession,
    path: str,
    obj: dict[str, Any],
    label: str | None,
    scheduler: str | None,
    warnings: list[str],
) -> None:
    after, response = await admit(session, hook, path, obj)
    assert after["metadata"]["labels"].get(ENABLE) == label
    opted_here = label == "1" and obj["metadata"]["labels"].get(ENABLE) != "1"
    assert init_names(after) == (["stagger-wait"] if opted_here else [])
    assert after["spec"].get("schedulerName") == scheduler
    assert response.get("warnings", []) == warnings


async def test_a_pod_of_two_routes_is_mutated_once_and_routes_are_counted_apart(
    hook: Webhook, session: aiohttp.ClientSession
) -> None:
    # Labelled, in an opted-in namespace, naming a configured scheduler: the three webhooks in the
    # chart's order.
    obj = with_scheduler(pod(labels=enabled(staggerimages="1")), "peer")
    after, _ = await admit(session, hook, "/mutate/pods", obj)
    after, namespaced = await admit(session, hook, "/mutate/pods/namespace", after)
    assert "patch" not in namespaced
    after, scheduled = await admit(session, hook, "/mutate/pods/scheduler", after)
    assert init_names(after) == ["stagger-wait"]
    assert after["spec"]["schedulerName"] == "default-scheduler"
    assert scheduled["warnings"] == ["stagger: schedulerName peer replaced by default-scheduler"]
    # Reinvoked: nothing more.
    for path in ("/mutate/pods", "/mutate/pods/namespace", "/mutate/pods/scheduler"):
        assert "patch" not in (await admit(session, hook, path, after))[1]
    async with aiohttp.ClientSession() as plain, plain.get(f"{hook.probe_url}/metrics") as answer:
        text = await answer.text()
    counted = {
        sample.labels["route"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "stagger_controller_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["code"] == "2xx"
    }
    assert counted == {"/mutate/pods": 2, "/mutate/pods/namespace": 2, "/mutate/pods/scheduler": 2}
    hook.wait_for_line(r"pods of the schedulers straggler, peer are opted in at /mutate/pods/scheduler")


async def test_without_scheduler_names_the_scheduler_route_opts_nobody_in(
    certs: Certs, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    with start(certs, tmp_path, env={}) as bare:
        obj = with_scheduler(pod(labels={"staggerimages": "1"}), "straggler")
        after, response = await admit(session, bare, "/mutate/pods/scheduler", obj)
        assert after == obj and set(response) == {"uid", "allowed"}
        assert "opted in at /mutate/pods/scheduler" not in bare.log
