"""The values platform teams adapt the chart with (nameOverride, fullnameOverride, commonLabels, image.digest,
per component podLabels, podAnnotations, extraArgs, extraEnv, affinity, topologySpreadConstraints,
priorityClassName, and the webhooks' namespaceSelector) render where they belong, and only there."""

from __future__ import annotations

import json

import pytest

from tests.chart.helm import (
    CONTROLLER,
    PREFIX,
    Doc,
    RenderError,
    by_kind,
    container,
    env,
    named,
    pod_spec,
    render,
)

DIGEST = "sha256:" + "ab" * 32


def lockd(docs: list[Doc]) -> Doc:
    return by_kind(docs, "DaemonSet")


def controller(docs: list[Doc]) -> Doc:
    return named(docs, "Deployment", CONTROLLER)


def pod_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def pod_annotations(workload: Doc) -> dict[str, str]:
    annotations: dict[str, str] = workload["spec"]["template"]["metadata"].get("annotations", {})
    return annotations


def test_the_controller_is_system_cluster_critical_by_default() -> None:
    docs = render()
    assert pod_spec(controller(docs))["priorityClassName"] == "system-cluster-critical"
    assert pod_spec(lockd(docs))["priorityClassName"] == "system-node-critical"


def test_no_annotation_on_the_pods_by_default() -> None:
    docs = render()
    assert pod_annotations(lockd(docs)) == pod_annotations(controller(docs)) == {}


@pytest.mark.parametrize(
    ("component", "other"),
    [pytest.param("lockd", "controller", id="lockd"), pytest.param("controller", "lockd", id="controller")],
)
def test_pod_labels_annotations_args_and_env_go_to_their_component_only(component: str, other: str) -> None:
    docs = render(
        f"{component}.podLabels.team=platform",
        f"{component}.podAnnotations.owner=sre",
        jsons=(
            f'{component}.extraArgs=["--log-level=debug"]',
            f'{component}.extraEnv=[{{"name": "EXTRA", "value": "1"}}]',
        ),
    )
    pick = {"lockd": lockd, "controller": controller}
    mine, theirs = pick[component](docs), pick[other](docs)
    assert pod_labels(mine)["team"] == "platform" and "team" not in pod_labels(theirs)
    assert pod_annotations(mine) == {"owner": "sre"} and pod_annotations(theirs) == {}
    # The workload's own labels are not the pod's: selectors and tools read those.
    assert "team" not in mine["metadata"]["labels"]
    command = "lockd" if component == "lockd" else "webhook"
    assert container(mine)["args"] == [command, "--log-level=debug"]
    assert container(theirs)["args"] == [other if other == "lockd" else "webhook"]
    assert env(mine)["EXTRA"] == {"name": "EXTRA", "value": "1"} and "EXTRA" not in env(theirs)


def test_a_pod_label_cannot_replace_the_selector_labels() -> None:
    docs = render("lockd.podLabels.app\\.kubernetes\\.io/component=other")
    assert pod_labels(lockd(docs))["app.kubernetes.io/component"] == "lockd"


def test_common_labels_are_on_every_object_and_pod() -> None:
    docs = render(strings=("commonLabels.cost-center=42",))
    for doc in docs:
        assert doc["metadata"]["labels"]["cost-center"] == "42", (doc["kind"], doc["metadata"]["name"])
    assert pod_labels(lockd(docs))["cost-center"] == pod_labels(controller(docs))["cost-center"] == "42"


def test_name_overrides() -> None:
    named_docs = render("nameOverride=pacer")
    assert by_kind(named_docs, "DaemonSet")["metadata"]["name"] == "demo-pacer-lockd"
    assert pod_labels(lockd(named_docs))["app.kubernetes.io/name"] == "pacer"
    full = render("fullnameOverride=startups")
    names = {doc["metadata"]["name"] for doc in full if doc["kind"] not in ("MutatingWebhookConfiguration",)}
    assert "startups-lockd" in names and "startups-controller-leader" in names
    assert all(name.startswith("startups") for name in names), names


def test_image_by_digest_for_every_container_and_the_injected_init_client() -> None:
    docs = render(f"image.digest={DIGEST}", "image.tag=0.9.0")
    image = f"ghcr.io/technicianted/stagger@{DIGEST}"
    assert container(lockd(docs))["image"] == container(controller(docs))["image"] == image
    assert env(controller(docs))["STAGGER_IMAGE"]["value"] == image


def test_a_digest_that_is_not_sha256_is_refused() -> None:
    with pytest.raises(RenderError, match="/image/digest"):
        render("image.digest=latest")


def test_affinity_and_spread() -> None:
    node_affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["apps"]}]}
                ]
            }
        }
    }
    spread = [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    ]
    docs = render(
        jsons=(
            f"lockd.affinity={json.dumps(node_affinity)}",
            f"controller.topologySpreadConstraints={json.dumps(spread)}",
        )
    )
    assert pod_spec(lockd(docs))["affinity"] == node_affinity
    assert pod_spec(controller(docs))["topologySpreadConstraints"] == spread
    assert "topologySpreadConstraints" not in pod_spec(lockd(docs))
    assert "affinity" not in pod_spec(lockd(render()))


def test_the_webhooks_namespace_selector_is_anded_with_the_exclusions() -> None:
    selector = {"matchLabels": {"stagger": "on"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}
    docs = render(jsons=(f"controller.webhook.namespaceSelector={json.dumps(selector)}",))
    hooks = {hook["name"]: hook for hook in by_kind(docs, "MutatingWebhookConfiguration")["webhooks"]}
    assert list(hooks) == [f"{name}.{PREFIX}" for name in ("pods", "jobs", "namespaced-pods")]
    for name, hook in hooks.items():
        chosen = hook["namespaceSelector"]
        # The namespace opt-in's own label is ANDed with the user's.
        own = {f"{PREFIX}/enable": "1"} if name.startswith("namespaced-pods.") else {}
        assert chosen["matchLabels"] == {**own, "stagger": "on"}
        expressions = chosen["matchExpressions"]
        assert (
            expressions[0]["key"] == "kubernetes.io/metadata.name" and expressions[0]["operator"] == "NotIn"
        )
        assert {"key": "tier", "operator": "Exists"} in expressions
