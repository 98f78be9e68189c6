"""The ValidatingAdmissionPolicy that confines lockd's writes (templates/lockd-vap.yaml), as rendered: on by
default, with its binding (Deny, 403); left out with `lockd.confineWrites=false`
and where discovery does not name the kind (NOTES.txt then warns); it matches lockd's own ServiceAccount (release namespace, fullname), checks the
chart's prefix and the component lockd writes Events as. What the policy allows and refuses on a real API
server: tests/hostile/test_lockd_writes_confined.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from lockd.clusterwatch import EVENT_COMPONENT
from tests.chart.helm import CHART, FULLNAME, NAMESPACE, PREFIX, RELEASE, Doc, named, render
from tests.tools import tool

POLICY = f"{FULLNAME}-lockd-writes"
VAP = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def policy_objects(docs: list[Doc]) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] in (VAP, BINDING)]


def variables(policy: Doc) -> dict[str, str]:
    return {item["name"]: item["expression"] for item in policy["spec"]["variables"]}


def test_on_by_default_with_a_binding_that_denies() -> None:
    docs = render()
    policy, binding = named(docs, VAP, POLICY), named(docs, BINDING, POLICY)
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    # A refusal says who may not write (403), not that the object is invalid (422, the default).
    assert {item.get("reason") for item in policy["spec"]["validations"]} == {"Forbidden"}
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
    # Every write lockd's token could make to pods (subresources too) and to Events is seen.
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""] and rule["operations"] == ["*"]
    assert set(rule["resources"]) == {"pods", "pods/*", "events"}
    assert policy["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize(
    ("sets", "flags"),
    [
        pytest.param(("lockd.confineWrites=false",), (), id="turned-off"),
        # A cluster's discovery names every kind it serves: without this one it is left out, whatever the
        # version (ValidatingAdmissionPolicy turned off in the API server).
        pytest.param((), ("--api-versions=apps/v1/DaemonSet",), id="not-served"),
    ],
)
def test_left_out(sets: tuple[str, ...], flags: tuple[str, ...]) -> None:
    assert policy_objects(render(*sets, flags=flags)) == []


def test_discovery_naming_the_kind_is_enough() -> None:
    # `helm install` sees the kind in discovery.
    flags = ("--api-versions=apps/v1/DaemonSet", f"--api-versions={VAP_API}")
    assert len(policy_objects(render(flags=flags))) == 2


@pytest.mark.parametrize(
    ("sets", "namespace", "account", "prefix"),
    [
        pytest.param((), NAMESPACE, f"{FULLNAME}-lockd", PREFIX, id="defaults"),
        pytest.param(
            ("fullnameOverride=pacer", "prefix=stagger.example.com"),
            NAMESPACE,
            "pacer-lockd",
            "stagger.example.com",
            id="overrides",
        ),
    ],
)
def test_it_matches_lockds_own_service_account_and_the_prefix(
    sets: tuple[str, ...], namespace: str, account: str, prefix: str
) -> None:
    docs = render(*sets)
    [policy] = [doc for doc in docs if doc["kind"] == VAP]
    # The account the DaemonSet runs as, in the release namespace.
    daemonset = named(docs, "DaemonSet", account)
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account
    assert named(docs, "ServiceAccount", account)["metadata"]["namespace"] == namespace
    [condition] = policy["spec"]["matchConditions"]
    assert (
        condition["expression"]
        == f"request.userInfo.username == 'system:serviceaccount:{namespace}:{account}'"
    )
    assert variables(policy)["prefix"] == f"'{prefix}/'"
    assert (
        policy["metadata"]["name"] == named(docs, BINDING, policy["metadata"]["name"])["spec"]["policyName"]
    )


def test_it_reads_the_node_from_the_tokens_claim_and_the_events_lockd_writes() -> None:
    policy = named(render(), VAP, POLICY)
    assert (
        "request.userInfo.extra['authentication.kubernetes.io/node-name'][0]" in variables(policy)["nodeName"]
    )
    # The component lockd writes its Events as (lockd/clusterwatch.py) is the one the policy lets through.
    expressions = " ".join(item["expression"] for item in policy["spec"]["validations"])
    assert f"== '{EVENT_COMPONENT}'" in expressions
    assert "oldObject.spec.?nodeName.orValue('') == variables.nodeName" in expressions


def notes(tmp_path: Path, *flags: str) -> str:
    """NOTES.txt as `helm template` would render it with these flags (it prints no notes itself, and
    `helm install --dry-run` takes no Kubernetes version): a copy of the chart that renders it into a
    ConfigMap."""
    chart = tmp_path / "stagger"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes-under-test.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        '  notes: {{ tpl (.Files.Get "notes-under-test.txt") . | quote }}\n'
    )
    args = [str(tool("helm")), "template", RELEASE, str(chart), "--namespace", NAMESPACE, *flags]
    args += ["--show-only", "templates/zz-notes.yaml"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    text: str = yaml.safe_load(done.stdout)["data"]["notes"]
    return text


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        pytest.param((), False, id="rendered"),
        pytest.param(("--api-versions=apps/v1/DaemonSet", f"--api-versions={VAP_API}"), False, id="served"),
        pytest.param(("--api-versions=apps/v1/DaemonSet",), True, id="not-served"),
        pytest.param(
            ("--api-versions=apps/v1/DaemonSet", "--set=lockd.confineWrites=false"), False, id="turned-off"
        ),
    ],
)
def test_notes_warn_when_the_policy_is_left_out(tmp_path: Path, flags: tuple[str, ...], warned: bool) -> None:
    text = notes(tmp_path, *flags)
    assert ("WARNING: lockd.confineWrites is on" in text) is warned
    assert (f"{POLICY} was left out" in text) is warned
