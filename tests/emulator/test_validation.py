"""Validation: values of the wrong type cannot be decoded (400, as Go's decoder words it); semantic rules
answer 422 Invalid with causes; pod update rules (immutable spec except images, activeDeadlineSeconds, added
tolerations, removed scheduling gates), gates only at creation, spec.nodeName only via binding
(binding a bound or gated pod is 409), workload selectors."""

from __future__ import annotations

from typing import Any

import pytest

from sim.emulator.validation import POD_UPDATE_FORBIDDEN
from tests.emulator.conftest import Core, Http, pod

PODS = "/api/v1/namespaces/default/pods"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def causes(response: Any) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in response.json()["details"]["causes"]]


def test_a_value_of_the_wrong_type_cannot_be_decoded(http: Http) -> None:
    manifest = pod("p")
    manifest["spec"]["containers"][0]["ports"] = [{"containerPort": "eighty"}]
    response = http.post(PODS, manifest)
    assert response.status_code == 400
    body = response.json()
    assert body["reason"] == "BadRequest"
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field '
        "ContainerPort.spec.containers.ports.containerPort of type int32"
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({"containers": []}, [("spec.containers", "FieldValueRequired")], id="no-containers"),
        pytest.param(
            {"containers": [{"name": "c"}]},
            [("spec.containers[0].image", "FieldValueRequired")],
            id="no-image",
        ),
        pytest.param(
            {"containers": [{"name": "c", "image": "i"}, {"name": "c", "image": "i"}]},
            [("spec.containers[1].name", "FieldValueDuplicate")],
            id="duplicate-names",
        ),
        pytest.param(
            {"restartPolicy": "Sometimes"},
            [("spec.restartPolicy", "FieldValueNotSupported")],
            id="restart-policy",
        ),
        pytest.param(
            {"schedulingGates": [{"name": "bad gate"}]},
            [("spec.schedulingGates[0]", "FieldValueInvalid")],
            id="gate-name",
        ),
    ],
)
def test_semantic_pod_errors(http: Http, change: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    manifest = pod("p")
    manifest["spec"].update(change)
    response = http.post(PODS, manifest)
    assert response.status_code == 422
    assert causes(response) == expected


def test_several_errors_are_listed_in_brackets(http: Http) -> None:
    manifest = pod("Bad_Name")
    manifest["spec"]["containers"] = [{"name": "c"}]
    message = http.post(PODS, manifest).json()["message"]
    assert message.startswith(
        'Pod "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'
    )
    assert message.endswith("spec.containers[0].image: Required value]")


def test_pod_spec_is_immutable_with_the_real_message(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p"))
    response = http.patch(
        f"{PODS}/p",
        {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}},
        "application/strategic-merge-patch+json",
    )
    assert response.status_code == 422
    body = response.json()
    assert body["message"] == f'Pod "p" is invalid: spec: Forbidden: {POD_UPDATE_FORBIDDEN}'
    assert body["details"]["causes"] == [
        {"reason": "FieldValueForbidden", "message": f"Forbidden: {POD_UPDATE_FORBIDDEN}", "field": "spec"}
    ]
    assert "`spec.containers[*].image`" in POD_UPDATE_FORBIDDEN


def test_allowed_pod_updates(core: Core, http: Http) -> None:
    core.create_namespaced_pod(
        "default", pod("p", schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}])
    )
    allowed = [
        {"spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.11"}]}},
        {"spec": {"activeDeadlineSeconds": 60}},
        {"metadata": {"labels": {"new": "label"}, "annotations": {"a": "b"}}},
        {"spec": {"nodeSelector": {"zone": "a"}}},  # additions are allowed while the pod is gated
    ]
    for patch in allowed:
        response = http.patch(f"{PODS}/p", patch, "application/strategic-merge-patch+json")
        assert response.status_code == 200, response.json()
    current = core.read_namespaced_pod("p", "default")
    tolerations = [t.to_dict() for t in current.spec.tolerations]
    added = [{k: v for k, v in t.items() if v is not None} for t in tolerations] + [
        {"key": "extra", "operator": "Exists"}
    ]
    assert http.patch(f"{PODS}/p", {"spec": {"tolerations": added}}, MERGE).status_code == 200
    removed_gate = http.patch(f"{PODS}/p", [{"op": "remove", "path": "/spec/schedulingGates/0"}], JSON_PATCH)
    assert removed_gate.status_code == 200
    assert [g["name"] for g in removed_gate.json()["spec"]["schedulingGates"]] == ["example.com/b"]
    longer = http.patch(f"{PODS}/p", {"spec": {"activeDeadlineSeconds": 120}}, MERGE)
    assert longer.status_code == 422


