"""The controller in the chart (default values unless a test says otherwise): its Deployment (replicas,
image, the settings `python -m webhook` accepts, downward-API env, probes on the probe listener, the
restricted securityContext, a grace period longer than --shutdown-timeout, anti-affinity), the
PodDisruptionBudget, the policy file shared with lockd, the two Services (admission to every replica; the
leader Service selecting the leader label, which lockd's controller URL and the controller's own
--leader-url name), --admit-timeout (shorter than the webhook's timeout), the token Secret mounted on both
sides, the MutatingWebhookConfiguration's webhooks by default, keyed by name (pods, NoneOnDryRun: evict mode's
claims skip dry runs; jobs for evict mode, selected by the pod template's label, which a value turns off;
namespaced-pods).
Its RBAC: test_rbac. The opt-in webhooks in detail (namespace, scheduler, Kubernetes versions): test_optin."""

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
    RenderError,
    by_kind,
    container,
    env,
    mounted_file,
    named,
    pod_spec,
    render,
    values,
)
from tests.chart.test_optin import template_condition

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
    assert settings.inject.image == lockd["image"]
    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 9443)
    assert (settings.server.probe_host, settings.server.probe_port) == ("0.0.0.0", 9090)
    assert settings.inject.lockd_port == lockd["ports"][0]["hostPort"] == 9400
    assert settings.prefix == PREFIX
    assert settings.tls and settings.log_level == "info"
    assert settings.serving.token_file is not None and settings.policy.policies is not None
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
    assert (settings.server.port, settings.server.probe_port) == (expected["port"], expected["probe_port"])
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container(controller)[probe]["httpGet"] == {"path": path, "port": "probes"}
    assert settings.server.shutdown_timeout == expected["shutdown"]
    assert settings.groups.grant_drain == expected["drain"]
    grace = pod_spec(controller)["terminationGracePeriodSeconds"]
    assert (
        grace == expected["grace"] and grace > settings.server.shutdown_timeout + settings.groups.grant_drain
    )
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


def test_a_replica_that_does_not_lead_forwards_to_the_leader_service() -> None:
    # Evict mode: the same URL as lockd's (the leader Service on its port), with the token the replica has.
    docs = render()
    leader = named(docs, "Service", LEADER)
    port = leader["spec"]["ports"][0]["port"]
    url = values(named(docs, "Deployment", CONTROLLER))["STAGGER_LEADER_URL"]
    assert url == f"https://{LEADER}.{NAMESPACE}.svc:{port}" == f"https://{LEADER}.{NAMESPACE}.svc:443"
    assert url == values(by_kind(docs, "DaemonSet"))["STAGGER_CONTROLLER_URL"]
    # The Service reaches the controller's TLS listener (by its port name), not the probe port.
    assert leader["spec"]["ports"][0]["targetPort"] == "https"


def test_the_controller_reads_the_evict_mode_settings() -> None:
    from webhook.settings import parse_settings

    settings = parse_settings([], values(deployment()))
    assert settings.groups.leader_url == f"https://{LEADER}.{NAMESPACE}.svc:443"
    assert str(settings.groups.leader_ca_file) == "/etc/stagger/ca/ca.crt"
    assert settings.groups.admit_timeout == 0.5


@pytest.mark.parametrize(
    ("sets", "text", "seconds"),
    [
        pytest.param((), "0.5s", 0.5, id="default"),
        pytest.param(
            ("controller.admitTimeoutSeconds=2", "controller.webhook.timeoutSeconds=5"),
            "2s",
            2.0,
            id="whole-seconds",
        ),
        pytest.param(("controller.admitTimeoutSeconds=0.25",), "0.25s", 0.25, id="fraction"),
    ],
)
def test_admit_timeout_follows_the_value(sets: tuple[str, ...], text: str, seconds: float) -> None:
    from stagger.options import seconds as duration

    plain = values(deployment(*sets))
    assert plain["STAGGER_ADMIT_TIMEOUT"] == text
    # Read as the controller reads its other durations (--grant-drain, --shutdown-timeout).
    assert duration()(plain["STAGGER_ADMIT_TIMEOUT"], "--admit-timeout") == seconds
    assert seconds < webhook(*sets)["timeoutSeconds"]


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param(("controller.admitTimeoutSeconds=2",), id="as-long-as-the-webhook-timeout"),
        pytest.param(
            ("controller.admitTimeoutSeconds=1.5", "controller.webhook.timeoutSeconds=1"), id="longer"
        ),
        pytest.param(("controller.admitTimeoutSeconds=0",), id="zero"),
    ],
)
def test_an_admit_timeout_the_api_server_would_not_wait_for_fails_the_render(sets: tuple[str, ...]) -> None:
    # The API server gives up on the webhook after timeoutSeconds: a forwarded answer must come before.
    with pytest.raises(RenderError, match=r"controller[./]admitTimeoutSeconds"):
        render(*sets)


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


