"""The chart with the values files of tests/chart/values/ (minimal, no controller, cert-manager, an existing
Secret, ServiceMonitor and host /proc, custom policies, most knobs turned) and with none: `helm lint
--strict` passes (the values schema included); every rendered object is valid for Kubernetes 1.34 and 1.37
(kubernetes-validate's strict schemas; the custom resources of cert-manager and the Prometheus Operator,
which it has no schema for, are listed and skipped); the policy file in the ConfigMap parses with stagger's
loader; lockd and the controller accept the settings the chart gives them (and get no Service environment
variables); the pods are restricted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from stagger import policy
from tests.chart.helm import (
    CHART,
    FULLNAME,
    NAMESPACE,
    by_kind,
    container,
    named,
    pod_spec,
    render,
    values,
)
from tests.tools import tool

VALUES = Path(__file__).parent / "values"
FILES = sorted(VALUES.glob("*.yaml"))
# The oldest and the newest minor CI tests (Chart.yaml's kubeVersion; kubernetes-validate ships schemas up to 1.37).
K8S_VERSIONS = ("1.34.0", "1.37.0")
# Custom resources: no schema in kubernetes-validate (their CRDs validate them at install).
CUSTOM_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
}
CONFIGS = [pytest.param((), id="defaults")] + [pytest.param((f,), id=f.stem) for f in FILES]


def test_the_values_files_are_there() -> None:
    assert {f.stem for f in FILES} >= {
        "minimal",
        "no-controller",
        "cert-manager",
        "existing-secret",
        "servicemonitor-hostproc",
        "custom-policies",
        "tuned",
    }


@pytest.mark.parametrize("files", CONFIGS)
def test_lint_strict(files: tuple[Path, ...]) -> None:
    args = [str(tool("helm")), "lint", "--strict", str(CHART), *(f"--values={f}" for f in files)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("files", CONFIGS)
def test_every_object_is_valid_kubernetes(files: tuple[Path, ...]) -> None:
    skipped, checked = set(), 0
    for doc in render(files=files):
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            skipped.add(doc["kind"])
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 5
    expected = {
        "cert-manager": {"Issuer", "Certificate"},
        "servicemonitor-hostproc": {"ServiceMonitor"},
    }
    assert skipped == expected.get(files[0].stem if files else "", set())


@pytest.mark.parametrize("files", CONFIGS)
def test_the_policy_file_loads(files: tuple[Path, ...]) -> None:
    text = named(render(files=files), "ConfigMap", f"{FULLNAME}-policies")["data"]["policies.yaml"]
    parsed = policy.parse_policy_text(text, source="chart", allow_empty=False)
    assert parsed.node_policies


@pytest.mark.parametrize("files", CONFIGS)
def test_the_processes_accept_their_settings(files: tuple[Path, ...]) -> None:
    from lockd.settings import parse_settings as lockd_settings
    from webhook.settings import parse_settings as controller_settings

    docs = render(files=files)
    downward = {"POD_NAME": "p-1", "POD_NAMESPACE": NAMESPACE, "NODE_NAME": "node-1"}
    lockd = by_kind(docs, "DaemonSet")
    settings = lockd_settings([], {**values(lockd), **downward})
    assert settings.server.port == container(lockd)["ports"][0]["containerPort"]
    controllers = [doc for doc in docs if doc["kind"] == "Deployment"]
    for controller in controllers:
        controller_settings([], {**values(controller), **downward})
    assert len(controllers) == (0 if files and files[0].stem == "no-controller" else 1)


@pytest.mark.parametrize("files", CONFIGS)
def test_every_pod_is_restricted(files: tuple[Path, ...]) -> None:
    workloads = [doc for doc in render(files=files) if doc["kind"] in ("DaemonSet", "Deployment")]
    assert workloads
    for workload in workloads:
        pod = pod_spec(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.get("hostNetwork", False) is False and pod.get("hostPID", False) is False
        for item in pod["containers"] + pod.get("initContainers", []):
            context = item["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context.get("privileged", False) is False
            assert "runAsUser" not in context or context["runAsUser"] != 0
            for mount in item.get("volumeMounts", []):
                assert mount.get("readOnly") is True, (workload["metadata"]["name"], mount)
        host_paths = [v["hostPath"] for v in pod.get("volumes", []) if "hostPath" in v]
        # The one hostPath the chart may mount: /proc, read-only, with lockd.hostProc.
        assert host_paths in ([], [{"path": "/proc", "type": "Directory"}])


@pytest.mark.parametrize("files", CONFIGS)
def test_no_service_environment_variables(files: tuple[Path, ...]) -> None:
    # A release named "stagger" has Services stagger-controller, stagger-lockd-metrics, ...: their
    # STAGGER_..._SERVICE_HOST variables would look like settings to both processes.
    for workload in render(files=files):
        if workload["kind"] in ("DaemonSet", "Deployment"):
            assert pod_spec(workload)["enableServiceLinks"] is False
