"""The chart's webhooks, as `helm template` renders them (schedulerNames set, failurePolicy Fail so that a
failed call or a failing matchCondition is loud), registered on an API server and pointed at the real
controller process: objects are created through the API and read back as stored.

- A Job with labels of its own and the enable label on its pod template only gets evict mode's rule; a Job
  whose template is not opted in, or has no labels at all, is created untouched.
- A pod in a namespace labelled `<prefix>/enable: "1"` is stored labelled and injected; one labelled "0"
  there is untouched; a labelled one there (both pod webhooks) is injected once.
- A pod naming a configured scheduler is stored labelled, injected once, with default-scheduler; a pod
  naming another is untouched.

On the API emulator (default), which does not evaluate matchConditions (sim/emulator/admission.py
`hook_matches`): the controller's own checks decide, and it is called for every Job and every pod. On the
real control plane (`--control-plane real` or `both`): kube-apiserver evaluates the chart's CEL, and the
controller is not called at all for the Job and the pod the conditions leave out."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.cluster.backend import wait_namespace_ready
from stagger.kube import JOBS, NAMESPACES, PODS, Resource
from tests.backends import Backend, clean_namespace
from tests.chart.helm import by_kind, render
from tests.webhook.process import Certs, Webhook, running_webhook, tls_args
from tests.webhook.reviews import IMAGE_POLICY, NAMES

pytestmark = pytest.mark.e2e

MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
ENABLE = NAMES.enable_label
POLICIES = IMAGE_POLICY.replace("MODE", "lock") + (
    "- name: batch\n"
    "  labelSelector: {matchLabels: {app: batch}}\n"
    "  pacer: {linear: {step: 1, maxStagger: 4}}\n"
    "  mode: evict\n"
)
IGNORE_RULE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
TEST_LABEL = "stagger-optin-test"


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs.write(tmp_path / "tls")


@pytest.fixture
def controller(certs: Certs, tmp_path: Path) -> Iterator[Webhook]:
    policies = tmp_path / "policies.yaml"
    policies.write_text(POLICIES)
    env = {"STAGGER_SCHEDULER_NAMES": "straggler"}
    with running_webhook(*tls_args(certs), "--policies", str(policies), env=env) as running:
        yield running


def configuration(controller: Webhook, certs: Certs, *, token: str) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, sending only namespaces labelled with this test's token
    (other tests share a real API server), each webhook calling the controller process by URL."""
    selector = f'controller.webhook.namespaceSelector={{"matchLabels":{{"{TEST_LABEL}":"{token}"}}}}'
    rendered = by_kind(
        render(
            "controller.webhook.schedulerNames={straggler}",
            "controller.webhook.failurePolicy=Fail",
            jsons=(selector,),
        ),
        "MutatingWebhookConfiguration",
    )
    hooks = []
    for hook in rendered["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hooks.append({**hook, "clientConfig": {"url": controller.url + path, "caBundle": certs.ca_bundle}})
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"optin-{token}"},
        "webhooks": hooks,
    }


def pod(name: str, labels: dict[str, str] | None = None, scheduler: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.example/web:1"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def job(name: str, *, own: dict[str, str] | None, template: dict[str, str] | None) -> dict[str, Any]:
    template_doc: dict[str, Any] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "work:1"}]}
    }
    if template is not None:
        template_doc["metadata"] = {"labels": template}
    metadata: dict[str, Any] = {"name": name}
    if own is not None:
        metadata["labels"] = own
    # suspend: admission is what is tested, no pod is needed.
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"suspend": True, "template": template_doc},
    }


def inits(obj: dict[str, Any]) -> list[str]:
    return [c["name"] for c in obj["spec"].get("initContainers") or []]


