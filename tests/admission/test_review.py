"""The admission webhook's review (webhook.admission): each kind of pod in a table, the returned JSON Patch
applied with the jsonpatch library and the patched pod validated against the official Kubernetes 1.35
schema; the injected init container in detail; reinvocation, dry-run, other resources and operations;
malformed reviews (400 with the reason); the internal-error path (admitted unchanged, with a warning, the
exception handed to the caller); and, for any pod-ish input, never an exception and never a denial."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagger.names import Names
from stagger.policy import ExponentialPacer, LinearPacer, Mode, StaggeringPolicy, parse_policy_text
from stagger.selectors import LabelSelector
from webhook import admission
from webhook.admission import InjectSettings

K8S_VERSION = "1.35.0"
NAMES = Names()
P = NAMES.prefix
ENABLE = {f"{P}/enable": "1"}
SETTINGS = InjectSettings(image="registry.example/stagger:0.1.0", lockd_port=9400, max_wait=600.0)


def staggering(
    name: str,
    *,
    labels: dict[str, str],
    mode: Mode = "lock",
    bypass: dict[str, str] | None = None,
    grouping: str | None = ".spec.containers[0].image",
    max_blocked: float = 600.0,
) -> StaggeringPolicy:
    return StaggeringPolicy(
        name=name,
        label_selector=LabelSelector.from_labels(labels),
        bypass_label_selector=None if bypass is None else LabelSelector.from_labels(bypass),
        pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
        grouping_expression=grouping,
        mode=mode,
        max_blocked_duration=max_blocked,
    )


IMAGES = staggering("image-pull", labels={"staggerimages": "1"})
GATED = staggering("gated", labels={"app": "batch"}, mode="gate", grouping=None)
CANARY = staggering("canary-aware", labels={"app": "web"}, bypass={"canary": "1"}, max_blocked=1800.0)
EVICT = staggering("evicting", labels={"app": "old"}, mode="evict", grouping=None)
POLICIES = [IMAGES, GATED, CANARY, EVICT]


def pod(labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web-1", "namespace": "shop"}
    if labels is not None:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}], **spec},
    }


def review_of(obj: Any, **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": obj,
            "dryRun": False,
            **request,
        },
    }


def run(obj: Any, policies: list[StaggeringPolicy] = POLICIES, **request: Any) -> dict[str, Any]:
    """The review's response (status 200 asserted, allowed asserted)."""
    status, body = admission.review(
        review_of(obj, **request), policies=policies, names=NAMES, settings=SETTINGS
    )
    assert status == 200
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert response["allowed"] is True
    return dict(response)


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the response's patch applied (unchanged without one)."""
    if "patch" not in response:
        assert "patchType" not in response
        return obj
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, operations)


