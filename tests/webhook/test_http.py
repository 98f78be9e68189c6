"""The controller's HTTP surface, on the real process over HTTPS: what is not an AdmissionReview gets 400
JSON with a reason, an over-size body 413, unknown paths and methods JSON errors, malformed HTTP a JSON
400; an internal error admits the pod unchanged with a warning, is counted and logged with its traceback
once; a pod without the enable label is allowed with no patch; `/status` (JSON and text) and the probe
listener (`/healthz`, `/readyz`, `/metrics`) report what happened."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webhook.process import Certs, Webhook, running_webhook, tls_args
from tests.webhook.reviews import enabled, image_policy, patch_of, pod, review

pytestmark = pytest.mark.slow

MAX_BODY = 64 * 1024


@pytest.fixture
def hook(certs: Certs, tmp_path: Path) -> Iterator[Webhook]:
    policies = tmp_path / "policies.yaml"
    policies.write_text(image_policy("lock"))
    with running_webhook(
        *tls_args(certs), "--policies", str(policies), "--max-body", str(MAX_BODY)
    ) as running:
        yield running


@pytest.fixture
async def session(certs: Certs) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=certs.client_context())
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client


async def _post(
    session: aiohttp.ClientSession, hook: Webhook, body: bytes, path: str = "/mutate/pods"
) -> tuple[int, Any]:
    async with session.post(
        hook.url + path, data=body, headers={"Content-Type": "application/json"}
    ) as response:
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def _status(session: aiohttp.ClientSession, hook: Webhook) -> dict[str, Any]:
    async with session.get(f"{hook.url}/status") as response:
        assert response.status == 200
        return await response.json()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"", "the body is not JSON: Expecting value", id="empty"),
        pytest.param(b"{nope", "the body is not JSON: Expecting property name", id="not-json"),
        pytest.param(b"\xff\xfe\xfd", "the body is not JSON", id="not-utf8"),
        pytest.param(b"[" * 30000 + b"]" * 30000, "nested too deeply", id="too-deep"),
        pytest.param(b"[]", "the body must be a JSON object (an AdmissionReview)", id="array"),
        pytest.param(
            json.dumps({**review(pod()), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
            "apiVersion must be admission.k8s.io/v1",
            id="v1beta1",
        ),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request must be an object",
            id="no-request",
        ),
    ],
)
async def test_what_is_not_an_admission_review_gets_400_with_a_reason(
    hook: Webhook, session: aiohttp.ClientSession, body: bytes, reason: str
) -> None:
    status, answer = await _post(session, hook, body)
    assert status == 400
    assert reason in answer["error"]
    counts = (await _status(session, hook))["admissions"]
    assert counts == {"allowed": 0, "mutated": 0, "error": 0, "bad_request": 1}


async def test_an_over_size_body_gets_413(hook: Webhook, session: aiohttp.ClientSession) -> None:
    big = review(pod(labels=enabled()))
    big["request"]["object"]["metadata"]["annotations"] = {"filler": "x" * MAX_BODY}
    status, answer = await _post(session, hook, json.dumps(big).encode())
    assert status == 413
    assert answer == {"error": f"request body too large: at most {MAX_BODY} bytes"}
    # A body just under the limit is fine.
    big["request"]["object"]["metadata"]["annotations"] = {"filler": "x" * (MAX_BODY - 2000)}
    status, answer = await _post(session, hook, json.dumps(big).encode())
    assert status == 200 and answer["response"]["allowed"] is True


async def test_unknown_paths_methods_and_malformed_http_get_json_errors(
    hook: Webhook, session: aiohttp.ClientSession, certs: Certs
) -> None:
    assert await _post(session, hook, b"{}", "/mutate/nodes") == (404, {"error": "Not Found"})
    async with session.get(f"{hook.url}/mutate/pods") as response:
        assert response.status == 405 and response.headers["Allow"] == "POST"
        assert await response.json() == {"error": "Method Not Allowed"}
    async with session.get(f"{hook.url}/status?format=yaml") as response:
        assert response.status == 400
        assert (await response.json())["error"].startswith("format must be json or text")
    port = int(hook.url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = tls.recv(65536)
    assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400"))
    assert b'"error": "malformed HTTP request' in answer


async def test_internal_errors_admit_unchanged_with_a_warning_counted_and_logged_once(
    hook: Webhook, session: aiohttp.ClientSession
) -> None:
    # An enabled pod without a spec cannot be patched: an internal error, never a denial.
    broken = review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "odd", "labels": enabled()}})
    for _ in range(3):
        status, answer = await _post(session, hook, json.dumps(broken).encode())
        assert status == 200
        assert answer["response"] == {
            "uid": broken["request"]["uid"],
            "allowed": True,
            "warnings": ["stagger: internal error, pod admitted unchanged"],
        }
    assert (await _status(session, hook))["admissions"]["error"] == 3
    async with session.get(f"{hook.probe_url}/metrics") as response:
        metrics = await response.text()
    assert 'stagger_controller_admissions_total{result="error"} 3.0' in metrics
    hook.wait_for_line(r"internal error admitting pod default/odd .*\(ValueError at .*, 3 times\)")
    assert hook.log.count("Traceback (most recent call last)") == 1
    assert "ValueError: the pod has no spec" in hook.log


async def test_admission_results_in_status_and_metrics(hook: Webhook, session: aiohttp.ClientSession) -> None:
    plain = review(pod("plain", labels={"app": "web"}))
    status, answer = await _post(session, hook, json.dumps(plain).encode())
    assert status == 200
    assert answer["response"] == {"uid": plain["request"]["uid"], "allowed": True}  # no patch
    for name in ("a", "b"):
        status, answer = await _post(session, hook, json.dumps(review(pod(name, labels=enabled()))).encode())
        assert status == 200 and patch_of(answer)
    await _post(session, hook, b"{}")
    doc = await _status(session, hook)
    assert doc["admissions"] == {"allowed": 1, "mutated": 2, "error": 0, "bad_request": 1}
    assert doc["ready"] is True
    assert doc["controller"]["listen"] == hook.url
    assert doc["controller"]["image"] == "stagger:test" and doc["controller"]["lockdPort"] == 9400
    assert doc["policy"]["staggeringPolicies"] == [
        {
            "name": "image-pull",
            "mode": "lock",
            "pacer": "exponential 4/4/16",
            "labelSelector": "staggerimages=1",
            "maxBlockedDuration": "10m",
            "groupingExpression": ".spec.containers[0].image",
        }
    ]
    assert doc["policy"]["initClientMaxWait"] == "10m" and "lastReloadError" not in doc["policy"]
    assert doc["tls"]["enabled"] is True and len(doc["tls"]["sha256"]) == 64
    async with session.get(f"{hook.url}/status?format=text") as response:
        text = await response.text()
    assert "admissions allowed 1  mutated 2  error 0  bad_request 1" in text
    assert "image-pull  lock  exponential 4/4/16  staggerimages=1  .spec.containers[0].image  10m" in text
    async with session.get(f"{hook.probe_url}/metrics") as response:
        metrics = await response.text()
    assert 'stagger_controller_admissions_total{result="allowed"} 1.0' in metrics
    assert 'stagger_controller_admissions_total{result="mutated"} 2.0' in metrics
    assert 'stagger_controller_admissions_total{result="bad_request"} 1.0' in metrics
    assert "stagger_controller_admission_seconds_count 4.0" in metrics
    assert "stagger_controller_staggering_policies 1.0" in metrics


async def test_probes(hook: Webhook, session: aiohttp.ClientSession) -> None:
    async with session.get(f"{hook.probe_url}/healthz") as response:
        assert response.status == 200 and await response.json() == {"ok": True}
    async with session.get(f"{hook.probe_url}/readyz") as response:
        assert response.status == 200 and await response.json() == {"ready": True}
    async with session.get(f"{hook.probe_url}/metrics") as response:
        assert response.status == 200 and response.content_type == "text/plain"
    # Admission is not served on the plain listener, nor the probes on the TLS one.
    async with session.post(f"{hook.probe_url}/mutate/pods", data=b"{}") as response:
        assert response.status == 404
    async with session.get(f"{hook.url}/metrics") as response:
        assert response.status == 404


async def test_requests_are_counted_by_route_template_and_code_class(
    hook: Webhook, session: aiohttp.ClientSession
) -> None:
    await _post(session, hook, json.dumps(review(pod("a", labels=enabled()))).encode())
    await _post(session, hook, b"{}")
    await _status(session, hook)
    for path in ("/nope/1", "/nope/2"):  # two paths, one label value: callers cannot grow the series
        async with session.get(hook.url + path) as response:
            assert response.status == 404
    async with session.get(f"{hook.probe_url}/metrics") as response:
        metrics = await response.text()
    assert 'stagger_controller_requests_total{code="2xx",route="/mutate/pods"} 1.0' in metrics
    assert 'stagger_controller_requests_total{code="4xx",route="/mutate/pods"} 1.0' in metrics
    assert 'stagger_controller_requests_total{code="2xx",route="/status"} 1.0' in metrics
    assert 'stagger_controller_requests_total{code="4xx",route="other"} 2.0' in metrics
