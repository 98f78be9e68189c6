"""End to end on the API emulator: a MutatingWebhookConfiguration points at the real controller process
(`clientConfig.url` with the trustme caBundle, objectSelector on the enable label, failurePolicy Ignore,
timeoutSeconds 2, reinvocationPolicy IfNeeded), and pods are created through the API.

An enabled pod is stored with the init client first and its group labels and annotations; a pod without
the enable label is never sent to the webhook; a reinvocation leaves an already injected pod alone; and
with the webhook hung or gone, pods are still created (failurePolicy Ignore), within the timeout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from sim.emulator.server import ApiServer
from tests.emulator.webhook_server import WebhookServer, configuration, hook, patch, webhook_server
from tests.webhook.process import Certs, Webhook, running_webhook, tls_args
from tests.webhook.reviews import ENABLE, NAMES, enabled, image_policy, pod

pytestmark = pytest.mark.e2e

PODS = "/api/v1/namespaces/{namespace}/pods"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
TIMEOUT_SECONDS = 2


class Api:
    def __init__(self, server: ApiServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, self.server.url + path, json=body, headers={"Authorization": "Bearer sim"}
        ) as response:
            return response.status, await response.json()

    async def create_pod(self, obj: dict[str, Any], namespace: str = "default") -> tuple[int, Any]:
        return await self.call("POST", PODS.format(namespace=namespace), obj)


def stagger_configuration(webhook: Webhook, certs: Certs) -> dict[str, Any]:
    """What the chart will register: the controller for pods carrying the enable label."""
    return configuration(
        "a-stagger",
        hook(
            "pods.stagger.example.com",
            {"url": f"{webhook.url}/mutate/pods", "caBundle": certs.ca_bundle},
            objectSelector={"matchLabels": {ENABLE: "1"}},
            failurePolicy="Ignore",
            timeoutSeconds=TIMEOUT_SECONDS,
            sideEffects="None",
            reinvocationPolicy="IfNeeded",
            matchPolicy="Equivalent",
        ),
    )


@pytest.fixture
def controller(certs: Certs, tmp_path: Path) -> Iterator[Webhook]:
    policies = tmp_path / "policies.yaml"
    policies.write_text(image_policy("gate"))
    with running_webhook(*tls_args(certs), "--policies", str(policies)) as running:
        yield running


@pytest.fixture
async def api(controller: Webhook, certs: Certs) -> AsyncIterator[Api]:
    async with ApiServer() as server, aiohttp.ClientSession() as session:
        api = Api(server, session)
        status, body = await api.call("POST", WEBHOOKS, stagger_configuration(controller, certs))
        assert status == 201, body
        yield api


async def _admissions(controller: Webhook, certs: Certs) -> dict[str, int]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{controller.url}/status", ssl=certs.client_context()) as response,
    ):
        return dict((await response.json())["admissions"])


async def test_an_enabled_pod_is_stored_with_the_init_client_first_and_its_group(
    api: Api, controller: Webhook, certs: Certs
) -> None:
    obj = pod(
        "web-1",
        labels=enabled(staggerimages="1", app="web"),
        image="registry.example/web:2",
        init=[{"name": "setup", "image": "busybox"}],
    )
    status, created = await api.create_pod(obj, namespace="default")
    assert status == 201, created
    status, stored = await api.call("GET", PODS.format(namespace="default") + "/web-1")
    assert status == 200
    assert [c["name"] for c in stored["spec"]["initContainers"]] == ["stagger-wait", "setup"]
    client = stored["spec"]["initContainers"][0]
    assert client["image"] == "stagger:test"
    assert client["securityContext"]["runAsNonRoot"] is True
    labels, annotations = stored["metadata"]["labels"], stored["metadata"]["annotations"]
    assert labels[ENABLE] == "1" and labels["app"] == "web"
    assert labels[NAMES.staggered_label] == "1"
    assert labels[NAMES.group_label].startswith("g")
    assert annotations[NAMES.policies_annotation] == "image-pull"
    assert json.loads(annotations[NAMES.group_key_annotation]) == {"image-pull": "registry.example/web:2"}
    assert stored["spec"]["schedulingGates"] == [{"name": NAMES.scheduling_gate}]
    # A second pod of the same image is in the same group.
    status, second = await api.create_pod(
        pod("web-2", labels=enabled(staggerimages="1"), image="registry.example/web:2")
    )
    assert status == 201
    assert second["metadata"]["labels"][NAMES.group_label] == labels[NAMES.group_label]
    assert await _admissions(controller, certs) == {"allowed": 0, "mutated": 2, "error": 0, "bad_request": 0}


async def test_a_pod_without_the_enable_label_is_untouched(
    api: Api, controller: Webhook, certs: Certs
) -> None:
    obj = pod("plain", labels={"staggerimages": "1"})
    status, created = await api.create_pod(obj)
    assert status == 201
    assert "initContainers" not in created["spec"]
    assert created["metadata"]["labels"] == {"staggerimages": "1"}
    assert "annotations" not in created["metadata"]
    assert "schedulingGates" not in created["spec"]
    # The objectSelector kept it away from the webhook altogether.
    assert await _admissions(controller, certs) == {"allowed": 0, "mutated": 0, "error": 0, "bad_request": 0}
    # Enabled but in no staggering policy: the init client only (lockd's node throttles pace it).
    status, created = await api.create_pod(pod("node-only", labels=enabled()))
    assert status == 201
    assert [c["name"] for c in created["spec"]["initContainers"]] == ["stagger-wait"]
    assert NAMES.group_label not in created["metadata"]["labels"]


@pytest.fixture
async def later_webhook() -> AsyncIterator[WebhookServer]:
    ca = trustme.CA()
    async with webhook_server(ca, "127.0.0.1") as server:
        yield server


async def test_a_reinvocation_leaves_the_injected_pod_alone(
    api: Api, controller: Webhook, certs: Certs, later_webhook: WebhookServer
) -> None:
    # A webhook after ours changes the pod, so the API server calls ours again (reinvocationPolicy).
    later_webhook.behaviours["label"] = patch(
        [{"op": "add", "path": "/metadata/labels/later", "value": "yes"}]
    )
    status, body = await api.call(
        "POST",
        WEBHOOKS,
        configuration(
            "b-later",
            hook(
                "later.example.com", {"url": later_webhook.url("label"), "caBundle": later_webhook.ca_bundle}
            ),
        ),
    )
    assert status == 201, body
    status, created = await api.create_pod(pod("again", labels=enabled(staggerimages="1")))
    assert status == 201, created
    assert created["metadata"]["labels"]["later"] == "yes"
    assert [c["name"] for c in created["spec"]["initContainers"]] == ["stagger-wait"]
    assert created["spec"]["schedulingGates"] == [{"name": NAMES.scheduling_gate}]
    # Called twice: mutated, then (already injected) allowed with no patch.
    assert await _admissions(controller, certs) == {"allowed": 1, "mutated": 1, "error": 0, "bad_request": 0}


async def _timed_create(api: Api, name: str) -> tuple[float, int, Any]:
    started = time.monotonic()
    status, created = await api.create_pod(pod(name, labels=enabled(staggerimages="1")))
    return time.monotonic() - started, status, created


async def test_with_the_webhook_hung_or_gone_pods_are_still_created(api: Api, controller: Webhook) -> None:
    # Hung: the process is stopped (the kernel still accepts connections, nothing answers them).
    os.kill(controller.proc.pid, signal.SIGSTOP)
    try:
        took, status, created = await _timed_create(api, "while-hung")
    finally:
        os.kill(controller.proc.pid, signal.SIGCONT)
    assert status == 201
    assert "initContainers" not in created["spec"]  # unstaggered: failurePolicy Ignore
    assert TIMEOUT_SECONDS - 0.2 < took < TIMEOUT_SECONDS + 1.5, f"took {took:.2f}s"

    # Gone: nothing listens on its port any more.
    assert await asyncio.to_thread(controller.stop) == 0
    took, status, created = await _timed_create(api, "while-gone")
    assert status == 201
    assert "initContainers" not in created["spec"]
    assert took < 1.0, f"took {took:.2f}s"