def validate(obj: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:  # the schema dump is huge: keep the reason
        raise AssertionError(str(error).splitlines()[0]) from None


def init_names(obj: dict[str, Any]) -> list[str]:
    return [container["name"] for container in obj["spec"].get("initContainers", [])]


GROUP = f"{P}/group"
STAGGERED = f"{P}/staggered"
POLICIES_ANN = f"{P}/policies"
GROUP_KEY = f"{P}/group-key"


@pytest.mark.parametrize(
    ("obj", "labels", "annotations", "inits", "gates"),
    [
        pytest.param(pod({"staggerimages": "1"}), None, None, None, None, id="not-enabled"),
        pytest.param(pod({f"{P}/enable": "true"}), None, None, None, None, id="enable-not-1"),
        pytest.param(pod(ENABLE), set(ENABLE), None, ["stagger-wait"], None, id="enabled-no-policy"),
        pytest.param(
            pod({**ENABLE, "staggerimages": "1"}),
            {f"{P}/enable", "staggerimages", GROUP, STAGGERED},
            {POLICIES_ANN: "image-pull", GROUP_KEY: '{"image-pull":"nginx:1.25"}'},
            ["stagger-wait"],
            None,
            id="lock",
        ),
        pytest.param(
            pod({**ENABLE, "app": "batch"}),
            {f"{P}/enable", "app", GROUP, STAGGERED},
            {POLICIES_ANN: "gated", GROUP_KEY: '{"gated":""}'},
            ["stagger-wait"],
            [f"{P}/pacing"],
            id="gate",
        ),
        pytest.param(
            pod({**ENABLE, "app": "batch"}, schedulingGates=[{"name": "example.com/quota"}]),
            {f"{P}/enable", "app", GROUP, STAGGERED},
            {POLICIES_ANN: "gated", GROUP_KEY: '{"gated":""}'},
            ["stagger-wait"],
            ["example.com/quota", f"{P}/pacing"],
            id="gate-after-existing-gates",
        ),
        pytest.param(
            pod({**ENABLE, "app": "batch"}, schedulingGates=[{"name": f"{P}/pacing"}]),
            {f"{P}/enable", "app", GROUP, STAGGERED},
            {POLICIES_ANN: "gated", GROUP_KEY: '{"gated":""}'},
            ["stagger-wait"],
            [f"{P}/pacing"],
            id="gate-already-there-not-doubled",
        ),
        pytest.param(
            pod({**ENABLE, "app": "web", "canary": "1"}),
            {f"{P}/enable", "app", "canary", GROUP},
            {POLICIES_ANN: "canary-aware", GROUP_KEY: '{"canary-aware":"nginx:1.25"}'},
            ["stagger-wait"],
            None,
            id="bypassed-counted-not-held",
        ),
        pytest.param(
            pod({**ENABLE, "app": "web", "staggerimages": "1", "canary": "1"}),
            {f"{P}/enable", "app", "canary", "staggerimages", GROUP, STAGGERED},
            {
                POLICIES_ANN: "image-pull,canary-aware",
                GROUP_KEY: '{"canary-aware":"nginx:1.25","image-pull":"nginx:1.25"}',
            },
            ["stagger-wait"],
            None,
            id="two-policies-one-bypassed",
        ),
        pytest.param(
            pod({**ENABLE, "staggerimages": "1"}, initContainers=[{"name": "migrate", "image": "app:1"}]),
            {f"{P}/enable", "staggerimages", GROUP, STAGGERED},
            {POLICIES_ANN: "image-pull", GROUP_KEY: '{"image-pull":"nginx:1.25"}'},
            ["stagger-wait", "migrate"],
            None,
            id="existing-init-containers-ours-first",
        ),
        pytest.param(
            pod({**ENABLE, "staggerimages": "1"}, initContainers=[]),
            {f"{P}/enable", "staggerimages", GROUP, STAGGERED},
            {POLICIES_ANN: "image-pull", GROUP_KEY: '{"image-pull":"nginx:1.25"}'},
            ["stagger-wait"],
            None,
            id="empty-init-containers",
        ),
        pytest.param(
            pod(ENABLE, initContainers=[{"name": "stagger-wait", "image": "mine"}]),
            set(ENABLE),
            None,
            ["stagger-wait"],
            None,
            id="reinvocation-left-alone",
        ),
    ],
)
def test_review_patches(
    obj: dict[str, Any],
    labels: set[str] | None,
    annotations: dict[str, str] | None,
    inits: list[str] | None,
    gates: list[str] | None,
) -> None:
    before = copy.deepcopy(obj)
    response = run(obj)
    after = patched(obj, response)
    assert obj == before  # the request's object is not modified in place
    validate(after)
    assert set(after["metadata"].get("labels", {})) == (labels or set(before["metadata"].get("labels", {})))
    assert after["metadata"].get("annotations") == annotations
    assert init_names(after) == (inits or [])
    assert [gate["name"] for gate in after["spec"].get("schedulingGates", [])] == (gates or [])
    if STAGGERED in after["metadata"]["labels"]:
        assert after["metadata"]["labels"][STAGGERED] == "1"
    if GROUP in after["metadata"]["labels"]:
        assert after["metadata"]["labels"][GROUP].startswith("g")


def test_existing_annotations_kept_and_keys_escaped() -> None:
    obj = pod({**ENABLE, "staggerimages": "1"})
    obj["metadata"]["annotations"] = {"owner": "team-a", f"{P}/policies": "stale"}
    response = run(obj)
    operations = json.loads(base64.b64decode(response["patch"]))
    paths = [operation["path"] for operation in operations]
    assert f"/metadata/labels/{P}~1group" in paths
    assert f"/metadata/annotations/{P}~1group-key" in paths
    after = patched(obj, response)
    validate(after)
    assert after["metadata"]["annotations"] == {
        "owner": "team-a",
        POLICIES_ANN: "image-pull",
        GROUP_KEY: '{"image-pull":"nginx:1.25"}',
    }


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        pytest.param("app", "app", id="plain"),
        pytest.param("v1.stagger.technicianted/group", "v1.stagger.technicianted~1group", id="slash"),
        pytest.param("a~b/c~/d", "a~0b~1c~0~1d", id="tilde-first"),
    ],
)
def test_escape_pointer(token: str, escaped: str) -> None:
    assert admission.escape_pointer(token) == escaped


