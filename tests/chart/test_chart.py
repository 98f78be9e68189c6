"""The Helm chart as a whole and its lockd part: `helm lint --strict` of the main configurations; every
object of every configuration (defaults, controller disabled, an external controller, an existing
certificate Secret, cert-manager, the jobs webhook off, other values) is valid for every Kubernetes version
the chart supports, from Chart.yaml's kubeVersion (1.34, the oldest minor CI tests) to 1.37 (the official schemas via
kubernetes-validate; cert-manager's own kinds are checked in test_controller_tls; the values files of
tests/chart/values/ in test_values_files); NOTES.txt says how to opt a pod in (a patch setting the label the
webhooks select on, a namespace's label, the scheduler names; how Jobs are selected), list held pods and read a node's lockd /status (a lookup that selects the lockd pod);
lockd's DaemonSet carries what cluster mode needs (node name, hostPort, probes, the policy file, every
toleration), settings lockd accepts, the host /proc only when asked, and no controller wiring without the
controller; no volume of lockd or the controller is mounted inside another."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import trustme
import yaml

from stagger import kubeversions
from stagger.version import VERSION
from tests.chart.helm import (
    CHART,
    CONTROLLER,
    NAMESPACE,
    PREFIX,
    RELEASE,
    RenderError,
    by_kind,
    container,
    env,
    mounted_file,
    pod_spec,
    render,
    values,
)
from tests.chart.test_lockd_vap import notes
from tests.tools import tool

# The oldest version Chart.yaml accepts, one in between and the newest schema kubernetes-validate ships.
CHART_KUBE_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
K8S_VERSIONS = ("1.34.0", "1.37.0")
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}


def ca_bundle() -> str:
    return base64.b64encode(trustme.CA().cert_pem.bytes()).decode()


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(("controller.enabled=false",), id="controller-disabled"),
        pytest.param(("controller.tls.certManager.enabled=true",), id="cert-manager"),
        pytest.param(("controller.webhook.jobs=false",), id="jobs-webhook-off"),
    ],
)
def test_lint(sets: tuple[str, ...]) -> None:
    args = [str(tool("helm")), "lint", "--strict", str(CHART)]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("sets", "expected", "absent"),
    [
        pytest.param(
            (),
            [
                f'{PREFIX}/enable: "1"',
                f"port-forward svc/{CONTROLLER} 9443:443",
                "/status?format=text",
                "when its pod template carries that label, whatever the Job's own labels",
                f"kubectl label namespace <namespace> {PREFIX}/enable=1",
                f"kubectl get pods -A -l {PREFIX}/staggered=1",
                f'"{PREFIX}/enable":"1"',
                "the chart's configs/_policies.yaml",
            ],
            ["opt a pod in by hand", "the policies value", "the Job itself", "Pods naming the scheduler"],
            id="controller",
        ),
        pytest.param(
            ("controller.webhook.jobs=false",),
            [f'{PREFIX}/enable: "1"', f"port-forward svc/{CONTROLLER} 9443:443"],
            ["A Job that an evict-mode policy matches", "opt a pod in by hand"],
            id="jobs-webhook-off",
        ),
        pytest.param(
            ("controller.webhook.namespaceOptIn=false",),
            [f'{PREFIX}/enable: "1"', "A Job that an evict-mode policy matches"],
            ["kubectl label namespace"],
            id="namespace-opt-in-off",
        ),
        pytest.param(
            ("controller.webhook.schedulerNames={straggler,peer}",),
            ["Pods naming the scheduler straggler or peer are opted in too, and given the default scheduler"],
            [],
            id="scheduler-names",
        ),
        pytest.param(
            ("controller.enabled=false",),
            [f'{PREFIX}/enable: "1"', "opt a pod in by hand", "/status?format=text", "9400:9400"],
            [f"port-forward svc/{CONTROLLER}", "A Job that", "kubectl patch", "kubectl label namespace"],
            id="controller-disabled",
        ),
        pytest.param(
            ("policies.nodePolicies[0].name=only",),
            ["the policies value"],
            ["configs/_policies.yaml"],
            id="policies-value",
        ),
    ],
)
def test_notes_say_how_to_opt_in_and_check_status(
    sets: tuple[str, ...], expected: list[str], absent: list[str]
) -> None:
    notes = install_notes(*sets)
    for text in expected:
        assert text in notes
    for text in absent:
        assert text not in notes


def install_notes(*sets: str) -> str:
    args = [str(tool("helm")), "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize(
    "sets",
    [pytest.param((), id="defaults"), pytest.param(("lockd.port=9500", "prefix=example.com"), id="other")],
)
def test_the_notes_commands_name_real_objects(sets: tuple[str, ...]) -> None:
    notes, docs = install_notes(*sets), render(*sets)
    daemonset = by_kind(docs, "DaemonSet")
    port = container(daemonset)["ports"][0]["hostPort"]
    # The lockd pod lookup selects the DaemonSet's pods, in the release namespace.
    [selector] = re.findall(r"-l (\S+)\)", notes)
    wanted = dict(item.split("=", 1) for item in selector.split(","))
    assert wanted.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    assert f"kubectl -n {NAMESPACE} get pods -o name" in notes
    assert f"http://$NODE_IP:{port}/status?format=text" in notes
    assert f'port-forward "$LOCKD" {port}:{port}' in notes
    # The patch that opts a Deployment in sets the label the webhooks select on: the pods' by the pod's
    # labels, the Jobs' by the pod template's, the namespace opt-in's by the namespace's (the same label).
    [patch] = re.findall(r"kubectl patch deployment <name> -p '([^']+)'", notes)
    labels = json.loads(patch)["spec"]["template"]["metadata"]["labels"]
    [(key, value)] = labels.items()
    hooks = {hook["name"]: hook for hook in by_kind(docs, "MutatingWebhookConfiguration")["webhooks"]}
    prefix = key.removesuffix("/enable")
    assert list(hooks) == [f"{name}.{prefix}" for name in ("pods", "jobs", "namespaced-pods")]
    assert hooks[f"pods.{prefix}"]["objectSelector"]["matchLabels"] == labels
    [condition] = hooks[f"jobs.{prefix}"]["matchConditions"]
    assert f"object.spec.template.metadata.labels['{key}'] == '{value}'" in condition["expression"]
    assert hooks[f"namespaced-pods.{prefix}"]["namespaceSelector"]["matchLabels"] == labels


def test_the_notes_say_how_jobs_are_selected(tmp_path: Path) -> None:
    # As the Jobs webhook selects them: by matchConditions on the pod template's label.
    text = "when its pod template carries that label"
    assert " ".join(notes(tmp_path).split()).count(text) == 1


def test_the_validated_versions_are_the_charts_and_the_controllers() -> None:
    # One claim, three places: the chart's kubeVersion, the controller's start-up check, the schemas here.
    oldest = ".".join(map(str, kubeversions.OLDEST_TESTED))
    assert f">={oldest}.0-0" == CHART_KUBE_VERSION
    assert (f"{oldest}.0", ".".join(map(str, kubeversions.NEWEST_TESTED)) + ".0") == K8S_VERSIONS


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        pytest.param("1.33.9", True, id="1.33"),
        pytest.param("1.34.0", False, id="1.34"),
        pytest.param("1.38.0", False, id="1.38"),
    ],
)
def test_helm_refuses_an_older_cluster_naming_its_version(version: str, refused: bool) -> None:
    args = [str(tool("helm")), "template", RELEASE, str(CHART), f"--kube-version={version}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert (done.returncode != 0) is refused
    if refused:
        assert f"incompatible with Kubernetes v{version}" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("sets", "strings"),
    [
        pytest.param((), (), id="defaults"),
        pytest.param(("controller.enabled=false",), (), id="controller-disabled"),
        pytest.param(
            (
                "controller.enabled=false",
                "lockd.controllerUrl=https://ctl.elsewhere:8443",
                "lockd.events=false",
            ),
            (),
            id="external-controller",
        ),
        pytest.param(
            ("controller.tls.existingSecret=my-tls",),
            (f"controller.tls.caBundle={ca_bundle()}",),
            id="existing-secret",
        ),
        pytest.param(("controller.tls.certManager.enabled=true",), (), id="cert-manager"),
        pytest.param(("controller.webhook.jobs=false",), (), id="jobs-webhook-off"),
        pytest.param(("networkPolicy.enabled=true",), (), id="network-policy"),
        pytest.param(
            (
                "networkPolicy.enabled=true",
                "controller.enabled=false",
                "lockd.controllerUrl=https://pacer.example",
            ),
            (),
            id="network-policy-without-controller",
        ),
        pytest.param(
            (
                "controller.replicas=3",
                "controller.admitTimeoutSeconds=1.5",
                "controller.podDisruptionBudget.enabled=false",
                "controller.webhook.timeoutSeconds=3",
                "controller.priorityClassName=system-cluster-critical",
                "controller.nodeSelector.kubernetes\\.io/os=linux",
                "imagePullSecrets[0].name=pull",
            ),
            (),
            id="other-values",
        ),
    ],
)
def test_every_object_is_valid(sets: tuple[str, ...], strings: tuple[str, ...]) -> None:
    docs = render(*sets, strings=strings)
    checked = 0
    for doc in docs:
        if doc["kind"] in CERT_MANAGER_KINDS:
            assert doc["apiVersion"] == "cert-manager.io/v1"
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 5


def test_lockd_daemonset_has_what_cluster_mode_needs() -> None:
    docs = render()
    daemonset = by_kind(docs, "DaemonSet")
    pod, lockd = pod_spec(daemonset), container(daemonset)
    variables = env(daemonset)
    assert variables["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "STAGGER_STANDALONE" not in variables
    assert lockd["ports"][0]["hostPort"] == 9400
    assert lockd["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    # Shutdown must finish within the grace period: lockd answers long polls at once on SIGTERM.
    assert pod["terminationGracePeriodSeconds"] >= 6
    # Its default trust store is the cluster's CA (its peers have their own CA files), not public CAs.
    assert values(daemonset)["SSL_CERT_FILE"] == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    assert pod.get("automountServiceAccountToken", True)


@pytest.mark.parametrize(
    ("sets", "url", "token_file", "trust"),
    [
        pytest.param(
            ("controller.enabled=false",),
            None,
            None,
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            id="no-controller",
        ),
        pytest.param(
            ("controller.enabled=false", "lockd.controllerUrl=https://ctl.elsewhere:8443"),
            "https://ctl.elsewhere:8443",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            None,  # an outside controller may have a publicly signed certificate: the image's CAs stay
            id="external-controller",
        ),
    ],
)
def test_lockd_without_the_charts_controller(
    sets: tuple[str, ...], url: str | None, token_file: str | None, trust: str | None
) -> None:
    docs = render(*sets)
    assert not [doc for doc in docs if "controller" in doc["metadata"]["name"]]
    daemonset = by_kind(docs, "DaemonSet")
    plain = values(daemonset)
    assert plain.get("STAGGER_CONTROLLER_URL") == url
    assert plain.get("STAGGER_CONTROLLER_TOKEN_FILE") == token_file
    assert "STAGGER_CONTROLLER_CA_FILE" not in plain
    assert plain.get("SSL_CERT_FILE") == trust
    assert [v["name"] for v in pod_spec(daemonset)["volumes"]] == ["policies"]


def test_lockd_settings_in_the_chart_are_accepted_by_lockd(tmp_path: Path) -> None:
    from lockd.settings import parse_settings

    plain = {**values(by_kind(render(), "DaemonSet")), "STAGGER_POLICIES": str(tmp_path / "p.yaml")}
    settings = parse_settings([], plain)
    assert settings.server.port == 9400
    assert settings.standalone is False
    assert settings.anonymous_allowed is False
    assert settings.queue.max_queue == 1000
    assert settings.node.dependency_interval == 5.0
    assert settings.cluster.daemonset_wait == 120.0
    assert settings.groups.controller_url == "https://demo-stagger-controller-leader.stagger.svc:443"
    assert str(settings.groups.controller_token_file) == "/var/run/stagger/controller-token/token"
    anonymous = values(by_kind(render("lockd.allowAnonymous=true"), "DaemonSet"))
    assert parse_settings([], {**anonymous, "STAGGER_POLICIES": "p.yaml"}).anonymous_allowed is True


@pytest.mark.parametrize(
    "kind", [pytest.param("DaemonSet", id="lockd"), pytest.param("Deployment", id="controller")]
)
def test_no_volume_is_mounted_inside_another(kind: str) -> None:
    # A mount point inside a ConfigMap or Secret volume would have to be created in a read-only volume.
    paths = [m["mountPath"].rstrip("/") + "/" for m in container(by_kind(render(), kind))["volumeMounts"]]
    assert len(paths) >= 3
    assert not [(a, b) for a in paths for b in paths if a != b and b.startswith(a)]


@pytest.mark.parametrize(
    ("sets", "proc_root"),
    [
        pytest.param((), Path("/proc"), id="default-own-proc"),
        pytest.param(("lockd.hostProc=true",), Path("/host/proc"), id="host-proc"),
    ],
)
def test_lockd_reads_load_from_the_hosts_proc_only_when_asked(
    sets: tuple[str, ...], proc_root: Path, tmp_path: Path
) -> None:
    from lockd.settings import parse_settings

    daemonset = by_kind(render(*sets), "DaemonSet")
    plain = {**values(daemonset), "STAGGER_POLICIES": str(tmp_path / "p.yaml")}
    assert parse_settings([], plain).node.proc_root == proc_root
    volumes = {v["name"]: v for v in pod_spec(daemonset)["volumes"]}
    if proc_root == Path("/proc"):
        assert "STAGGER_PROC_ROOT" not in plain
        assert not [v for v in volumes.values() if "hostPath" in v]
    else:
        assert mounted_file(daemonset, f"{proc_root}/pressure/io") == {
            "name": "host-proc",
            "hostPath": {"path": "/proc", "type": "Directory"},
        }


@pytest.mark.parametrize(
    ("sets", "priority", "strategy"),
    [
        pytest.param(
            (),
            "system-node-critical",
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            id="defaults",
        ),
        pytest.param(
            ("lockd.updateStrategy.rollingUpdate.maxUnavailable=3", "lockd.priorityClassName="),
            None,
            {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 3}},
            id="max-unavailable-and-no-priority",
        ),
    ],
)
def test_lockd_priority_tolerations_and_rollout(
    sets: tuple[str, ...], priority: str | None, strategy: dict[str, object]
) -> None:
    daemonset = by_kind(render(*sets), "DaemonSet")
    pod = pod_spec(daemonset)
    # lockd must run wherever enabled pods do: before them, on every node, tainted ones included.
    assert pod.get("priorityClassName") == priority
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert daemonset["spec"]["updateStrategy"] == strategy


def test_a_long_release_name_keeps_every_name_within_kubernetes_limits() -> None:
    """Helm allows release names of 53 characters; every object name (and so every Service's DNS label and
    every name in the serving certificate) must stay at most 63."""
    release = "a-very-long-release-name-for-a-platform-team-stagger1"
    assert len(release) == 53
    done = subprocess.run(
        [str(tool("helm")), "template", release, str(CHART), "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names = [doc["metadata"]["name"] for doc in yaml.safe_load_all(done.stdout) if doc]
    assert names and all(len(name) <= 63 for name in names), [n for n in names if len(n) > 63]


def test_the_charts_app_version_is_staggers_version() -> None:
    """The image tag defaults to appVersion; the processes' build-info metrics say stagger.version.VERSION."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION


def test_lockds_probes_have_a_port_of_their_own() -> None:
    """The kubelet's probes go to lockd.probePort, a listener apart from the lock port's traffic; the two
    ports must differ, or the render fails saying so."""
    docs = render("lockd.port=9500", "lockd.probePort=9501")
    [lockd] = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = lockd["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p for p in spec["ports"]}
    assert ports["probes"] == {"name": "probes", "containerPort": 9501, "protocol": "TCP"}
    assert "hostPort" not in ports["probes"] and ports["http"]["hostPort"] == 9500
    assert spec["readinessProbe"]["httpGet"]["port"] == "probes"
    assert spec["livenessProbe"]["httpGet"]["port"] == "probes"
    env = {e["name"]: e.get("value") for e in spec["env"]}
    assert env["STAGGER_PROBE_LISTEN"] == "0.0.0.0:9501"
    with pytest.raises(RenderError, match=re.escape("lockd.probePort (9400) must differ from lockd.port")):
        render("lockd.probePort=9400")
