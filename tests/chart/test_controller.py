"""The controller in the chart (default values unless a test says otherwise): its Deployment (replicas,
image, the settings `python -m webhook` accepts, downward-API env, probes on the probe listener, the
restricted securityContext, a grace period longer than --shutdown-timeout, anti-affinity), the
PodDisruptionBudget, the policy file shared with lockd, the two Services (admission to every replica; the
leader Service selecting the leader label, which lockd's controller URL names), the token Secret mounted on
both sides, the MutatingWebhookConfiguration's fields and its RBAC."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chart.helm import (
    CONTROLLER,
    FULLNAME,
    LEADER,
    NAMESPACE,
    PREFIX,
    RELEASE,
    Doc,
    by_kind,
    container,
    env,
    mounted_file,
    named,
    pod_spec,
    render,
    values,
)

SELECTOR = {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "controller"}


def deployment(*sets: str) -> Doc:
    return named(render(*sets), "Deployment", CONTROLLER)


def daemonset(*sets: str) -> Doc:
    return by_kind(render(*sets), "DaemonSet")


def test_the_controller_runs_the_lockd_image_with_settings_it_accepts() -> None:
    from webhook.settings import parse_settings

    controller = deployment()
    assert controller["spec"]["replicas"] == 2
    lockd = container(daemonset())
    assert container(controller)["image"] == lockd["image"] == "ghcr.io/technicianted/stagger:0.1.0"
    assert container(controller)["args"] == ["webhook"]
    plain = values(controller)
    settings = parse_settings([], plain)
    assert settings.image == lockd["image"]
    assert (settings.host, settings.port) == ("0.0.0.0", 9443)
    assert (settings.probe_host, settings.probe_port) == ("0.0.0.0", 9090)
    assert settings.lockd_port == lockd["ports"][0]["hostPort"] == 9400
    assert settings.prefix == PREFIX
    assert settings.tls and settings.log_level == "info"
    assert settings.token_file is not None and settings.policies is not None
    downward = {
        name: item["valueFrom"]["fieldRef"]["fieldPath"]
        for name, item in env(controller).items()
        if "valueFrom" in item
    }
    assert downward == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        pytest.param(
            (), {"port": 9443, "probe_port": 9090, "shutdown": 5.0, "drain": 5.0, "grace": 15}, id="defaults"
        ),
        pytest.param(
            (
                "controller.port=8443",
                "controller.probePort=8081",
                "controller.shutdownTimeoutSeconds=20",
                "controller.grantDrainSeconds=2",
            ),
            {"port": 8443, "probe_port": 8081, "shutdown": 20.0, "drain": 2.0, "grace": 27},
            id="other-ports-and-timeout",
        ),
    ],
)
def test_ports_probes_and_grace_period_follow_the_values(
    sets: tuple[str, ...], expected: dict[str, Any]
) -> None:
    from webhook.settings import parse_settings

    controller = deployment(*sets)
    settings = parse_settings([], values(controller))
    ports = {p["name"]: p["containerPort"] for p in container(controller)["ports"]}
    assert ports == {"https": expected["port"], "probes": expected["probe_port"]}
    assert (settings.port, settings.probe_port) == (expected["port"], expected["probe_port"])
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container(controller)[probe]["httpGet"] == {"path": path, "port": "probes"}
    assert settings.shutdown_timeout == expected["shutdown"]
    assert settings.grant_drain == expected["drain"]
    grace = pod_spec(controller)["terminationGracePeriodSeconds"]
    assert grace == expected["grace"] and grace > settings.shutdown_timeout + settings.grant_drain
    # Both Services reach the TLS listener by its port name.
    for name in (CONTROLLER, LEADER):
        assert named(render(*sets), "Service", name)["spec"]["ports"] == [
            {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}
        ]


def test_the_controller_is_restricted() -> None:
    controller = deployment()
    pod = pod_spec(controller)["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container(controller)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container(controller)["resources"]["limits"]["memory"]
    assert pod_spec(controller)["serviceAccountName"] == CONTROLLER


def test_replicas_spread_over_nodes_and_one_may_be_disrupted() -> None:
    docs = render()
    controller = named(docs, "Deployment", CONTROLLER)
    labels = controller["spec"]["template"]["metadata"]["labels"]
    assert controller["spec"]["selector"]["matchLabels"] == SELECTOR
    assert SELECTOR.items() <= labels.items()
    anti = pod_spec(controller)["affinity"]["podAntiAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == SELECTOR
    budget = named(docs, "PodDisruptionBudget", CONTROLLER)
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}
    assert not [
        doc
        for doc in render("controller.podDisruptionBudget.enabled=false")
        if doc["kind"] == "PodDisruptionBudget"
    ]


def test_an_affinity_value_replaces_the_default_spreading() -> None:
    custom = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}}
    ]}}  # fmt: skip
    controller = named(render(jsons=(f"controller.affinity={json.dumps(custom)}",)), "Deployment", CONTROLLER)
    assert pod_spec(controller)["affinity"] == custom


def test_both_read_the_same_policy_file() -> None:
    policies = {"name": "policies", "configMap": {"name": f"{FULLNAME}-policies"}}
    for workload in (deployment(), daemonset()):
        assert mounted_file(workload, values(workload)["STAGGER_POLICIES"]) == policies


def test_lockd_asks_the_leader_service() -> None:
    docs = render()
    leader = named(docs, "Service", LEADER)
    assert leader["spec"]["selector"] == {**SELECTOR, f"{PREFIX}/leader": "1"}
    admission = named(docs, "Service", CONTROLLER)
    assert admission["spec"]["selector"] == SELECTOR
    url = values(by_kind(docs, "DaemonSet"))["STAGGER_CONTROLLER_URL"]
    port = leader["spec"]["ports"][0]["port"]
    assert url == f"https://{leader['metadata']['name']}.{leader['metadata']['namespace']}.svc:{port}"


def test_lockd_and_the_controller_mount_the_same_token_secret() -> None:
    docs = render()
    token = named(docs, "Secret", f"{CONTROLLER}-token")
    assert len(token["data"]["token"]) >= 48
    lockd, controller = by_kind(docs, "DaemonSet"), named(docs, "Deployment", CONTROLLER)
    sides = [
        mounted_file(lockd, values(lockd)["STAGGER_CONTROLLER_TOKEN_FILE"]),
        mounted_file(controller, values(controller)["STAGGER_TOKEN_FILE"]),
    ]
    for volume in sides:
        assert volume["secret"]["secretName"] == token["metadata"]["name"]
        assert "items" not in volume["secret"]  # the whole Secret: a new token reaches the file
    assert values(lockd)["STAGGER_CONTROLLER_TOKEN_FILE"].endswith("/token")
    assert values(controller)["STAGGER_TOKEN_FILE"].endswith("/token")
    # A new token per install (an upgrade keeps it: test_upgrade).
    other = named(render("controller.replicas=1"), "Secret", f"{CONTROLLER}-token")
    assert other["data"]["token"] != token["data"]["token"]


def webhook(*sets: str) -> Doc:
    [hook] = by_kind(render(*sets), "MutatingWebhookConfiguration")["webhooks"]
    hook_doc: Doc = hook
    return hook_doc


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("name", f"pods.{PREFIX}", id="name"),
        pytest.param("objectSelector", {"matchLabels": {f"{PREFIX}/enable": "1"}}, id="objectSelector"),
        pytest.param(
            "namespaceSelector",
            {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": [NAMESPACE, "kube-system"],
                    }
                ]
            },
            id="namespaceSelector",
        ),
        pytest.param("failurePolicy", "Ignore", id="failurePolicy"),
        pytest.param("timeoutSeconds", 5, id="timeoutSeconds"),
        pytest.param("sideEffects", "None", id="sideEffects"),
        pytest.param("admissionReviewVersions", ["v1"], id="admissionReviewVersions"),
        pytest.param("reinvocationPolicy", "IfNeeded", id="reinvocationPolicy"),
        pytest.param("matchPolicy", "Equivalent", id="matchPolicy"),
        pytest.param(
            "rules",
            [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            id="rules",
        ),
    ],
)
def test_webhook_configuration(field: str, expected: object) -> None:
    assert webhook()[field] == expected


def test_webhook_calls_the_admission_service() -> None:
    service = webhook()["clientConfig"]["service"]
    assert service == {"name": CONTROLLER, "namespace": NAMESPACE, "path": "/mutate/pods", "port": 443}
    assert named(render(), "Service", CONTROLLER)["spec"]["ports"][0]["port"] == 443


@pytest.mark.parametrize(
    ("sets", "field", "expected"),
    [
        pytest.param(("controller.webhook.timeoutSeconds=2",), "timeoutSeconds", 2, id="timeout"),
        pytest.param(("controller.webhook.failurePolicy=Fail",), "failurePolicy", "Fail", id="failurePolicy"),
        pytest.param(
            ("controller.webhook.excludeNamespaces={kube-system,monitoring,stagger}",),
            "namespaceSelector",
            {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": [NAMESPACE, "kube-system", "monitoring"],
                    }
                ]
            },
            id="excludeNamespaces",
        ),
        pytest.param(
            ("prefix=example.com/stagger",),
            "objectSelector",
            {"matchLabels": {"example.com/stagger/enable": "1"}},
            id="prefix",
        ),
    ],
)
def test_webhook_values(sets: tuple[str, ...], field: str, expected: object) -> None:
    assert webhook(*sets)[field] == expected


RULES = {
    (("",), ("pods",), ("get", "list", "watch", "patch")),
    (("",), ("pods/eviction",), ("create",)),
    (("",), ("events",), ("create", "patch")),
    (("events.k8s.io",), ("events",), ("create", "patch")),
}


@pytest.mark.parametrize(
    ("kind", "rules"),
    [
        pytest.param("ClusterRole", RULES, id="cluster"),
        pytest.param(
            "Role", {(("coordination.k8s.io",), ("leases",), ("get", "create", "update"))}, id="leases"
        ),
    ],
)
def test_controller_rbac(kind: str, rules: set[tuple[tuple[str, ...], ...]]) -> None:
    docs = render()
    role = named(docs, kind, CONTROLLER)
    assert {(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]} == rules
    binding = named(docs, f"{kind}Binding", CONTROLLER)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": CONTROLLER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": NAMESPACE}]
    if kind == "Role":
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert named(docs, "ServiceAccount", CONTROLLER)["metadata"]["namespace"] == NAMESPACE
