"""`helm install`, `helm upgrade` and `helm uninstall` of charts/stagger against the real control plane, with
helm 4's default (server-side apply) and with `--server-side=false` (client-side three-way merge): the
install creates every object of the chart; an upgrade applies a changed value yet keeps the generated CA,
serving certificate and group API token (the chart reads them back with `lookup`), so the webhooks'
caBundle and lockd's trust stay valid; the uninstall removes every object the release created."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.controlplane.launcher import ControlPlane
from tests.tools import ROOT, tool

CHART = ROOT / "charts" / "stagger"


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = str(kubeconfig)

    def run(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(tool(name)), "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"{name} {' '.join(args)}: {done.stderr}"
        return done

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--show-managed-fields"] + (
            ["-n", namespace] if namespace else []
        )
        done = self.run("kubectl", *args, check=False)
        if done.returncode != 0:
            assert "NotFound" in done.stderr, done.stderr
            return None
        found: dict[str, Any] = json.loads(done.stdout)
        return found


def generated(cluster: Cluster, release: str, namespace: str) -> dict[str, str]:
    """What the chart generates once: the serving certificate and key, their CA (in the Secret, the webhooks'
    caBundle and lockd's ConfigMap) and the token."""
    controller = f"{release}-stagger-controller"
    tls = cluster.get("secret", f"{controller}-tls", namespace)
    token = cluster.get("secret", f"{controller}-token", namespace)
    ca = cluster.get("configmap", f"{controller}-ca", namespace)
    hooks = cluster.get("mutatingwebhookconfiguration", controller)
    assert tls and token and ca and hooks
    bundles = {hook["clientConfig"]["caBundle"] for hook in hooks["webhooks"]}
    assert len(bundles) == 1, bundles
    [bundle] = bundles
    assert base64.b64decode(bundle).decode().strip() == ca["data"]["ca.crt"].strip()
    return {**tls["data"], "token": token["data"]["token"], "caBundle": bundle}


def manifest_objects(cluster: Cluster, release: str, namespace: str) -> list[tuple[str, str, str | None]]:
    """(kind, name, namespace) of every object of the release, from Helm's own record of it."""
    text = cluster.run("helm", "get", "manifest", release, "-n", namespace).stdout
    objects = []
    for doc in yaml.safe_load_all(text):
        if doc:
            meta = doc["metadata"]
            objects.append((doc["kind"], meta["name"], meta.get("namespace")))
    return objects


@pytest.mark.parametrize(
    "apply",
    [pytest.param((), id="server-side-apply"), pytest.param(("--server-side=false",), id="client-side")],
)
def test_install_upgrade_uninstall(control_plane: ControlPlane, apply: tuple[str, ...]) -> None:
    cluster = Cluster(control_plane.kubeconfig)
    release = "ssa" if not apply else "csa"
    namespace = f"stagger-{release}"
    cluster.run("helm", "install", release, str(CHART), "-n", namespace, "--create-namespace", *apply)
    objects = manifest_objects(cluster, release, namespace)
    kinds = {kind for kind, _, _ in objects}
    assert {"DaemonSet", "Deployment", "MutatingWebhookConfiguration", "ClusterRole", "Secret"} <= kinds
    for kind, name, ns in objects:
        found = cluster.get(kind, name, ns)
        assert found is not None, (kind, name)
        assert found["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    deployment = cluster.get("deployment", f"{release}-stagger-controller", namespace)
    assert deployment is not None
    operations = {entry["operation"] for entry in deployment["metadata"]["managedFields"]}
    # Server-side apply records an Apply owner; the client-side three-way merge an Update.
    assert ("Apply" in operations) == (not apply), operations
    first = generated(cluster, release, namespace)

    cluster.run(
        "helm", "upgrade", release, str(CHART), "-n", namespace, "--set", "controller.logLevel=debug", *apply
    )
    assert generated(cluster, release, namespace) == first
    deployment = cluster.get("deployment", f"{release}-stagger-controller", namespace)
    assert deployment is not None
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "STAGGER_LOG_LEVEL", "value": "debug"} in container["env"]

    cluster.run("helm", "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    left = [(kind, name) for kind, name, ns in objects if cluster.get(kind, name, ns) is not None]
    assert left == [], left
