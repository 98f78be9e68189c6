"""Mutating admission webhooks against a real HTTPS webhook (trustme certificates, caBundle verified):
the AdmissionReview v1 request shape, JSONPatch applied, warnings as Warning headers, denial Status,
failurePolicy Fail/Ignore on timeouts and bad TLS, objectSelector/namespaceSelector skips, rules
(operations, subresources), service references through the resolver, reinvocation, and validation
after mutation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import trustme

from sim.emulator.server import ApiServer, ApiServerSettings
from tests.emulator.conftest import failure, pod
from tests.emulator.webhook_server import (
    WebhookServer,
    allow,
    configuration,
    deny,
    hook,
    patch,
    webhook_server,
)

PODS = "/api/v1/namespaces/default/pods"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class Client:
    def __init__(self, server: ApiServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        async with self.session.request(
            method,
            self.server.url + path,
            json=body if content_type == "application/json" else None,
            data=None if content_type == "application/json" else json.dumps(body),
            headers={"Authorization": "Bearer sim", "Content-Type": content_type},
        ) as response:
            return response.status, await response.json(), response

    async def register(self, config: dict[str, Any]) -> None:
        status, body, _ = await self.call("POST", WEBHOOKS, config)
        assert status == 201, body


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def webhook(ca: trustme.CA) -> AsyncIterator[WebhookServer]:
    async with webhook_server(ca, "127.0.0.1", "hook.webhooks.svc") as server:
        yield server


@pytest.fixture
async def api(webhook: WebhookServer) -> AsyncIterator[Client]:
    settings = ApiServerSettings(service_resolver={"webhooks/hook:443": f"127.0.0.1:{webhook.port}"})
    async with ApiServer(settings) as server, aiohttp.ClientSession() as session:
        yield Client(server, session)


def url_config(webhook: WebhookServer, path: str) -> dict[str, Any]:
    return {"url": webhook.url(path), "caBundle": webhook.ca_bundle}


async def test_mutation_is_applied_and_warnings_are_returned(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["mutate"] = patch(
        [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}], warnings=["pod was mutated"]
    )
    await api.register(configuration("cfg", hook("mutate.example.com", url_config(webhook, "mutate"))))
    status, created, response = await api.call("POST", PODS, pod())
    assert status == 201
    assert created["metadata"]["labels"] == {"mutated": "yes"}
    assert response.headers.getall("Warning") == ['299 - "pod was mutated"']
    request = webhook.calls("mutate")[0]["request"]
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestKind"] == request["kind"] and request["requestResource"] == request["resource"]
    assert request["namespace"] == "default" and request["operation"] == "CREATE"
    assert "name" not in request  # generateName is resolved after mutating admission, as in the real server
    assert request["object"]["metadata"]["generateName"] == "pod-"
    assert "uid" not in request["object"]["metadata"]
    assert request["object"]["spec"]["restartPolicy"] == "Always"  # webhooks see defaulted objects
    assert request["oldObject"] is None and request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert request["userInfo"]["username"] == "sim"
    assert len(request["uid"]) == 36
    assert webhook.queries["mutate"] == ["timeout=10s"]


async def test_denial_returns_the_webhook_status(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["deny"] = deny({"message": "no thanks"})
    webhook.behaviours["deny-code"] = deny({"code": 422, "message": "bad pod", "reason": "Invalid"})
    await api.register(
        configuration(
            "cfg",
            hook("deny.example.com", url_config(webhook, "deny"), objectSelector={"matchLabels": {"d": "1"}}),
        )
    )
    await api.register(
        configuration(
            "cfg2",
            hook(
                "code.example.com",
                url_config(webhook, "deny-code"),
                objectSelector={"matchLabels": {"d": "2"}},
            ),
        )
    )
    status, body, _ = await api.call("POST", PODS, pod(labels={"d": "1"}))
    assert status == 403
    assert body == failure(
        code=403,
        reason="Forbidden",
        message='pods "Unknown" is forbidden: admission webhook "deny.example.com" denied the request: no thanks',
        details={"name": "Unknown", "kind": "pods"},
    )
    status, body, _ = await api.call("POST", PODS, pod("named", labels={"d": "2"}))
    assert status == 422 and body["reason"] == "Invalid"
    assert (
        body["message"]
        == 'pods "named" is forbidden: admission webhook "code.example.com" denied the request: bad pod'
    )


@pytest.mark.parametrize(
    ("policy", "expected"),
    [pytest.param("Ignore", 201, id="ignore"), pytest.param("Fail", 500, id="fail")],
)
async def test_timeouts_follow_the_failure_policy(
    api: Client, webhook: WebhookServer, policy: str, expected: int
) -> None:
    await api.register(
        configuration(
            "cfg",
            hook("slow.example.com", url_config(webhook, "hang"), timeoutSeconds=1, failurePolicy=policy),
        )
    )
    status, body, _ = await api.call("POST", PODS, pod("p"))
    assert status == expected
    if policy == "Fail":
        assert body["reason"] == "InternalError"
        assert body["message"] == (
            f'Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: '
            f'Post "https://127.0.0.1:{webhook.port}/hang?timeout=1s": context deadline exceeded'
        )
    assert webhook.queries["hang"] == ["timeout=1s"]


async def test_a_kept_alive_connection_closed_by_the_webhook_is_sent_again(
    api: Client, webhook: WebhookServer
) -> None:
    """A webhook server that closes a kept-alive connection just as the API server sends on it: the call
    goes again on a new connection (Go's http.Transport retries it), so it is no call failure; a server
    that drops every request gets that one retry, no more, and the failure policy decides."""
    webhook.behaviours["drop-reused"] = patch([{"op": "add", "path": "/metadata/labels/m", "value": "1"}])
    await api.register(
        configuration(
            "cfg",
            hook(
                "reused.example.com",
                url_config(webhook, "drop-reused"),
                objectSelector={"matchLabels": {"x": "reused"}},
            ),
            hook(
                "drop.example.com", url_config(webhook, "drop"), objectSelector={"matchLabels": {"x": "drop"}}
            ),
        )
    )
    for name in ("first", "second", "third"):
        status, created, _ = await api.call("POST", PODS, pod(name, labels={"x": "reused"}))
        assert (status, created["metadata"]["labels"]) == (201, {"x": "reused", "m": "1"}), created
    assert len(webhook.calls("drop-reused")) == 3
    assert webhook.dropped["drop-reused"] >= 1  # the test webhook did close a kept-alive connection

    status, body, _ = await api.call("POST", PODS, pod("dropped", labels={"x": "drop"}))
    assert status == 500 and 'failed calling webhook "drop.example.com"' in body["message"], body
    assert webhook.dropped["drop"] == 2


async def test_untrusted_certificate_fails_closed_or_open(api: Client, webhook: WebhookServer) -> None:
    import base64

    other_ca = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    config = {"url": webhook.url("mutate"), "caBundle": other_ca}
    await api.register(
        configuration(
            "closed", hook("closed.example.com", config, objectSelector={"matchLabels": {"x": "closed"}})
        )
    )
    await api.register(
        configuration(
            "open",
            hook(
                "open.example.com",
                config,
                failurePolicy="Ignore",
                objectSelector={"matchLabels": {"x": "open"}},
            ),
        )
    )
    status, body, _ = await api.call("POST", PODS, pod(labels={"x": "closed"}))
    assert status == 500 and "tls: failed to verify certificate" in body["message"]
    status, _, _ = await api.call("POST", PODS, pod(labels={"x": "open"}))
    assert status == 201
    assert webhook.calls("mutate") == []


async def test_object_and_namespace_selectors_skip_webhooks(api: Client, webhook: WebhookServer) -> None:
    await api.register(
        configuration(
            "cfg",
            hook(
                "selective.example.com",
                url_config(webhook, "sel"),
                objectSelector={"matchLabels": {"enable": "1"}},
                namespaceSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
            ),
        )
    )
    await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": "quiet", "labels": {"skip": "yes"}}})
    assert (await api.call("POST", PODS, pod("plain")))[0] == 201
    assert (
        await api.call("POST", "/api/v1/namespaces/quiet/pods", pod("ns-skipped", labels={"enable": "1"}))
    )[0] == 201
    assert webhook.calls("sel") == []
    assert (await api.call("POST", PODS, pod("selected", labels={"enable": "1"})))[0] == 201
    assert [r["request"]["name"] for r in webhook.calls("sel")] == ["selected"]


async def test_service_reference_is_resolved_and_verified_by_service_name(
    api: Client, webhook: WebhookServer
) -> None:
    service = {
        "service": {"namespace": "webhooks", "name": "hook", "path": "/svc"},
        "caBundle": webhook.ca_bundle,
    }
    webhook.behaviours["svc"] = patch(
        [{"op": "add", "path": "/metadata/annotations", "value": {"via": "service"}}]
    )
    await api.register(configuration("cfg", hook("svc.example.com", service)))
    status, created, _ = await api.call("POST", PODS, pod("p"))
    assert status == 201 and created["metadata"]["annotations"] == {"via": "service"}
    api.server.service_endpoints.clear()
    status, body, _ = await api.call("POST", PODS, pod("q"))
    assert status == 500 and "hook.webhooks.svc" in body["message"]


async def test_rules_select_operations_and_subresources(api: Client, webhook: WebhookServer) -> None:
    await api.register(
        configuration(
            "cfg",
            hook("deletes.example.com", url_config(webhook, "del"), operations=("DELETE",)),
            hook("evictions.example.com", url_config(webhook, "evict"), resources=("pods/eviction",)),
            hook(
                "status.example.com",
                url_config(webhook, "status"),
                operations=("UPDATE",),
                resources=("pods/status",),
            ),
        )
    )
    assert (await api.call("POST", PODS, pod("p")))[0] == 201
    assert webhook.calls("del") == [] and webhook.calls("evict") == []
    status, _, _ = await api.call(
        "PATCH",
        f"{PODS}/p/status",
        {"status": {"phase": "Pending"}, "metadata": {"labels": {"s": "1"}}},
        "application/merge-patch+json",
    )
    assert status == 200 and len(webhook.calls("status")) == 1
    assert webhook.calls("status")[0]["request"]["subResource"] == "status"
    status, _, _ = await api.call(
        "POST",
        f"{PODS}/p/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}},
    )
    assert status == 201
    eviction = webhook.calls("evict")[0]["request"]
    assert eviction["kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert eviction["resource"]["resource"] == "pods" and eviction["subResource"] == "eviction"
    assert eviction["name"] == "p" and eviction["object"]["kind"] == "Eviction"
    assert webhook.calls("del") == []  # the eviction's own deletion is not admitted again
    assert (await api.call("POST", PODS, pod("q")))[0] == 201
    assert (await api.call("DELETE", f"{PODS}/q"))[0] == 200
    deletion = webhook.calls("del")[0]["request"]
    assert deletion["operation"] == "DELETE" and deletion["object"] is None
    assert deletion["oldObject"]["metadata"]["name"] == "q"
    assert deletion["options"]["kind"] == "DeleteOptions"


async def test_reinvocation_if_needed(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["b"] = patch([{"op": "add", "path": "/metadata/annotations", "value": {"b": "1"}}])
    await api.register(
        configuration(
            "cfg",
            hook("a.example.com", url_config(webhook, "a"), reinvocationPolicy="IfNeeded"),
            hook("never.example.com", url_config(webhook, "never")),
            hook("b.example.com", url_config(webhook, "b")),
        )
    )
    assert (await api.call("POST", PODS, pod("p")))[0] == 201
    assert len(webhook.calls("a")) == 2
    assert webhook.calls("a")[1]["request"]["object"]["metadata"]["annotations"] == {"b": "1"}
    assert len(webhook.calls("never")) == 1 and len(webhook.calls("b")) == 1


async def test_validation_runs_after_mutation(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["break"] = patch([{"op": "remove", "path": "/spec/containers/0/image"}])
    await api.register(configuration("cfg", hook("break.example.com", url_config(webhook, "break"))))
    status, body, _ = await api.call("POST", PODS, pod("p"))
    assert status == 422
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}
    ]


async def test_malformed_responses_are_call_failures(api: Client, webhook: WebhookServer) -> None:
    webhook.bad_uid = True
    await api.register(configuration("cfg", hook("uid.example.com", url_config(webhook, "any"))))
    status, body, _ = await api.call("POST", PODS, pod("p"))
    assert status == 500
    assert 'received invalid webhook response: expected response.uid="' in body["message"]


async def test_patch_on_delete_is_refused(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["del"] = patch([{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}])
    await api.register(
        configuration("cfg", hook("del.example.com", url_config(webhook, "del"), operations=("DELETE",)))
    )
    assert (await api.call("POST", PODS, pod("p")))[0] == 201
    status, body, _ = await api.call("DELETE", f"{PODS}/p")
    assert status == 500
    assert "attempted to modify the object, which is not supported for this operation" in body["message"]


async def test_webhook_configurations_are_not_intercepted(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["all"] = deny({"message": "nothing"})
    catch_all = hook("all.example.com", url_config(webhook, "all"), operations=("*",), resources=("*",))
    catch_all["rules"][0]["apiGroups"] = ["*"]
    catch_all["rules"][0]["apiVersions"] = ["*"]
    await api.register(configuration("cfg", catch_all))
    status, _, _ = await api.call("DELETE", f"{WEBHOOKS}/cfg")
    assert status == 200


async def test_allow_without_patch_keeps_the_object(api: Client, webhook: WebhookServer) -> None:
    webhook.behaviours["ok"] = allow()
    await api.register(configuration("cfg", hook("ok.example.com", url_config(webhook, "ok"))))
    status, created, _ = await api.call("POST", PODS, pod("p", labels={"keep": "me"}))
    assert status == 201 and created["metadata"]["labels"] == {"keep": "me"}


@pytest.mark.parametrize(
    ("changes", "called"),
    [
        pytest.param({}, True, id="equivalent-version-matches-by-default"),
        pytest.param({"matchPolicy": "Exact"}, False, id="exact-version-does-not"),
        pytest.param({"scope": "Cluster"}, False, id="cluster-scope-skips-pods"),
        pytest.param({"scope": "Namespaced"}, True, id="namespaced-scope"),
        pytest.param({"resources": ["pods/*"]}, True, id="subresource-wildcard-includes-the-resource"),
        pytest.param({"resources": ["*"]}, True, id="all-resources"),
        pytest.param({"resources": ["*/status"]}, False, id="only-status"),
    ],
)
async def test_rule_matching(
    api: Client, webhook: WebhookServer, changes: dict[str, Any], called: bool
) -> None:
    spec = hook("rule.example.com", url_config(webhook, "rule"))
    rule = spec["rules"][0]
    rule["apiVersions"] = ["v1beta1"]
    if "matchPolicy" in changes:
        spec["matchPolicy"] = changes["matchPolicy"]
    for key in ("scope", "resources"):
        if key in changes:
            rule[key] = changes[key]
    await api.register(configuration("cfg", spec))
    assert (await api.call("POST", PODS, pod("p")))[0] == 201
    assert bool(webhook.calls("rule")) is called