def webhooks(*sets: str) -> dict[str, Doc]:
    """The webhooks of the one MutatingWebhookConfiguration, in their order, by name without the prefix
    (`pods.<prefix>` as "pods"; the tests of the name check the prefix)."""
    hooks = by_kind(render(*sets), "MutatingWebhookConfiguration")["webhooks"]
    by_name = {hook["name"].split(".", 1)[0]: hook for hook in hooks}
    assert len(by_name) == len(hooks)
    return by_name


def webhook(*sets: str, name: str = "pods") -> Doc:
    return webhooks(*sets)[name]


# The webhooks a default install registers, in their order.
DEFAULT_WEBHOOKS = ["pods", "jobs", "namespaced-pods"]


def excluding(*namespaces: str) -> Doc:
    """The webhooks' namespaceSelector: every namespace but these."""
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(namespaces)}
        ]
    }


# What the pods' and the jobs' webhooks both have, by default (they select objects differently: the pods'
# by their own label, the jobs' by their pod template's).
EITHER_WEBHOOK = [
    pytest.param("namespaceSelector", excluding(NAMESPACE, "kube-system"), id="namespaceSelector"),
    pytest.param("failurePolicy", "Ignore", id="failurePolicy"),
    pytest.param("timeoutSeconds", 2, id="timeoutSeconds"),
    pytest.param("admissionReviewVersions", ["v1"], id="admissionReviewVersions"),
    pytest.param("reinvocationPolicy", "IfNeeded", id="reinvocationPolicy"),
]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("name", f"pods.{PREFIX}", id="name"),
        *EITHER_WEBHOOK,
        pytest.param("objectSelector", {"matchLabels": {f"{PREFIX}/enable": "1"}}, id="objectSelector"),
        # Evict mode claims the pod's place at admission, and not for a dry run (the claim lapses unless
        # the pod is created, too).
        pytest.param("sideEffects", "NoneOnDryRun", id="sideEffects"),
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


JOBS_RULES = [
    {
        "apiGroups": ["batch"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["jobs"],
        "scope": "Namespaced",
    }
]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("name", f"jobs.{PREFIX}", id="name"),
        pytest.param("rules", JOBS_RULES, id="rules"),
        *EITHER_WEBHOOK,
        pytest.param("sideEffects", "None", id="sideEffects"),
        # A Job is sent when its pod template is opted in, whatever the Job's own labels.
        pytest.param(
            "matchConditions",
            [{"name": "template-enabled", "expression": template_condition()}],
            id="matchConditions",
        ),
        pytest.param("objectSelector", None, id="no-objectSelector"),
    ],
)
def test_jobs_webhook_configuration(field: str, expected: object) -> None:
    assert webhook(name="jobs").get(field) == expected


def test_the_jobs_webhook_differs_from_the_pods_webhook_only_in_what_it_admits() -> None:
    """And in its side effects: none at all (the pods webhook's evict-mode claims skip dry runs)."""
    hooks = webhooks()
    assert list(hooks) == DEFAULT_WEBHOOKS
    pods, jobs = hooks["pods"], hooks["jobs"]
    assert jobs["clientConfig"]["service"]["path"] == "/mutate/jobs"
    # Which objects each admits is its own: the pods by their label, the Jobs by their template's (above).
    own = ("name", "rules", "clientConfig", "sideEffects", "objectSelector", "matchConditions")

    def shared(hook: Doc) -> Doc:
        service = {k: v for k, v in hook["clientConfig"]["service"].items() if k != "path"}
        rest = {k: v for k, v in hook.items() if k not in own}
        return {**rest, "clientConfig": {**hook["clientConfig"], "service": service}}

    assert shared(jobs) == shared(pods)
    assert jobs["clientConfig"]["caBundle"] == pods["clientConfig"]["caBundle"]


