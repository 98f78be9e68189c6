"""StatefulSets: the defaults (pkg/apis/apps/v1/defaults.go SetDefaults_StatefulSet; MaxUnavailableStatefulSet
on by default since v1.37), the zero status (PrepareForCreate), ValidateStatefulSetSpec's template checks and
ValidateStatefulSetUpdate's immutable spec fields (pkg/apis/apps/validation/validation.go, v1.37; one
Forbidden error before), and the empty selector (`{}`, not a missing one) of every workload kind. Created with dryRun=All, or with a
scheduler that does not exist, so the pods the real controller makes stay put."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.support import MERGE, NO_SCHEDULER, PAUSE, Conn, invalid_message


def statefulsets(kube: Conn) -> str:
    return f"/apis/apps/v1/namespaces/{kube.ns}/statefulsets"


def statefulset(name: str, **pod_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": "main", "image": PAUSE}],
                    "schedulerName": NO_SCHEDULER,
                    **pod_spec,
                },
            },
        },
    }


async def test_defaults_and_zero_status(kube: Conn) -> None:
    reply = await kube.post(statefulsets(kube), statefulset("db"), params={"dryRun": "All"})
    assert reply.status == 201, reply.body
    spec = {k: v for k, v in reply.body["spec"].items() if k != "template"}
    rolling = {"partition": 0, "maxUnavailable": 1} if kube.minor >= 37 else {"partition": 0}
    assert spec == {
        "replicas": 0,
        "selector": {"matchLabels": {"app": "db"}},
        "serviceName": "",
        "podManagementPolicy": "OrderedReady",
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
        "revisionHistoryLimit": 10,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
    }
    assert reply.body["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    assert reply.body["status"] == {"replicas": 0, "availableReplicas": 0}
    assert reply.body["metadata"]["generation"] == 1


async def test_the_template_must_match_and_run_forever(kube: Conn) -> None:
    manifest = statefulset("db", restartPolicy="Never", activeDeadlineSeconds=5)
    manifest["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    reply = await kube.post(statefulsets(kube), manifest)
    assert reply.status == 422
    assert reply.causes == [
        (
            "FieldValueInvalid",
            "spec.template.metadata.labels",
            'Invalid value: {"app":"other"}: `selector` does not match template `labels`',
        ),
        (
            "FieldValueNotSupported",
            "spec.template.spec.restartPolicy",
            'Unsupported value: "Never": supported values: "Always"',
        ),
        (
            "FieldValueForbidden",
            "spec.template.spec.activeDeadlineSeconds",
            "Forbidden: activeDeadlineSeconds in StatefulSet is not Supported",
        ),
    ]
    empty = statefulset("db")
    empty["spec"]["selector"] = {}
    reply = await kube.post(statefulsets(kube), empty)
    assert reply.status == 422
    assert reply.body["message"] == invalid_message(
        "StatefulSet.apps",
        "db",
        "spec.selector: Invalid value: {}: empty selector is invalid for statefulset",
    )


async def test_only_some_spec_fields_may_change(kube: Conn) -> None:
    await kube.created(statefulsets(kube), statefulset("db"))
    path = f"{statefulsets(kube)}/db"
    reply = await kube.patch(
        path, {"spec": {"podManagementPolicy": "Parallel", "serviceName": "other"}}, MERGE
    )
    assert reply.status == 422
    if kube.minor >= 37:
        # One error per field, in ValidateStatefulSetUpdate's order, whatever the patch's.
        assert reply.body["message"] == invalid_message(
            "StatefulSet.apps",
            "db",
            'spec.serviceName: Invalid value: "other": field is immutable',
            'spec.podManagementPolicy: Invalid value: "Parallel": field is immutable',
        )
    else:
        assert reply.body["message"] == invalid_message(
            "StatefulSet.apps",
            "db",
            "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
            "'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
            "'minReadySeconds' are forbidden",
        )
    reply = await kube.patch(path, {"spec": {"replicas": 2, "minReadySeconds": 3}}, MERGE)
    assert reply.status == 200, reply.body
    assert (reply.body["spec"]["replicas"], reply.body["metadata"]["generation"]) == (2, 2)


@pytest.mark.parametrize(
    ("kind", "plural", "what"),
    [
        ("Deployment", "deployments", "deployment"),
        ("ReplicaSet", "replicasets", "deployment"),
        ("DaemonSet", "daemonsets", "daemonset"),
        ("StatefulSet", "statefulsets", "statefulset"),
    ],
)
async def test_an_empty_selector_is_invalid(kube: Conn, kind: str, plural: str, what: str) -> None:
    manifest = statefulset("w")
    manifest["kind"] = kind
    manifest["spec"] = {"selector": {}, "template": manifest["spec"]["template"]}
    reply = await kube.post(f"/apis/apps/v1/namespaces/{kube.ns}/{plural}", manifest)
    assert reply.status == 422
    assert reply.causes == [
        ("FieldValueInvalid", "spec.selector", f"Invalid value: {{}}: empty selector is invalid for {what}")
    ]
