"""PATCH: JSON patch (RFC 6902), merge patch (RFC 7386, null deletes, lists replaced) and strategic
merge patch driven by the OpenAPI patch strategies (containers/env/volumes by name, ports by
containerPort, conditions by type, finalizers as a set, atomic tolerations, $patch/$retainKeys/
$setElementOrder/$deleteFromPrimitiveList directives); apply-patch is 415."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.emulator.patch import merge_patch, strategic_merge_patch
from sim.emulator.schema import Schemas
from tests.emulator.conftest import Core, Http, pod

POD = "io.k8s.api.core.v1.Pod"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def schemas() -> Schemas:
    return Schemas()


def smp(schemas: Schemas, original: dict[str, Any], patch: dict[str, Any]) -> Any:
    return strategic_merge_patch(original, patch, schemas=schemas, node=schemas.root(POD))


def two_containers() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "app:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                },
                {"name": "side", "image": "side:1"},
            ],
            "tolerations": [{"key": "t1", "operator": "Exists"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]
        },
    }


def test_strategic_merge_patch_merges_containers_by_name(schemas: Schemas) -> None:
    patched = smp(schemas, two_containers(), {"spec": {"containers": [{"name": "side", "image": "side:2"}]}})
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [
        ("app", "app:1"),
        ("side", "side:2"),
    ]
    added = smp(schemas, two_containers(), {"spec": {"containers": [{"name": "new", "image": "n"}]}})
    assert [c["name"] for c in added["spec"]["containers"]] == ["app", "side", "new"]


def test_strategic_merge_patch_nested_lists_and_keys(schemas: Schemas) -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "env": [
                        {"name": "B", "value": "two"},
                        {"name": "A", "$patch": "delete"},
                        {"name": "C", "value": "3"},
                    ],
                    "ports": [{"containerPort": 443, "protocol": "TCP"}],
                }
            ],
            "volumes": [{"name": "w", "configMap": {"name": "cm"}}],
        }
    }
    patched = smp(schemas, two_containers(), patch)
    app = patched["spec"]["containers"][0]
    assert app["env"] == [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    assert [p["containerPort"] for p in app["ports"]] == [80, 443]
    assert [v["name"] for v in patched["spec"]["volumes"]] == ["v", "w"]


def test_strategic_merge_patch_conditions_by_type_and_atomic_tolerations(schemas: Schemas) -> None:
    patch = {
        "spec": {"tolerations": [{"key": "t2", "operator": "Exists"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    patched = smp(schemas, two_containers(), patch)
    assert patched["spec"]["tolerations"] == [{"key": "t2", "operator": "Exists"}]
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_strategic_merge_patch_maps_finalizers_and_directives(schemas: Schemas) -> None:
    patched = smp(
        schemas, two_containers(), {"metadata": {"labels": {"a": None, "c": "3"}, "finalizers": ["y", "x"]}}
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["metadata"]["finalizers"] == ["x", "y"]
    removed = smp(schemas, two_containers(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert removed["metadata"]["finalizers"] == []
    replaced = smp(schemas, two_containers(), {"metadata": {"labels": {"$patch": "replace", "only": "me"}}})
    assert replaced["metadata"]["labels"] == {"only": "me"}
    dropped = smp(schemas, two_containers(), {"spec": {"$patch": "delete"}})
    assert "spec" not in dropped
    whole = smp(
        schemas,
        two_containers(),
        {"spec": {"containers": [{"name": "x", "image": "x"}, {"$patch": "replace"}]}},
    )
    assert [c["name"] for c in whole["spec"]["containers"]] == ["x"]
    ordered = smp(
        schemas,
        two_containers(),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                "containers": [{"name": "app", "image": "app:2"}],
            }
        },
    )
    assert [(c["name"], c["image"]) for c in ordered["spec"]["containers"]] == [
        ("side", "side:1"),
        ("app", "app:2"),
    ]


def test_strategic_merge_patch_retain_keys(schemas: Schemas) -> None:
    deployment = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}
    patched = strategic_merge_patch(
        deployment,
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
        schemas=schemas,
        node=schemas.root("io.k8s.api.apps.v1.Deployment"),
    )
    assert patched["spec"]["strategy"] == {"type": "Recreate"}


def test_strategic_merge_patch_does_not_modify_its_input(schemas: Schemas) -> None:
    original = two_containers()
    frozen = copy.deepcopy(original)
    smp(
        schemas,
        original,
        {"spec": {"containers": [{"name": "app", "image": "z"}]}, "metadata": {"labels": {"a": None}}},
    )
    assert original == frozen


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=2), json_values, max_size=4)


@given(target=json_objects, patch=json_objects)
def test_merge_patch_is_idempotent(target: dict[str, Any], patch: dict[str, Any]) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


@given(
    labels=st.dictionaries(st.sampled_from("abcd"), st.sampled_from(["1", "2"])),
    patch=st.dictionaries(st.sampled_from("abcd"), st.none() | st.sampled_from(["1", "3"])),
)
def test_label_patches_agree_between_merge_and_strategic(
    schemas: Schemas, labels: dict[str, str], patch: dict[str, Any]
) -> None:
    body = {"metadata": {"labels": patch}}
    original = {"metadata": {"labels": labels}}
    assert smp(schemas, original, body) == merge_patch(original, body)


def test_patch_types_through_the_server(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p", labels={"a": "1", "b": "2"}))
    json_patch = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
    ]
    assert core.patch_namespaced_pod("p", "default", json_patch).metadata.labels == {"a": "9", "b": "2"}
    failed = http.patch(
        f"{PODS}/p",
        [{"op": "test", "path": "/metadata/labels/a", "value": "1"}],
        "application/json-patch+json",
    )
    assert failed.status_code == 422
    merged = http.patch(f"{PODS}/p", {"metadata": {"labels": {"b": None}}}, "application/merge-patch+json")
    assert merged.status_code == 200 and merged.json()["metadata"]["labels"] == {"a": "9"}
    strategic = http.patch(
        f"{PODS}/p",
        {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.11"}]}},
        "application/strategic-merge-patch+json",
    )
    assert strategic.status_code == 200
    assert [c["image"] for c in strategic.json()["spec"]["containers"]] == ["registry.k8s.io/pause:3.11"]
    apply = http.patch(f"{PODS}/p", {"metadata": {}}, "application/apply-patch+yaml")
    assert apply.status_code == 415 and apply.json()["reason"] == "UnsupportedMediaType"


def test_status_patch_merges_conditions(core: Core) -> None:
    core.create_namespaced_pod("default", pod("p"))
    core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    patched = core.patch_namespaced_pod_status(
        "p", "default", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert patched.status.phase == "Running"
    assert [(c.type, c.status) for c in patched.status.conditions] == [
        ("PodScheduled", "True"),
        ("Ready", "True"),
    ]


def test_patch_of_a_missing_object_is_404(http: Http) -> None:
    response = http.patch(
        f"{PODS}/ghost", {"metadata": {"labels": {"a": "b"}}}, "application/merge-patch+json"
    )
    assert response.status_code == 404
