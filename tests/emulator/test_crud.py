"""Object semantics through the official client and raw HTTP: create/get/list/update/delete, system
metadata (uid, creationTimestamp, generateName, generation, one global resourceVersion), the exact
Status bodies of 404 / 409 AlreadyExists / 409 Conflict, status subresource ownership, namespaces,
cluster-scoped kinds, events.k8s.io <-> core events, dry run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.emulator.conftest import Core, Http, failure, pod


def test_create_fills_system_metadata_and_pod_defaults(core: Core) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.name == "web"
    assert re.fullmatch(r"[0-9a-f-]{36}", created.metadata.uid)
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.resource_version.isdigit()
    assert created.metadata.generation == 1
    assert created.status.phase == "Pending"
    assert created.status.qos_class == "BestEffort"
    assert created.spec.restart_policy == "Always"
    assert created.spec.termination_grace_period_seconds == 30
    assert created.spec.service_account_name == "default"
    assert created.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert {t.key for t in created.spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }


def test_generate_name_appends_five_random_characters(core: Core) -> None:
    names = {core.create_namespaced_pod("default", pod()).metadata.name for _ in range(5)}
    assert len(names) == 5
    assert all(re.fullmatch(r"pod-[bcdfghjklmnpqrstvwxz2456789]{5}", n) for n in names)


def test_create_ignores_client_status_and_starts_pending(core: Core) -> None:
    manifest = pod("p")
    manifest["status"] = {"phase": "Running"}
    assert core.create_namespaced_pod("default", manifest).status.phase == "Pending"


def test_resource_version_is_one_global_counter(core: Core) -> None:
    a = core.create_namespaced_pod("default", pod("a"))
    cm = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    b = core.create_namespaced_pod("default", pod("b"))
    versions = [int(x.metadata.resource_version) for x in (a, cm, b)]
    assert versions == sorted(versions) and len(set(versions)) == 3
    listed = core.list_namespaced_pod("default")
    assert int(listed.metadata.resource_version) >= versions[-1]
    assert [p.metadata.name for p in listed.items] == ["a", "b"]


def test_get_missing_is_404_with_the_real_status(http: Http) -> None:
    response = http.get("/api/v1/namespaces/default/pods/nope")
    assert response.status_code == 404
    assert response.json() == failure(
        code=404, reason="NotFound", message='pods "nope" not found', details={"name": "nope", "kind": "pods"}
    )


def test_grouped_resources_name_their_group_in_errors(http: Http) -> None:
    response = http.get("/apis/apps/v1/namespaces/default/deployments/nope")
    assert response.status_code == 404
    assert response.json()["message"] == 'deployments.apps "nope" not found'
    assert response.json()["details"] == {"name": "nope", "group": "apps", "kind": "deployments"}


def test_create_twice_is_409_already_exists(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("twice"))
    response = http.post("/api/v1/namespaces/default/pods", pod("twice"))
    assert response.status_code == 409
    assert response.json() == failure(
        code=409,
        reason="AlreadyExists",
        message='pods "twice" already exists',
        details={"name": "twice", "kind": "pods"},
    )


def test_update_with_stale_resource_version_is_409_conflict(core: Core, http: Http) -> None:
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    stale = first.metadata.resource_version
    first.data = {"a": "2"}
    core.replace_namespaced_config_map("cm", "default", first)
    body = {"metadata": {"name": "cm", "resourceVersion": stale}, "data": {"a": "3"}}
    response = http.put("/api/v1/namespaces/default/configmaps/cm", body)
    assert response.status_code == 409
    assert response.json() == failure(
        code=409,
        reason="Conflict",
        message='Operation cannot be fulfilled on configmaps "cm": the object has been modified; please apply '
        "your changes to the latest version and try again",
        details={"name": "cm", "kind": "configmaps"},
    )
    assert core.read_namespaced_config_map("cm", "default").data == {"a": "2"}


def test_update_without_resource_version_is_unconditional(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    response = http.put(
        "/api/v1/namespaces/default/configmaps/cm", {"metadata": {"name": "cm"}, "data": {"a": "9"}}
    )
    assert response.status_code == 200
    assert core.read_namespaced_config_map("cm", "default").data == {"a": "9"}


def test_no_op_update_keeps_the_resource_version(core: Core) -> None:
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    again = core.replace_namespaced_config_map("cm", "default", created)
    assert again.metadata.resource_version == created.metadata.resource_version


def test_name_in_body_must_match_url(http: Http) -> None:
    response = http.put("/api/v1/namespaces/default/configmaps/a", {"metadata": {"name": "b"}})
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"


def test_create_in_missing_namespace_is_404(http: Http) -> None:
    response = http.post("/api/v1/namespaces/ghost/pods", pod("p"))
    assert response.status_code == 404
    assert response.json()["message"] == 'namespaces "ghost" not found'
    assert response.json()["details"] == {"name": "ghost", "kind": "namespaces"}


def test_initial_namespaces_exist_and_are_labelled(core: Core) -> None:
    names = {ns.metadata.name: ns for ns in core.list_namespace().items}
    assert {"default", "kube-system"} <= set(names)
    assert names["default"].metadata.labels["kubernetes.io/metadata.name"] == "default"
    assert names["default"].status.phase == "Active"


def test_status_subresource_changes_only_status(core: Core) -> None:
    created = core.create_namespaced_pod("default", pod("p", labels={"a": "1"}))
    created.status.phase = "Running"
    created.metadata.labels = {"a": "2"}
    after_status = core.replace_namespaced_pod_status("p", "default", created)
    assert after_status.status.phase == "Running"
    assert after_status.metadata.labels == {"a": "1"}
    after_status.status.phase = "Failed"
    after_status.metadata.labels = {"a": "3"}
    after_main = core.replace_namespaced_pod("p", "default", after_status)
    assert after_main.status.phase == "Running"
    assert after_main.metadata.labels == {"a": "3"}


def test_generation_tracks_spec_changes_of_workloads(api: client.ApiClient) -> None:
    apps: Any = client.AppsV1Api(api)
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod()["spec"]},
        },
    }
    created = apps.create_namespaced_deployment("default", body)
    assert created.metadata.generation == 1
    assert created.spec.replicas == 1 and created.spec.strategy.type == "RollingUpdate"
    labelled = apps.patch_namespaced_deployment("d", "default", {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.generation == 1
    scaled = apps.patch_namespaced_deployment("d", "default", {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2
    status = apps.patch_namespaced_deployment_status("d", "default", {"status": {"replicas": 3}})
    assert status.metadata.generation == 2 and status.status.replicas == 3


def test_job_gets_a_generated_selector(api: client.ApiClient) -> None:
    batch: Any = client.BatchV1Api(api)
    template = {"spec": {**pod()["spec"], "restartPolicy": "Never"}}
    job = batch.create_namespaced_job("default", {"metadata": {"name": "j"}, "spec": {"template": template}})
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "j"
    assert job.spec.completions == 1 and job.spec.parallelism == 1 and job.spec.backoff_limit == 6


def test_cluster_scoped_nodes(core: Core, http: Http) -> None:
    node = core.create_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4"}}})
    assert node.metadata.namespace is None
    assert node.status.capacity == {"cpu": "4"}  # a kubelet registers its node with its status
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert http.get("/api/v1/namespaces/default/nodes/n1").status_code == 404


def test_events_k8s_io_and_core_events_are_one_storage(api: client.ApiClient, core: Core) -> None:
    events: Any = client.EventsV1Api(api)
    # A fraction that is not zero: the official client re-serializes eventTime with isoformat(), which
    # drops a zero fraction, and the real server refuses a MicroTime without six digits (400).
    events.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "eventTime": "2025-01-01T00:00:00.500000Z",
            "reportingController": "stagger",
            "reportingInstance": "x",
            "action": "Held",
            "reason": "Staggered",
            "note": "waiting",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        },
    )
    core_event = core.read_namespaced_event("e1", "default")
    assert core_event.involved_object.name == "p"
    assert core_event.message == "waiting"
    assert core_event.reporting_component == "stagger"
    assert events.read_namespaced_event("e1", "default").note == "waiting"


def test_lease_update_needs_a_resource_version(api: client.ApiClient, http: Http) -> None:
    leases: Any = client.CoordinationV1Api(api)
    leases.create_namespaced_lease("default", {"metadata": {"name": "l"}, "spec": {}})
    response = http.put(
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/l",
        {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}},
    )
    assert response.status_code == 422


def test_dry_run_create_stores_nothing(core: Core) -> None:
    created = core.create_namespaced_pod("default", pod("dry"), dry_run="All")
    assert created.metadata.uid
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("dry", "default")
    assert caught.value.status == 404


def test_unknown_fields_are_dropped_with_a_warning_or_refused_when_strict(http: Http) -> None:
    manifest = pod("p")
    manifest["spec"]["bogus"] = 1
    warned = http.post("/api/v1/namespaces/default/pods", manifest)
    assert warned.status_code == 201
    assert warned.headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
    assert "bogus" not in warned.json()["spec"]
    manifest["metadata"]["name"] = "q"
    strict = http.post("/api/v1/namespaces/default/pods?fieldValidation=Strict", manifest)
    assert strict.status_code == 400
    assert strict.json()["message"] == 'strict decoding error: unknown field "spec.bogus"'


def test_delete_returns_the_object_for_pods_and_a_status_for_others(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p"))
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    deleted_pod = http.delete("/api/v1/namespaces/default/pods/p")
    assert deleted_pod.status_code == 200 and deleted_pod.json()["kind"] == "Pod"
    deleted_cm = http.delete("/api/v1/namespaces/default/configmaps/cm")
    assert deleted_cm.status_code == 200
    body = deleted_cm.json()
    assert (
        body["status"] == "Success"
        and body["details"]["name"] == "cm"
        and body["details"]["kind"] == "configmaps"
    )
    assert http.get("/api/v1/namespaces/default/pods/p").status_code == 404


def test_deleting_a_namespace_deletes_its_content(core: Core, http: Http) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("team", pod("p"))
    assert http.delete("/api/v1/namespaces/team").status_code == 200
    assert http.get("/api/v1/namespaces/team/pods/p").status_code == 404
    protected = http.delete("/api/v1/namespaces/default")
    assert protected.status_code == 403
    assert (
        protected.json()["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    )


def test_request_counts(server, core: Core) -> None:  # type: ignore[no-untyped-def]
    before = server.call(lambda: server.server.request_count)
    core.create_namespaced_pod("default", pod("p"))
    core.list_namespaced_pod("default")
    core.read_namespaced_pod("p", "default")
    counts = server.call(lambda: server.server.request_counts)
    assert counts[("create", "pods")] == 1
    assert counts[("list", "pods")] == 1
    assert counts[("get", "pods")] == 1
    assert server.call(lambda: server.server.request_count) == before + 3
