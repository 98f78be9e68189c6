"""Hot reload on the real process (`--reload-interval 100ms`): a changed policy file changes admission,
a bad or emptied one is reported (`lastReloadError`, log, metric) while the last good policy stays; a
new certificate pair from another CA is served to new connections without a restart (connections
already open keep theirs), and a bad new pair keeps the one in force."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from tests.waiting import eventually
from tests.webhook.process import Certs, Webhook, running_webhook, tls_args
from tests.webhook.reviews import NAMES, enabled, image_policy, patch_of, pod, review

pytestmark = pytest.mark.slow


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(image_policy("lock"))
    return path


@pytest.fixture
def hook(certs: Certs, policies: Path) -> Iterator[Webhook]:
    with running_webhook(
        *tls_args(certs), "--policies", str(policies), "--reload-interval", "100ms"
    ) as running:
        yield running


async def _replace(path: Path, text: str) -> None:
    """The file's new text, swapped in whole (a reload never reads it half written)."""

    def write() -> None:
        staged = path.with_name(path.name + ".new")
        staged.write_text(text)
        staged.replace(path)

    await asyncio.to_thread(write)


async def _get(url: str, context: ssl.SSLContext) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url, ssl=context) as response:
        assert response.status == 200
        return await response.json() if response.content_type == "application/json" else await response.text()


async def _gated(hook: Webhook, certs: Certs) -> bool:
    """Whether admission now holds an image-pull pod with the scheduling gate (gate mode)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{hook.url}/mutate/pods",
            json=review(pod(labels=enabled(staggerimages="1"))),
            ssl=certs.client_context(),
        ) as response,
    ):
        ops = patch_of(await response.json())
    assert any(op["path"].endswith(NAMES.staggered_label.replace("/", "~1")) for op in ops)
    return any(op["path"] == "/spec/schedulingGates" for op in ops)


async def test_policy_reload_keeps_the_last_good_policy(hook: Webhook, certs: Certs, policies: Path) -> None:
    context = certs.client_context()
    assert not await _gated(hook, certs)

    await _replace(policies, image_policy("gate"))

    async def mode_is_gate() -> bool:
        doc = await _get(f"{hook.url}/status", context)
        return bool(doc["policy"]["staggeringPolicies"][0]["mode"] == "gate")

    await eventually(mode_is_gate, what="the gate-mode policy in force")
    assert await _gated(hook, certs)

    for bad, problem in [
        ("staggeringPolicies: [\n", f"{policies}:2:1: invalid YAML"),
        ("# nothing but a comment\n", f"{policies}: the policy file is empty"),
        (
            image_policy("gate").replace("multiplier: 4", "multiplier: 0.5"),
            "staggeringPolicies[0].pacer.exponential.multiplier: must be greater than 1 (got 0.5)",
        ),
    ]:
        await _replace(policies, bad)

        async def reported(problem: str = problem) -> bool:
            doc = await _get(f"{hook.url}/status", context)
            return problem in doc["policy"].get("lastReloadError", "")

        await eventually(reported, what=f"lastReloadError {problem!r}")
        assert await _gated(hook, certs)  # the last good policy stays
        assert "policy reload FAILED, the last good policy stays" in await _get(
            f"{hook.url}/status?format=text", context
        )
    metrics = await _get(f"{hook.probe_url}/metrics", context)
    assert 'stagger_controller_policy_reloads_total{result="ok"} 1.0' in metrics
    assert 'stagger_controller_policy_reloads_total{result="error"} 3.0' in metrics
    assert hook.log.count("policy reload failed, keeping the last good policy") == 3  # once per problem

    await _replace(policies, image_policy("lock"))

    async def recovered() -> bool:
        doc = await _get(f"{hook.url}/status", context)
        return (
            "lastReloadError" not in doc["policy"]
            and doc["policy"]["staggeringPolicies"][0]["mode"] == "lock"
        )

    await eventually(recovered, what="the fixed policy in force and the error cleared")
    assert not await _gated(hook, certs)


async def _serves(hook: Webhook, context: ssl.SSLContext) -> bool:
    """Whether a new connection trusting `context`'s CA gets through."""
    try:
        await _get(f"{hook.url}/status", context)
    except aiohttp.ClientConnectorCertificateError:
        return False
    return True


async def test_a_new_certificate_pair_is_served_without_a_restart(hook: Webhook, certs: Certs) -> None:
    first = certs.client_context()
    before = await _get(f"{hook.url}/status", first)
    # A keep-alive connection opened before the rotation.
    kept = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=first, limit=1))
    try:
        async with kept.get(f"{hook.url}/status") as response:
            assert response.status == 200

        certs.issue(trustme.CA())
        second = certs.client_context()
        await eventually(lambda: _serves(hook, second), what="the new certificate on new connections")
        assert not await _serves(hook, first)
        async with kept.get(f"{hook.url}/status") as response:  # the open connection keeps its certificate
            assert response.status == 200
    finally:
        await kept.close()
    after = await _get(f"{hook.url}/status", second)
    assert after["tls"]["sha256"] != before["tls"]["sha256"]
    assert after["tls"]["reloads"] == 1 and "lastReloadError" not in after["tls"]
    assert hook.proc.poll() is None  # the same process throughout

    # A bad new pair (the key of another certificate) keeps the pair in force.
    other = trustme.CA().issue_cert("127.0.0.1")
    mismatched = trustme.CA().issue_cert("127.0.0.1")
    certs.install(other.cert_chain_pems[0].bytes(), mismatched.private_key_pem.bytes())

    async def reported() -> bool:
        doc = await _get(f"{hook.url}/status", second)
        return "KEY_VALUES_MISMATCH" in doc["tls"].get("lastReloadError", "")

    await eventually(reported, what="the bad pair reported")
    assert await _serves(hook, second)
    assert json.loads(json.dumps(await _get(f"{hook.probe_url}/readyz", second))) == {"ready": True}
    metrics = await _get(f"{hook.probe_url}/metrics", second)
    assert 'stagger_controller_certificate_reloads_total{result="ok"} 1.0' in metrics
    assert 'stagger_controller_certificate_reloads_total{result="error"} 1.0' in metrics
    assert "serving certificate not reloaded, keeping the one in force" in hook.log

    # Fixed: served, and the report clears.
    certs.issue(trustme.CA())
    third = certs.client_context()
    await eventually(lambda: _serves(hook, third), what="the third certificate")
    assert "lastReloadError" not in (await _get(f"{hook.url}/status", third))["tls"]
