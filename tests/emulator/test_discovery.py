"""Discovery documents (/api, /api/v1, /apis, /apis/<group>[/<version>], /version) and the official
client's discovery-driven dynamic client; unknown paths are 404 Status objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, dynamic

from sim.emulator.resources import RESOURCE_TYPES
from tests.emulator.conftest import Http


def test_core_discovery(http: Http) -> None:
    versions = http.get("/api").json()
    assert versions["kind"] == "APIVersions" and versions["versions"] == ["v1"]
    resources = {r["name"]: r for r in http.get("/api/v1").json()["resources"]}
    assert resources["pods"]["shortNames"] == ["po"]
    assert resources["pods"]["namespaced"] is True and resources["pods"]["kind"] == "Pod"
    assert set(resources["pods"]["verbs"]) >= {"create", "delete", "get", "list", "patch", "update", "watch"}
    assert resources["nodes"]["namespaced"] is False
    assert resources["namespaces"]["namespaced"] is False
    assert resources["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }
    assert resources["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert {"pods/binding", "configmaps", "secrets", "serviceaccounts", "events"} <= set(resources)


def test_group_discovery(http: Http) -> None:
    groups = {g["name"]: g for g in http.get("/apis").json()["groups"]}
    expected = {r.group for r in RESOURCE_TYPES if r.group}
    assert set(groups) == expected
    assert groups["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}
    assert http.get("/apis/policy").json()["kind"] == "APIGroup"
    apps = {r["name"]: r for r in http.get("/apis/apps/v1").json()["resources"]}
    assert apps["deployments"]["shortNames"] == ["deploy"]
    assert "deployments/status" in apps
    webhooks = http.get("/apis/admissionregistration.k8s.io/v1").json()["resources"]
    assert webhooks[0]["name"] == "mutatingwebhookconfigurations" and webhooks[0]["namespaced"] is False


def test_version(http: Http) -> None:
    version = http.get("/version").json()
    assert version["major"] == "1" and version["minor"] == "37"
    assert version["gitVersion"].startswith("v1.37.")


def test_unknown_paths_are_404_status(http: Http) -> None:
    for path in ("/apis/nope/v1", "/api/v1/widgets", "/apis/apps/v2/deployments", "/nothing"):
        response = http.get(path)
        assert response.status_code == 404, path
        assert response.json()["kind"] == "Status" and response.json()["reason"] == "NotFound"


def test_dynamic_client_discovers_and_uses_resources(api: client.ApiClient, tmp_path: Path) -> None:
    # Its discovery cache in the test's folder: by default the client leaves /tmp/osrcp-<hash>.json behind.
    cache = str(tmp_path / "discovery.json")
    dyn: Any = dynamic.DynamicClient(api, cache_file=cache)  # type: ignore[no-untyped-call]
    pdbs = dyn.resources.get(api_version="policy/v1", kind="PodDisruptionBudget")
    pdbs.create(
        body={
            "metadata": {"name": "budget"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}},
        },
        namespace="default",
    )
    assert [i.metadata.name for i in pdbs.get(namespace="default").items] == ["budget"]