@pytest.mark.parametrize(
    ("sets", "names"),
    [
        pytest.param((), DEFAULT_WEBHOOKS, id="default-on"),
        pytest.param(("controller.webhook.jobs=true",), DEFAULT_WEBHOOKS, id="on"),
        pytest.param(("controller.webhook.jobs=false",), ["pods", "namespaced-pods"], id="off"),
    ],
)
def test_the_jobs_webhook_can_be_turned_off(sets: tuple[str, ...], names: list[str]) -> None:
    assert list(webhooks(*sets)) == names
    # The pods webhook is unchanged either way (caBundle aside: each render makes its own CA).
    pods = {k: v for k, v in webhook(*sets).items() if k != "clientConfig"}
    assert pods == {k: v for k, v in webhook().items() if k != "clientConfig"}


@pytest.mark.parametrize(
    ("name", "path"),
    [
        pytest.param("pods", "/mutate/pods", id="pods"),
        pytest.param("jobs", "/mutate/jobs", id="jobs"),
        pytest.param("namespaced-pods", "/mutate/pods/namespace", id="namespaced-pods"),
    ],
)
def test_webhook_calls_the_admission_service(name: str, path: str) -> None:
    service = webhook(name=name)["clientConfig"]["service"]
    assert service == {"name": CONTROLLER, "namespace": NAMESPACE, "path": path, "port": 443}
    assert named(render(), "Service", CONTROLLER)["spec"]["ports"][0]["port"] == 443


def every(value: object) -> dict[str, object]:
    """The same value for each default webhook."""
    return dict.fromkeys(DEFAULT_WEBHOOKS, value)


OTHER_PREFIX = "stagger.example.com"


@pytest.mark.parametrize(
    ("sets", "field", "expected"),
    [
        pytest.param(("controller.webhook.timeoutSeconds=10",), "timeoutSeconds", every(10), id="timeout"),
        pytest.param(
            ("controller.webhook.failurePolicy=Fail",), "failurePolicy", every("Fail"), id="failurePolicy"
        ),
        pytest.param(
            ("controller.webhook.excludeNamespaces={kube-system,monitoring,stagger}",),
            "namespaceSelector",
            {
                **every(excluding(NAMESPACE, "kube-system", "monitoring")),
                "namespaced-pods": {
                    "matchLabels": {f"{PREFIX}/enable": "1"},
                    **excluding(NAMESPACE, "kube-system", "monitoring"),
                },
            },
            id="excludeNamespaces",
        ),
        pytest.param(
            (f"prefix={OTHER_PREFIX}",),
            "name",
            {name: f"{name}.{OTHER_PREFIX}" for name in DEFAULT_WEBHOOKS},
            id="prefix-names",
        ),
        pytest.param(
            (f"prefix={OTHER_PREFIX}",),
            "objectSelector",
            {**every(None), "pods": {"matchLabels": {f"{OTHER_PREFIX}/enable": "1"}}},
            id="prefix",
        ),
        pytest.param(
            (f"prefix={OTHER_PREFIX}",),
            "matchConditions",
            {
                **every(None),
                "jobs": [
                    {"name": "template-enabled", "expression": template_condition(f"{OTHER_PREFIX}/enable")}
                ],
            },
            id="prefix-jobs",
        ),
        pytest.param(
            (f"prefix={OTHER_PREFIX}",),
            "namespaceSelector",
            {
                **every(excluding(NAMESPACE, "kube-system")),
                "namespaced-pods": {
                    "matchLabels": {f"{OTHER_PREFIX}/enable": "1"},
                    **excluding(NAMESPACE, "kube-system"),
                },
            },
            id="prefix-namespaces",
        ),
    ],
)
def test_webhook_values(sets: tuple[str, ...], field: str, expected: dict[str, object]) -> None:
    """Each default webhook's field (None: it has none)."""
    hooks = webhooks(*sets)
    assert list(hooks) == DEFAULT_WEBHOOKS
    assert {name: hook.get(field) for name, hook in hooks.items()} == expected
