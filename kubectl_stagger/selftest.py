"""`kubectl stagger selftest`: does an installation answer where its callers reach it? The chart's `helm test`
runs it in a pod of the release: the controller's Service answers an AdmissionReview over TLS with the CA
lockd and the API server trust, and the lockd of the test pod's node answers on the node's address (as the
init clients reach it). Each check is one line; any failure makes the exit code SELFTEST_FAILED."""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

__all__ = ["Check", "admission_review", "run_checks"]


@dataclass(frozen=True)
class Check:
    what: str
    ok: bool
    detail: str


def admission_review(*, uid: str) -> dict[str, Any]:
    """A CREATE of a pod without stagger's label: the webhook must allow it unchanged, and do nothing else
    (no group counted, no hold), so the check has no side effect on the installation."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stagger-selftest", "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "image": "selftest"}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "stagger-selftest"},
            "object": pod,
            "dryRun": True,
        },
    }


async def _webhook(session: aiohttp.ClientSession, *, url: str, context: ssl.SSLContext | bool) -> Check:
    what = f"webhook {url}"
    uid = str(uuid.uuid4())
    try:
        async with session.post(f"{url}/mutate/pods", json=admission_review(uid=uid), ssl=context) as answer:
            body = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        return Check(what, False, f"no answer: {err or type(err).__name__}")
    response = body.get("response") if isinstance(body, dict) else None
    if answer.status != 200 or not isinstance(response, dict):
        return Check(what, False, f"HTTP {answer.status}: {str(body)[:200]}")
    if response.get("uid") != uid or response.get("allowed") is not True:
        return Check(what, False, f"unexpected AdmissionReview answer: {str(response)[:200]}")
    return Check(what, True, "allowed a pod without the enable label, unchanged")


async def _lockd(session: aiohttp.ClientSession, *, url: str) -> Check:
    what = f"lockd {url}"
    seen: list[str] = []
    for path in ("/healthz", "/readyz"):
        try:
            async with session.get(f"{url}{path}") as answer:
                text = await answer.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            return Check(what, False, f"{path}: no answer: {err or type(err).__name__}")
        if answer.status != 200:
            return Check(what, False, f"{path}: HTTP {answer.status}: {text[:200]}")
        seen.append(f"{path} 200")
    return Check(what, True, ", ".join(seen))


async def run_checks(
    *, webhook_url: str | None, ca_file: Path | None, lockd_url: str | None, request_timeout: float
) -> list[Check]:
    # Without a CA file, the system's trust store (True: aiohttp's default verification).
    context: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else True
    )
    checks: list[Check] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=request_timeout)) as session:
        if webhook_url is not None:
            checks.append(await _webhook(session, url=webhook_url.rstrip("/"), context=context))
        if lockd_url is not None:
            checks.append(await _lockd(session, url=lockd_url.rstrip("/")))
    return checks