def test_init_container_in_detail() -> None:
    after = patched(pod(ENABLE), run(pod(ENABLE)))
    (container,) = after["spec"]["initContainers"]
    assert container["image"] == "registry.example/stagger:0.1.0"
    assert container["command"] == ["python", "-m", "initclient"]
    env = container["env"]
    names = [entry["name"] for entry in env]
    assert names.index("HOST_IP") < names.index("STAGGER_LOCKD_URL")  # so Kubernetes expands $(HOST_IP)
    by_name = {entry["name"]: entry for entry in env}
    assert {name: by_name[name]["valueFrom"]["fieldRef"]["fieldPath"] for name in names[:4]} == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_UID": "metadata.uid",
        "HOST_IP": "status.hostIP",
    }
    assert by_name["STAGGER_LOCKD_URL"]["value"] == "http://$(HOST_IP):9400"
    assert by_name["STAGGER_MAX_WAIT"]["value"] == "10m"
    assert container["resources"] == {
        "requests": {"cpu": "10m", "memory": "24Mi"},
        "limits": {"memory": "48Mi"},
    }
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


TOKEN_VOLUME = {
    "name": "stagger-pod-token",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"audience": "stagger", "expirationSeconds": 600, "path": "token"}}
        ]
    },
}


@pytest.mark.parametrize(
    ("volumes", "expected"),
    [
        pytest.param(None, [TOKEN_VOLUME], id="no volumes"),
        pytest.param(
            [{"name": "data", "emptyDir": {}}], [{"name": "data", "emptyDir": {}}, TOKEN_VOLUME], id="kept"
        ),
        pytest.param([TOKEN_VOLUME], [TOKEN_VOLUME], id="there already (opted in by hand)"),
    ],
)
def test_the_pods_token_is_projected_into_the_init_client(
    volumes: list[dict[str, Any]] | None, expected: list[dict[str, Any]]
) -> None:
    obj = pod(ENABLE, **({"volumes": copy.deepcopy(volumes)} if volumes is not None else {}))
    status, body = admission.review(
        review_of(obj), policies=POLICIES, names=NAMES, settings=replace(SETTINGS, token_audience="stagger")
    )
    assert status == 200
    after = patched(obj, body["response"])
    kubernetes_validate.validate(after, K8S_VERSION, strict=True)
    (container,) = after["spec"]["initContainers"]
    assert container["volumeMounts"] == [
        {"name": "stagger-pod-token", "mountPath": "/var/run/secrets/stagger", "readOnly": True}
    ]
    by_name = {entry["name"]: entry for entry in container["env"]}
    assert by_name["STAGGER_POD_TOKEN_FILE"]["value"] == "/var/run/secrets/stagger/token"
    assert after["spec"]["volumes"] == expected


def test_no_token_without_an_audience() -> None:
    after = patched(pod(ENABLE), run(pod(ENABLE)))
    assert "volumes" not in after["spec"] and "volumeMounts" not in after["spec"]["initContainers"][0]


def test_settings_shape_the_container() -> None:
    custom = InjectSettings(
        image="img:2",
        lockd_port=8080,
        max_wait=90.0,
        container_name="wait-for-slot",
        command=(),
        args=("initclient",),
        image_pull_policy="IfNotPresent",
    )
    status, body = admission.review(review_of(pod(ENABLE)), policies=[], names=NAMES, settings=custom)
    assert status == 200
    after = patched(pod(ENABLE), dict(body["response"]))  # type: ignore[typeddict-item]
    validate(after)
    (container,) = after["spec"]["initContainers"]
    assert (container["name"], container["args"], container["imagePullPolicy"]) == (
        "wait-for-slot",
        ["initclient"],
        "IfNotPresent",
    )
    assert "command" not in container
    env = {entry["name"]: entry.get("value") for entry in container["env"]}
    assert (env["STAGGER_LOCKD_URL"], env["STAGGER_MAX_WAIT"]) == ("http://$(HOST_IP):8080", "1m30s")


