"""Deletion: unbound or terminal pods and other kinds go at once; bound pods get deletionTimestamp +
deletionGracePeriodSeconds until a grace-0 delete (the kubelet's), or the server's own fallback after
the grace period; grace periods may only shrink; finalizers hold an object until they are removed;
DeleteOptions from body or query, preconditions, propagationPolicy; deletecollection."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from sim.emulator.server import ApiServerSettings
from stagger.timestamps import parse_rfc3339
from tests.emulator.conftest import Core, Http, pod

PODS = "/api/v1/namespaces/default/pods"


def bound_pod(core: Core, name: str, **spec: Any) -> None:
    core.create_namespaced_pod("default", pod(name, **spec))
    core.create_namespaced_pod_binding(
        name, "default", {"metadata": {"name": name}, "target": {"name": "n1"}}, _preload_content=False
    )


def exists(core: Core, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "default")
    except ApiException as err:
        assert err.status == 404
        return False
    return True


def test_unbound_pod_is_deleted_at_once(core: Core) -> None:
    core.create_namespaced_pod("default", pod("p"))
    core.delete_namespaced_pod("p", "default")
    assert not exists(core, "p")


def test_bound_pod_is_deleted_gracefully_then_finally(core: Core, http: Http) -> None:
    bound_pod(core, "p")
    response = http.delete(f"{PODS}/p")
    assert response.status_code == 200
    metadata = response.json()["metadata"]
    assert metadata["deletionGracePeriodSeconds"] == 30
    assert 25 <= parse_rfc3339(metadata["deletionTimestamp"]) - time.time() <= 31
    assert metadata["generation"] == 2
    assert exists(core, "p")
    longer = http.delete(f"{PODS}/p", {"gracePeriodSeconds": 60}).json()["metadata"]
    assert (
        longer["deletionGracePeriodSeconds"] == 30
        and longer["deletionTimestamp"] == metadata["deletionTimestamp"]
    )
    shorter = http.delete(f"{PODS}/p?gracePeriodSeconds=10").json()["metadata"]
    assert shorter["deletionGracePeriodSeconds"] == 10
    assert parse_rfc3339(shorter["deletionTimestamp"]) == parse_rfc3339(metadata["deletionTimestamp"]) - 20
    final = http.delete(f"{PODS}/p", {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
    assert final.status_code == 200
    assert not exists(core, "p")


def test_terminal_bound_pod_is_deleted_at_once(core: Core) -> None:
    bound_pod(core, "p")
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("p", "default")
    assert not exists(core, "p")


@pytest.mark.parametrize(
    "settings", [pytest.param(ApiServerSettings(graceful_deletion_slack=0.1), id="slack")]
)
def test_server_finishes_a_graceful_deletion_nobody_finished(core: Core) -> None:
    bound_pod(core, "p", terminationGracePeriodSeconds=1)
    core.delete_namespaced_pod("p", "default")
    assert exists(core, "p")
    deadline = time.monotonic() + 10
    while exists(core, "p"):
        assert time.monotonic() < deadline, "the pod was never removed"
        time.sleep(0.05)


def test_finalizers_hold_an_object_until_removed(core: Core, http: Http) -> None:
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "cm", "finalizers": ["example.com/keep"]}}
    )
    held = http.delete("/api/v1/namespaces/default/configmaps/cm")
    assert held.status_code == 200
    assert (
        held.json()["metadata"]["deletionTimestamp"]
        and held.json()["metadata"]["deletionGracePeriodSeconds"] == 0
    )
    cm = core.read_namespaced_config_map("cm", "default")
    added = http.patch(
        "/api/v1/namespaces/default/configmaps/cm",
        {"metadata": {"finalizers": ["example.com/keep", "example.com/more"]}},
        "application/merge-patch+json",
    )
    assert added.status_code == 422
    assert cm.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_config_map("cm", "default")
    assert caught.value.status == 404


def test_pod_with_finalizer_stays_after_the_kubelet_delete(core: Core) -> None:
    bound_pod(core, "p")
    core.patch_namespaced_pod("p", "default", {"metadata": {"finalizers": ["example.com/keep"]}})
    core.delete_namespaced_pod("p", "default")
    core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    kept = core.read_namespaced_pod("p", "default")
    assert kept.metadata.deletion_grace_period_seconds == 0
    core.patch_namespaced_pod(
        "p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/keep"]}}
    )
    assert not exists(core, "p")


def test_preconditions(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    response = http.delete(
        "/api/v1/namespaces/default/configmaps/cm", {"preconditions": {"uid": "not-the-uid"}}
    )
    assert response.status_code == 409 and response.json()["reason"] == "Conflict"
    assert "the UID in the precondition (not-the-uid) does not match" in response.json()["message"]


def test_propagation_policy_is_accepted_and_checked(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "a"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})
    assert (
        http.delete(
            "/api/v1/namespaces/default/configmaps/a", {"propagationPolicy": "Background"}
        ).status_code
        == 200
    )
    bad = http.delete("/api/v1/namespaces/default/configmaps/b?propagationPolicy=Sometimes")
    assert bad.status_code == 400


def test_delete_collection_with_a_selector(core: Core) -> None:
    for name, labels in (("a", {"x": "1"}), ("b", {"x": "1"}), ("c", {"x": "2"})):
        core.create_namespaced_pod("default", pod(name, labels=labels))
    core.delete_collection_namespaced_pod("default", label_selector="x=1")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["c"]
