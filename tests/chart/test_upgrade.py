"""Upgrades keep what the first install generated: with the Secrets of a previous install in the cluster
(a minimal fake API server answers `helm template --dry-run=server`, so the chart's `lookup` finds them),
the serving certificate, its CA (in the Secret, the webhooks' caBundle and lockd's ConfigMap) and the
shared token are reused unchanged; a certificate Secret missing a key is replaced by a new, consistent
pair rather than half reused."""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography import x509

from tests.chart.fakeapi import FakeApi, serving
from tests.chart.helm import (
    CONTROLLER,
    NAMESPACE,
    PREFIX,
    RELEASE,
    Doc,
    by_kind,
    named,
    render,
    render_against,
)

TLS, TOKEN, CA = f"{CONTROLLER}-tls", f"{CONTROLLER}-token", f"{CONTROLLER}-ca"


def ca_bundle(docs: list[Doc]) -> str:
    """The caBundle of the webhooks (pods, jobs and namespaced pods), which is one."""
    hooks = by_kind(docs, "MutatingWebhookConfiguration")["webhooks"]
    [bundle] = {hook["clientConfig"]["caBundle"] for hook in hooks}
    assert [hook["name"] for hook in hooks] == [
        f"{name}.{PREFIX}" for name in ("pods", "jobs", "namespaced-pods")
    ]
    found: str = bundle
    return found


def test_an_upgrade_reuses_the_certificate_ca_and_token(tmp_path: Path) -> None:
    first = render()
    api = FakeApi()
    for name in (TLS, TOKEN):
        api.add_secret(RELEASE, NAMESPACE, named(first, "Secret", name))
    with serving(api, tmp_path / "kubeconfig"):
        upgrade = render_against(tmp_path / "kubeconfig")
    assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{TLS}" in api.requests
    assert named(upgrade, "Secret", TLS)["data"] == named(first, "Secret", TLS)["data"]
    assert named(upgrade, "Secret", TOKEN)["data"] == named(first, "Secret", TOKEN)["data"]
    assert ca_bundle(upgrade) == ca_bundle(first) == named(first, "Secret", TLS)["data"]["ca.crt"]
    assert named(upgrade, "ConfigMap", CA)["data"] == named(first, "ConfigMap", CA)["data"]


def test_a_certificate_secret_missing_a_key_is_replaced_whole(tmp_path: Path) -> None:
    first = render()
    broken = named(first, "Secret", TLS)
    api = FakeApi()
    api.add_secret(RELEASE, NAMESPACE, {**broken, "data": {"tls.crt": broken["data"]["tls.crt"]}})
    with serving(api, tmp_path / "kubeconfig"):
        upgrade = render_against(tmp_path / "kubeconfig")
    secret = named(upgrade, "Secret", TLS)
    assert secret["data"]["tls.crt"] != broken["data"]["tls.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_bundle(upgrade)))
    x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"])).verify_directly_issued_by(ca)
    assert secret["data"]["ca.crt"] == ca_bundle(upgrade)