def test_max_wait_covers_max_blocked_duration() -> None:
    after = patched(pod({**ENABLE, "app": "web"}), run(pod({**ENABLE, "app": "web"})))
    env = {entry["name"]: entry.get("value") for entry in after["spec"]["initContainers"][0]["env"]}
    assert env["STAGGER_MAX_WAIT"] == "30m"  # canary-aware's maxBlockedDuration, over the 10m setting


def test_max_wait_for_a_policy_file() -> None:
    text = "nodePolicies:\n- {name: a, maxWait: 5m}\n- {name: b, maxWait: 20m}\n"
    assert admission.max_wait_for(parse_policy_text(text)) == 1200.0
    assert admission.max_wait_for(parse_policy_text("")) == 600.0


def test_the_unreachable_bound_is_injected_from_the_node_policies() -> None:
    """STAGGER_UNREACHABLE_WAIT: the largest node policy unreachableWait (admission does not know the
    pod's node, so no node's policy is cut short), 1m without node policies."""
    text = "nodePolicies:\n- {name: a, unreachableWait: 30s}\n- {name: b, unreachableWait: 2m}\n- {name: c}\n"
    assert admission.unreachable_wait_for(parse_policy_text(text)) == 120.0
    assert admission.unreachable_wait_for(parse_policy_text("")) == 60.0
    after = patched(pod({**ENABLE, "app": "web"}), run(pod({**ENABLE, "app": "web"})))
    env = {entry["name"]: entry.get("value") for entry in after["spec"]["initContainers"][0]["env"]}
    assert env["STAGGER_UNREACHABLE_WAIT"] == "1m"


def test_mixed_modes_and_evict_warn() -> None:
    response = run(pod({**ENABLE, "app": "old", "staggerimages": "1"}), policies=[EVICT, IMAGES])
    assert response["warnings"] == [
        "stagger: staggering policy image-pull has mode lock, but evicting (mode evict) matched first; "
        "the pod is paced in mode evict",
        "stagger: not held for eviction: a bare pod (no controller owner) would be deleted for good by an "
        "eviction; paced by its init client (lock mode)",
    ]
    after = patched(pod({**ENABLE, "app": "old", "staggerimages": "1"}), response)
    assert after["metadata"]["labels"][STAGGERED] == "1"  # paced as in lock mode
    assert "schedulingGates" not in after["spec"]


def test_dry_run_is_patched_the_same() -> None:
    obj = pod({**ENABLE, "app": "batch"})
    assert run(obj, dryRun=True) == run(obj)


def test_namespace_from_the_request_when_the_object_has_none() -> None:
    by_namespace = staggering("per-namespace", labels={}, grouping=".metadata.namespace")
    obj = pod(ENABLE)
    del obj["metadata"]["namespace"]
    after = patched(obj, run(obj, policies=[by_namespace], namespace="team-a"))
    assert after["metadata"]["annotations"][GROUP_KEY] == '{"per-namespace":"team-a"}'
    assert "namespace" not in after["metadata"]  # only used for grouping, never written


@pytest.mark.parametrize(
    "request_changes",
    [
        pytest.param({"operation": "UPDATE", "oldObject": pod(ENABLE)}, id="update"),
        pytest.param({"subResource": "status"}, id="subresource"),
        pytest.param(
            {"resource": {"group": "apps", "version": "v1", "resource": "deployments"}}, id="not-pods"
        ),
    ],
)
def test_only_pod_creation_is_patched(request_changes: dict[str, Any]) -> None:
    response = run(pod({**ENABLE, "staggerimages": "1"}), **request_changes)
    assert set(response) == {"uid", "allowed"}


def test_another_kind_of_object_is_not_patched() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"labels": ENABLE}, "spec": {}}
    assert set(run(deployment)) == {"uid", "allowed"}


def good_review() -> dict[str, Any]:
    return review_of(pod(ENABLE))


def changed_review(**changes: Any) -> dict[str, Any]:
    body = good_review()
    for path, value in changes.items():
        target = body
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return body