async def calls(controller: Webhook) -> dict[str, float]:
    """Reviews the controller answered so far, by route."""
    async with aiohttp.ClientSession() as session, session.get(f"{controller.probe_url}/metrics") as answer:
        text = await answer.text()
    return {
        sample.labels["route"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "stagger_controller_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def wait_in_force(backend: Backend, namespace: str, *, within: float = 30.0) -> None:
    """Until a dry-run create of a labelled pod comes back injected. A real API server picks a new webhook
    configuration up from its own watch, a moment later, and says nothing when it has: asked again."""
    deadline = time.monotonic() + within
    probe = pod("probe", {ENABLE: "1"})
    while True:
        answer = await backend.client.request(
            "POST", PODS.path(namespace=namespace), params={"dryRun": "All"}, body=probe
        )
        if inits(answer) == ["stagger-wait"]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the webhook configuration is not in force after {within:g}s")
        await asyncio.sleep(0.1)


async def test_the_charts_webhooks_opt_in_by_template_namespace_and_scheduler(
    backend: Backend, controller: Webhook, certs: Certs
) -> None:
    client, plain = backend.client, backend.namespace
    token = uuid.uuid4().hex[:12]
    opted = f"{plain}-in"
    await client.patch(NAMESPACES, name=plain, patch={"metadata": {"labels": {TEST_LABEL: token}}})
    namespace = {"apiVersion": "v1", "kind": "Namespace"}
    labels = {TEST_LABEL: token, ENABLE: "1"}
    await client.create(NAMESPACES, {**namespace, "metadata": {"name": opted, "labels": labels}})
    config = await client.create(MUTATING_WEBHOOKS, configuration(controller, certs, token=token))
    try:
        await wait_namespace_ready(backend.api, client, opted)
        await wait_in_force(backend, plain)

        # Jobs: by the pod template's label, whatever the Job's own.
        created = await client.create(
            JOBS,
            job("own-labels", own={"team": "a"}, template={ENABLE: "1", "app": "batch"}),
            namespace=plain,
        )
        assert created["metadata"]["labels"] == {"team": "a"}
        assert created["spec"]["podFailurePolicy"]["rules"] == [IGNORE_RULE]
        before = await calls(controller)
        created = await client.create(
            JOBS, job("not-opted", own={"team": "a"}, template={"app": "batch"}), namespace=plain
        )
        assert "podFailurePolicy" not in created["spec"]
        # The real API server's CEL kept it from the controller; the emulator sends every Job.
        sent = (await calls(controller)).get("/mutate/jobs", 0) - before.get("/mutate/jobs", 0)
        assert sent == (0 if backend.real else 1)
        created = await client.create(JOBS, job("bare", own=None, template=None), namespace=plain)
        assert "podFailurePolicy" not in created["spec"]

        # The namespace's label.
        stored = await client.create(PODS, pod("unlabelled", {"staggerimages": "1"}), namespace=opted)
        assert stored["metadata"]["labels"][ENABLE] == "1"
        assert stored["metadata"]["labels"][NAMES.staggered_label] == "1"
        assert inits(stored) == ["stagger-wait"]
        stored = await client.create(PODS, pod("out", {ENABLE: "0"}), namespace=opted)
        assert stored["metadata"]["labels"] == {ENABLE: "0"} and inits(stored) == []
        stored = await client.create(PODS, pod("both", {ENABLE: "1"}), namespace=opted)
        assert inits(stored) == ["stagger-wait"]

        # The scheduler's name.
        stored = await client.create(PODS, pod("peer", scheduler="straggler"), namespace=plain)
        assert stored["metadata"]["labels"] == {ENABLE: "1"}
        assert stored["spec"]["schedulerName"] == "default-scheduler"
        assert inits(stored) == ["stagger-wait"]
        stored = await client.create(
            PODS, pod("peer-both", {ENABLE: "1"}, scheduler="straggler"), namespace=opted
        )
        assert stored["spec"]["schedulerName"] == "default-scheduler"
        assert inits(stored) == ["stagger-wait"]
        before = await calls(controller)
        stored = await client.create(PODS, pod("other", scheduler="other-scheduler"), namespace=plain)
        assert stored["spec"]["schedulerName"] == "other-scheduler"
        assert "labels" not in stored["metadata"] and inits(stored) == []
        after = await calls(controller)
        sent = after.get("/mutate/pods/scheduler", 0) - before.get("/mutate/pods/scheduler", 0)
        assert sent == (0 if backend.real else 1)
    finally:
        await client.delete(MUTATING_WEBHOOKS, name=config["metadata"]["name"])
        if backend.real:  # the emulator is the test's own
            await clean_namespace(client, opted)