def test_scheduling_gates_can_only_be_removed(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p", schedulingGates=[{"name": "example.com/a"}]))
    response = http.patch(
        f"{PODS}/p",
        [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "example.com/b"}}],
        JSON_PATCH,
    )
    assert response.status_code == 422
    assert response.json()["message"] == (
        'Pod "p" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new '
        "scheduling gate 'example.com/b'"
    )
    core.create_namespaced_pod("default", pod("ungated"))
    added = http.patch(
        f"{PODS}/ungated", {"spec": {"schedulingGates": [{"name": "example.com/late"}]}}, MERGE
    )
    assert added.status_code == 422
    cleared = http.patch(f"{PODS}/p", {"spec": {"schedulingGates": None}}, MERGE)
    assert cleared.status_code == 200 and "schedulingGates" not in cleared.json()["spec"]


def test_node_name_only_through_binding(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p"))
    assert http.patch(f"{PODS}/p", {"spec": {"nodeName": "n1"}}, MERGE).status_code == 422
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    bound = http.post(f"{PODS}/p/binding", binding)
    assert bound.status_code == 201
    assert bound.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    after = core.read_namespaced_pod("p", "default")
    assert after.spec.node_name == "n1"
    scheduled = [c for c in after.status.conditions if c.type == "PodScheduled"]
    assert scheduled and scheduled[0].status == "True" and scheduled[0].last_transition_time is not None
    again = http.post(f"{PODS}/p/binding", {**binding, "target": {"name": "n2"}})
    assert again.status_code == 409
    assert (
        again.json()["message"]
        == 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    )


def test_binding_a_gated_pod_is_refused(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p", schedulingGates=[{"name": "example.com/a"}]))
    response = http.post(f"{PODS}/p/binding", {"metadata": {"name": "p"}, "target": {"name": "n1"}})
    assert response.status_code == 409
    assert "non-empty .spec.schedulingGates" in response.json()["message"]


def test_workload_selector_must_match_template(http: Http) -> None:
    deployment = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "y"}}, "spec": pod()["spec"]},
        },
    }
    response = http.post("/apis/apps/v1/namespaces/default/deployments", deployment)
    assert response.status_code == 422
    assert causes(response) == [("spec.template.metadata.labels", "FieldValueInvalid")]
    assert response.json()["message"].startswith('Deployment.apps "d" is invalid: ')


def test_job_pods_must_not_restart_always(http: Http) -> None:
    job = {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {**pod()["spec"], "restartPolicy": "Always"}}},
    }
    response = http.post("/apis/batch/v1/namespaces/default/jobs", job)
    assert response.status_code == 422
    # Always is what a template defaults to, so the real validation calls the field required.
    assert causes(response) == [("spec.template.spec.restartPolicy", "FieldValueRequired")]


def test_webhook_configuration_requires_side_effects(http: Http) -> None:
    config = {
        "metadata": {"name": "w"},
        "webhooks": [
            {
                "name": "w.example.com",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://127.0.0.1:1/"},
            }
        ],
    }
    response = http.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)
    assert response.status_code == 422
    assert causes(response) == [("webhooks[0].sideEffects", "FieldValueRequired")]


def test_webhook_timeout_is_bounded(http: Http) -> None:
    config = {
        "metadata": {"name": "w"},
        "webhooks": [
            {
                "name": "w.example.com",
                "sideEffects": "None",
                "timeoutSeconds": 31,
                "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://127.0.0.1:1/"},
            }
        ],
    }
    response = http.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)
    assert response.status_code == 422
    assert causes(response) == [("webhooks[0].timeoutSeconds", "FieldValueInvalid")]