_DELETE = object()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param([1, 2], "the body must be a JSON object (an AdmissionReview)", id="not-an-object"),
        pytest.param("review", "the body must be a JSON object (an AdmissionReview)", id="a-string"),
        pytest.param(None, "the body must be a JSON object (an AdmissionReview)", id="null"),
        pytest.param(
            changed_review(apiVersion="admission.k8s.io/v1beta1"),
            "apiVersion must be admission.k8s.io/v1 (got 'admission.k8s.io/v1beta1')",
            id="v1beta1",
        ),
        pytest.param(
            changed_review(apiVersion=_DELETE),
            "apiVersion must be admission.k8s.io/v1 (got None)",
            id="no-api",
        ),
        pytest.param(changed_review(kind="Pod"), "kind must be AdmissionReview (got 'Pod')", id="wrong-kind"),
        pytest.param(changed_review(request=_DELETE), "request must be an object", id="no-request"),
        pytest.param(changed_review(request=[]), "request must be an object", id="request-not-object"),
        pytest.param(
            changed_review(request__uid=_DELETE), "request.uid must be a non-empty string", id="no-uid"
        ),
        pytest.param(
            changed_review(request__uid=""), "request.uid must be a non-empty string", id="empty-uid"
        ),
        pytest.param(
            changed_review(request__uid=7), "request.uid must be a non-empty string", id="uid-number"
        ),
        pytest.param(
            changed_review(request__object=_DELETE), "request.object must be an object", id="no-object"
        ),
        pytest.param(
            changed_review(request__object=None), "request.object must be an object", id="object-null"
        ),
    ],
)
def test_malformed_reviews_get_400(body: object, error: str) -> None:
    status, answer = admission.review(body, policies=POLICIES, names=NAMES, settings=SETTINGS)
    assert (status, answer) == (400, {"error": error})


def test_long_values_in_errors_are_cut() -> None:
    status, answer = admission.review(
        changed_review(kind="x" * 1000), policies=POLICIES, names=NAMES, settings=SETTINGS
    )
    assert status == 400 and len(answer["error"]) < 150  # type: ignore[typeddict-item]


class _Exploding:
    """A compiled grouping expression that fails at match time."""

    def find(self, data: object) -> list[object]:
        raise RuntimeError("boom")


def test_internal_error_admits_unchanged_with_a_warning() -> None:
    broken = StaggeringPolicy(
        name="broken",
        label_selector=LabelSelector(),
        pacer=LinearPacer(step=1, max_stagger=2),
        grouping=_Exploding(),  # type: ignore[arg-type]
    )
    errors: list[Exception] = []
    status, body = admission.review(
        review_of(pod(ENABLE)), policies=[broken], names=NAMES, settings=SETTINGS, internal_errors=errors
    )
    assert status == 200
    assert body["response"] == {  # type: ignore[typeddict-item]
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
        "warnings": [admission.INTERNAL_ERROR_WARNING],
    }
    assert [str(error) for error in errors] == ["boom"]


def test_enabled_pod_without_spec_is_an_internal_error_not_a_denial() -> None:
    errors: list[Exception] = []
    obj = {"metadata": {"labels": ENABLE}}
    status, body = admission.review(
        review_of(obj), policies=POLICIES, names=NAMES, settings=SETTINGS, internal_errors=errors
    )
    assert status == 200 and body["response"]["allowed"] is True  # type: ignore[typeddict-item]
    assert body["response"]["warnings"] == [admission.INTERNAL_ERROR_WARNING]  # type: ignore[typeddict-item]
    assert len(errors) == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
label_maps = st.dictionaries(
    st.sampled_from([f"{P}/enable", "staggerimages", "app", "canary", f"{P}/group", "x"]),
    st.sampled_from(["1", "web", "batch", "old", ""]) | json_values,
    max_size=5,
)
pod_ish = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["Pod", "Deployment"]) | json_values,
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": label_maps | json_values,
                "annotations": json_values,
                "namespace": json_values,
                "name": json_values,
            },
        )
        | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": json_values,
                "initContainers": st.lists(json_values, max_size=2) | json_values,
                "schedulingGates": st.lists(json_values, max_size=2) | json_values,
            },
        )
        | json_values,
    },
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(pod_ish, st.sampled_from(["CREATE", "UPDATE", None]))
def test_any_pod_is_admitted_and_any_patch_applies(obj: dict[str, Any], operation: str | None) -> None:
    body = review_of(obj, operation=operation)
    status, answer = admission.review(body, policies=POLICIES, names=NAMES, settings=SETTINGS)
    assert status == 200
    response = dict(answer["response"])  # type: ignore[typeddict-item]
    assert response["allowed"] is True
    patched(copy.deepcopy(obj), response)  # every patch stagger answers with applies to the object


@given(json_values)
def test_any_body_is_answered_never_raises(body: Any) -> None:
    status, answer = admission.review(body, policies=POLICIES, names=NAMES, settings=SETTINGS)
    assert (status, "error" in answer) in ((400, True), (200, False))
