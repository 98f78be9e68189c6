"""The Helm chart renders to valid Kubernetes objects (checked against the official schemas with
kubernetes-validate), its default policy is a valid stagger policy file, and lockd's DaemonSet carries
what cluster mode needs (node name, hostPort, probes, the policy file, least-privilege RBAC)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from stagger import policy
from tests.tools import ROOT, tool

CHART = ROOT / "charts" / "stagger"
K8S_VERSION = "1.30.0"


def render(*sets: str) -> list[dict[str, Any]]:
    args = [str(tool("helm")), "template", "demo", str(CHART), "--namespace", "stagger"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, [doc["kind"] for doc in docs]
    return found[0]


def test_lint() -> None:
    done = subprocess.run([str(tool("helm")), "lint", str(CHART)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(("lockd.controllerUrl=https://ctl.stagger:8443", "lockd.events=false"), id="controller"),
    ],
)
def test_every_object_is_valid(sets: tuple[str, ...]) -> None:
    for doc in render(*sets):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_default_policy_is_a_valid_policy_file() -> None:
    config = by_kind(render(), "ConfigMap")
    parsed = policy.parse_policy_text(config["data"]["policies.yaml"], source="chart")
    assert [p.name for p in parsed.node_policies] == ["default"]


def test_lockd_daemonset_has_what_cluster_mode_needs() -> None:
    docs = render("lockd.controllerUrl=https://ctl.stagger:8443")
    daemonset = by_kind(docs, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["STAGGER_CONTROLLER_URL"]["value"] == "https://ctl.stagger:8443"
    assert "STAGGER_STANDALONE" not in env
    assert container["ports"][0]["hostPort"] == 9400
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    # Shutdown must finish within the grace period: lockd answers long polls at once on SIGTERM.
    assert pod["terminationGracePeriodSeconds"] >= 6
    role = by_kind(docs, "ClusterRole")
    verbs = {(tuple(rule["resources"]), tuple(rule["verbs"])) for rule in role["rules"]}
    assert verbs == {
        (("pods",), ("get", "list", "watch", "patch")),
        (("nodes",), ("get", "list", "watch")),
        (("events",), ("create", "patch")),
    }


def test_lockd_settings_in_the_chart_are_accepted_by_lockd(tmp_path: Path) -> None:
    from lockd.settings import parse_settings

    daemonset = by_kind(render(), "DaemonSet")
    env = {
        e["name"]: e["value"]
        for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    env["STAGGER_POLICIES"] = str(tmp_path / "p.yaml")
    settings = parse_settings([], env)
    assert settings.port == 9400
    assert settings.standalone is False
    assert settings.anonymous_allowed is False
    assert settings.max_queue == 1000
    anonymous = by_kind(render("lockd.allowAnonymous=true"), "DaemonSet")
    env = {e["name"]: e.get("value") for e in anonymous["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert parse_settings([], {**env, "STAGGER_POLICIES": "p.yaml"}).anonymous_allowed is True
