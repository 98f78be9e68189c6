"""values.schema.json: a bad value (wrong type, out of range, not one of the choices, a duration stagger
would not read, a typo'd key at any level, in `--set` or in a values file) fails `helm template` (and
`helm lint --strict`) with a message naming the field; values that are right in unusual spellings pass; every key of values.yaml is in
the schema with a type, and every object of ours refuses unknown keys (the Kubernetes types passed through
to the pods do not)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stagger.options import seconds
from tests.chart.helm import CHART, KUBERNETES_VALUES, RenderError, render, value_leaves
from tests.tools import tool

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
# Kubernetes types handed to the pods as they are: Kubernetes checks them.
KUBERNETES_TYPES = {"/" + key.replace(".", "/") for key in KUBERNETES_VALUES}


def bad(field: str, *sets: str, strings: tuple[str, ...] = (), message: str = "") -> Any:
    return pytest.param(sets, strings, field, message, id=f"{field}:{(sets or strings)[0].split('=', 1)[1]}")


@pytest.mark.parametrize(
    ("sets", "strings", "field", "message"),
    [
        bad("/controller/webhook/timeoutSeconds", "controller.webhook.timeoutSeconds=31", message="maximum"),
        bad("/controller/webhook/timeoutSeconds", "controller.webhook.timeoutSeconds=0", message="minimum"),
        bad("/controller/webhook/failurePolicy", "controller.webhook.failurePolicy=Reject", message="one of"),
        bad("/controller/webhook/excludeNamespaces/0", "controller.webhook.excludeNamespaces={Kube_System}"),
        bad("/controller/webhook", "controller.webhook.job=false", message="additional properties 'job'"),
        bad("/lockd/logLevel", "lockd.logLevel=verbose", message="'debug', 'info', 'warning', 'error'"),
        bad("/controller/logLevel", "controller.logLevel=trace", message="one of"),
        bad("/lockd/groupFailurePolicy", "lockd.groupFailurePolicy=half", message="'open', 'closed'"),
        bad("/image/pullPolicy", "image.pullPolicy=Sometimes", message="one of"),
        bad("/image/repository", "image.repository=", message="minLength"),
        bad("/lockd/port", "lockd.port=0", message="minimum"),
        bad("/lockd/port", "lockd.port=70000", message="maximum"),
        bad("/controller/port", "controller.port=65536", message="maximum"),
        bad("/controller/probePort", "controller.probePort=http", message="want integer"),
        bad("/controller/replicas", "controller.replicas=0", message="minimum"),
        bad("/lockd/maxQueue", "lockd.maxQueue=0", message="minimum"),
        bad("/lockd/groupUnavailableAfter", "lockd.groupUnavailableAfter=30", message="want string"),
        bad("/lockd/groupUnavailableAfter", strings=("lockd.groupUnavailableAfter=30",), message="pattern"),
        bad("/controller/reloadInterval", "controller.reloadInterval=5 s", message="pattern"),
        bad("/controller/headerTimeout", "controller.headerTimeout=-1s", message="pattern"),
        bad(
            "/controller/shutdownTimeoutSeconds",
            "controller.shutdownTimeoutSeconds=5s",
            message="want integer",
        ),
        bad("/controller/admitTimeoutSeconds", "controller.admitTimeoutSeconds=half"),
        bad("/controller/admitTimeoutSeconds", "controller.admitTimeoutSeconds=11"),
        bad(
            "/controller/tls/certManager/duration",
            "controller.tls.certManager.duration=90d",
            message="pattern",
        ),
        bad("/controller/tls/caBundle", "controller.tls.caBundle=not base64!", message="pattern"),
        bad("/controller/tls", "controller.tls.existingSecrets=x", message="additional properties"),
        bad(
            "/controller/podDisruptionBudget/maxUnavailable",
            "controller.podDisruptionBudget.maxUnavailable=half",
        ),
        bad(
            "/metrics/serviceMonitor/interval",
            "metrics.serviceMonitor.interval=30 seconds",
            message="pattern",
        ),
        bad("/metrics/serviceMonitor", "metrics.serviceMonitor.enable=true", message="additional properties"),
        bad("/lockd", "lockd.hostproc=true", message="additional properties 'hostproc'"),
        bad("/lockd/hostProc", "lockd.hostProc=yes-please", message="want boolean"),
        bad("/lockd/controllerUrl", "lockd.controllerUrl=ctl.elsewhere:8443", message="pattern"),
        bad("/lockd/updateStrategy/type", "lockd.updateStrategy.type=Sometimes", message="one of"),
        bad("/prefix", "prefix=example.com/stagger", message="pattern"),
        bad("/policies", "policies.nodePolicy[0].name=x", message="additional properties 'nodePolicy'"),
        bad("/imagePullSecrets/0", "imagePullSecrets[0].nme=pull", message="missing property 'name'"),
        bad("", "polices.nodePolicies[0].name=x", message="additional properties 'polices'"),
    ],
)
def test_a_bad_value_fails_naming_the_field(
    sets: tuple[str, ...], strings: tuple[str, ...], field: str, message: str
) -> None:
    with pytest.raises(RenderError) as failed:
        render(*sets, strings=strings)
    text = str(failed.value)
    assert "values don't meet the specifications of the schema" in text
    assert f"at '{field}'" in text, text
    assert message in text, text


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        pytest.param(("lockd.port=0",), "at '/lockd/port': minimum: got 0, want 1", id="range"),
        pytest.param(("controller.webhook.failurePolicy=ignore",), "at '/controller/webhook/failurePolicy'", id="enum"),
        pytest.param(("lockd.hostproc=true",), "additional properties 'hostproc' not allowed", id="typo"),
    ],
)  # fmt: skip
def test_helm_lint_fails_on_a_bad_value_too(sets: tuple[str, ...], expected: str) -> None:
    args = [str(tool("helm")), "lint", "--strict", str(CHART), *(f"--set={item}" for item in sets)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert expected in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_bad_values_file_fails_naming_the_field(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("lockd:\n  prot: 9400\ncontroller:\n  webhook:\n    timeoutSeconds: 45\n")
    with pytest.raises(RenderError) as failed:
        render(files=(values,))
    assert "at '/lockd': additional properties 'prot' not allowed" in str(failed.value)
    assert "at '/controller/webhook/timeoutSeconds': maximum: got 45, want 30" in str(failed.value)


@pytest.mark.parametrize(
    ("sets", "strings"),
    [
        pytest.param(("controller.admitTimeoutSeconds=0.25",), (), id="admit-timeout-as-set-gives-it"),
        pytest.param(("controller.admitTimeoutSeconds=1", "controller.webhook.timeoutSeconds=30"), (), id="ints"),
        pytest.param(("policies=null",), (), id="policies-null"),
        pytest.param(("lockd.updateStrategy.rollingUpdate.maxUnavailable=3",), (), id="max-unavailable-number"),
        pytest.param(("controller.podDisruptionBudget.maxUnavailable=50%",), (), id="budget-percent"),
        pytest.param((), ("lockd.groupUnavailableAfter=1h30m", "controller.headerTimeout=.5s"), id="durations"),
        pytest.param(("lockd.controllerUrl=http://ctl:8080", "controller.enabled=false"), (), id="http-url"),
        pytest.param(("controller.tls.certManager.enabled=true", "controller.tls.certManager.duration=1.5h"), (), id="go-duration"),
        pytest.param(("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=1m30s"), (), id="prom-duration"),
        pytest.param(("lockd.tolerations[0].key=gpu", "lockd.tolerations[0].operator=Exists"), (), id="kubernetes-type"),
    ],
)  # fmt: skip
def test_good_values_pass(sets: tuple[str, ...], strings: tuple[str, ...]) -> None:
    assert render(*sets, strings=strings)


def schema_at(pointer: str) -> dict[str, Any]:
    node = SCHEMA
    for key in pointer.strip("/").split("/"):
        node = node["properties"][key]
    return node


@pytest.mark.parametrize("key", sorted(value_leaves()))
def test_every_value_is_typed(key: str) -> None:
    pointer = "/" + key.replace(".", "/")
    node = schema_at(pointer)
    assert "type" in node or "anyOf" in node, pointer
    assert node.get("description"), pointer


def objects(node: dict[str, Any], pointer: str = "") -> dict[str, dict[str, Any]]:
    found = {pointer: node} if node.get("type") == "object" or "object" in node.get("type", []) else {}
    for key, child in node.get("properties", {}).items():
        found |= objects(child, f"{pointer}/{key}")
    return found


def test_our_objects_refuse_unknown_keys_and_kubernetes_types_do_not() -> None:
    found = objects(SCHEMA)
    for pointer, node in found.items():
        if any(pointer == k or pointer.startswith(f"{k}/") for k in KUBERNETES_TYPES):
            assert node.get("additionalProperties") in (None, {"type": "string"}), pointer
        elif pointer != "/global":
            assert node.get("additionalProperties") is False, pointer
    assert {"", "/controller", "/controller/tls/certManager", "/lockd", "/policies"} <= set(found)


@pytest.mark.parametrize(
    "text",
    ["90s", "10m", "1h30m", "500ms", "1.5s", ".5s", "2h45m30.5s", "100us", "5ns", "1h1m1s1ms"],
)
def test_the_duration_pattern_accepts_what_stagger_reads(text: str) -> None:
    pattern = schema_at("/controller/reloadInterval")["pattern"]
    assert re.fullmatch(pattern, text)
    assert seconds()(text, "--reload-interval") > 0


@pytest.mark.parametrize("text", ["90", "10 m", "1d", "-1s", "1.s", "s", "", "1h 30m", "PT5S"])
def test_the_duration_pattern_refuses_what_stagger_refuses(text: str) -> None:
    pattern = schema_at("/controller/reloadInterval")["pattern"]
    assert not re.fullmatch(pattern, text)
    with pytest.raises(ValueError):
        seconds()(text, "--reload-interval")
