"""Request bodies the Go types cannot hold: 400 BadRequest worded by encoding/json (UnmarshalTypeError, the
first in document order) or resource.Quantity, wrapped by the apiserver's decoder ("KIND in version "V"
cannot be handled as a KIND: ..."); and what a DELETE answers (the generic store's Success Status,
k8s.io/apiserver/pkg/registry/generic/registry/store.go)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.support import PAUSE, Conn, pod

CONTAINER = {"name": "c", "image": PAUSE}
QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def with_spec(**spec: Any) -> dict[str, Any]:
    manifest = pod("p")
    manifest["spec"].update(spec)
    return manifest


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            {"metadata": {"name": "p", "labels": {"x": 5}}, "spec": {"containers": [CONTAINER]}},
            "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        (
            {"metadata": {"name": "p"}, "spec": "nope"},
            "json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec",
        ),
        (
            with_spec(hostNetwork="yes"),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.hostNetwork of type bool",
        ),
        (
            with_spec(containers=[{**CONTAINER, "ports": [{"containerPort": 1.5}]}]),
            "json: cannot unmarshal number 1.5 into Go struct field ContainerPort.spec.containers.ports.containerPort "
            "of type int32",
        ),
        (with_spec(containers=[{**CONTAINER, "resources": {"requests": {"cpu": True}}}]), QUANTITY),
        (with_spec(containers=[{**CONTAINER, "resources": {"limits": {"memory": "lots"}}}]), QUANTITY),
        (
            with_spec(nodeSelector=["x"]),
            "json: cannot unmarshal array into Go struct field PodSpec.spec.nodeSelector of type map[string]string",
        ),
        (
            with_spec(containers=[{**CONTAINER, "args": "x"}]),
            "json: cannot unmarshal string into Go struct field Container.spec.containers.args of type []string",
        ),
        (
            {"metadata": "x", "spec": {"containers": [CONTAINER]}},
            "json: cannot unmarshal string into Go struct field Pod.metadata of type v1.ObjectMeta",
        ),
        (
            with_spec(tolerations=[{"tolerationSeconds": "x"}], priority="y"),
            "json: cannot unmarshal string into Go struct field Toleration.spec.tolerations.tolerationSeconds of "
            "type int64",
        ),
        (
            with_spec(containers="nope"),
            "json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container",
        ),
    ],
    ids=[
        "label-value",
        "spec",
        "bool",
        "fraction",
        "quantity-type",
        "quantity-text",
        "map",
        "slice",
        "metadata",
        "first-in-order",
        "containers",
    ],
)
async def test_a_pod_of_the_wrong_shape_cannot_be_decoded(
    kube: Conn, body: dict[str, Any], problem: str
) -> None:
    reply = await kube.post(kube.pods, body)
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f'Pod in version "v1" cannot be handled as a Pod: {problem}',
        "reason": "BadRequest",
        "code": 400,
    }


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "bool"), ({"a": 1}, "object"), (1.5, "number 1.5")],
    ids=["bool", "object", "fraction"],
)
async def test_an_int_or_string_decodes_as_an_int32(kube: Conn, value: Any, shown: str) -> None:
    body = {
        "metadata": {"name": "b"},
        "spec": {"maxUnavailable": value, "selector": {"matchLabels": {"a": "b"}}},
    }
    reply = await kube.post(kube.pdbs, body)
    assert reply.status == 400
    assert reply.body["message"] == (
        'PodDisruptionBudget in version "v1" cannot be handled as a PodDisruptionBudget: json: cannot unmarshal '
        f"{shown} into Go struct field PodDisruptionBudgetSpec.spec.maxUnavailable of type int32"
    )


async def test_deleting_answers_a_success_status_without_a_code(kube: Conn) -> None:
    created = await kube.created(kube.configmaps, {"metadata": {"name": "c"}})
    reply = await kube.delete(f"{kube.configmaps}/c")
    assert reply.status == 200
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Success",
        "details": {"name": "c", "kind": "configmaps", "uid": created["metadata"]["uid"]},
    }
    again = await kube.delete(f"{kube.configmaps}/c")
    assert (again.status, again.body["message"]) == (404, 'configmaps "c" not found')
