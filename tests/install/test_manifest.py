"""`make manifests`, the release manifest for `kubectl apply -f` (README.md, "Install without Helm"), run as
make runs it: the file it writes (DIST/install.yaml) is a Namespace, stagger-system, then exactly what the
chart renders with charts/stagger/release-values.yaml (the objects listed by kind and name), every
namespaced object in stagger-system; its certificates are cert-manager's (Issuers, Certificates, the CA
injected into the webhooks), and it holds no Secret at all: no private key, no group API token (the chart's
token is random once per install, so the file says how to make it, and README says the same); no Helm hooks
and no test pod; the image is the chart's appVersion; two runs write the same bytes (nothing random, nothing
read back with `lookup`); MANIFEST_ARGS reach helm, and a failed render leaves no file behind.

Against the real control plane (`make test-real`): after cert-manager's CRDs (github.com/cert-manager/
cert-manager@v1.21.2, deploy/crds, from the Go module proxy with `go mod download`), the API server accepts
the whole file with `kubectl apply --dry-run=server`, server-side and client-side, and puts every namespaced
object in stagger-system."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.controlplane.launcher import ControlPlane
from tests.tools import ROOT, tool

CHART = ROOT / "charts" / "stagger"
RELEASE_VALUES = CHART / "release-values.yaml"
NAMESPACE = "stagger-system"
TOKEN_SECRET = "stagger-controller-token"
CERT_MANAGER = "github.com/cert-manager/cert-manager@v1.21.2"

Doc = dict[str, Any]

# The file's objects, in its order: the Namespace first, then Helm's install order (kinds it does not know,
# cert-manager's, after the ones it does).
EXPECTED = [
    ("Namespace", NAMESPACE),
    ("PodDisruptionBudget", "stagger-controller"),
    ("ServiceAccount", "stagger-controller"),
    ("ServiceAccount", "stagger-lockd"),
    ("ConfigMap", "stagger-policies"),
    ("ClusterRole", "stagger-controller"),
    ("ClusterRole", "stagger-lockd"),
    ("ClusterRoleBinding", "stagger-controller"),
    ("ClusterRoleBinding", "stagger-lockd"),
    ("Role", "stagger-controller"),
    ("RoleBinding", "stagger-controller"),
    ("Service", "stagger-controller"),
    ("Service", "stagger-controller-leader"),
    ("DaemonSet", "stagger-lockd"),
    ("Deployment", "stagger-controller"),
    ("MutatingWebhookConfiguration", "stagger-controller"),
    ("Certificate", "stagger-controller-ca"),
    ("Certificate", "stagger-controller"),
    ("Issuer", "stagger-controller-selfsigned"),
    ("Issuer", "stagger-controller-ca"),
    ("Lease", "stagger-controller"),
    ("ValidatingAdmissionPolicy", "stagger-lockd-writes"),
    ("ValidatingAdmissionPolicyBinding", "stagger-lockd-writes"),
]
# Kinds without a namespace; every other kind of the file is namespaced (the real API server's discovery
# says the same: test_the_api_server_accepts_the_manifest).
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
    }
)


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # PYTHON: sim/tools.sh installs helm with this venv's pip when it is missing, as tests/tools.py does.
    return subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={sys.executable}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def build(dist: Path, *args: str) -> str:
    tool("helm")  # skips, with the reason, where sim/tools.sh cannot install it
    done = make("manifests", f"DIST={dist}", *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return (dist / "install.yaml").read_text()


def objects(text: str) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    build(dist)
    return dist / "install.yaml"


@pytest.fixture(scope="module")
def docs(manifest: Path) -> list[Doc]:
    return objects(manifest.read_text())


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    [found] = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return found


def namespaces(node: object) -> Iterator[object]:
    """Every value of a `namespace` key, at any depth (metadata, subjects, service references)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "namespace":
                yield value
            yield from namespaces(value)
    elif isinstance(node, list):
        for item in node:
            yield from namespaces(item)


def test_the_manifest_is_a_namespace_then_the_charts_objects(docs: list[Doc]) -> None:
    assert [(doc["kind"], doc["metadata"]["name"]) for doc in docs] == EXPECTED
    namespace = docs[0]
    assert namespace["apiVersion"] == "v1"
    # lockd's hostPort: Pod Security baseline would refuse its pods.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_objects_are_the_charts_own_render(docs: list[Doc]) -> None:
    """Object for object what `helm template` renders with the release values, less the hooks and the token
    Secret: nothing else was dropped or changed on the way into the file."""
    args = [str(tool("helm")), "template", "stagger", str(CHART), "--namespace", NAMESPACE]
    args += ["--include-crds", f"--values={RELEASE_VALUES}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rendered = objects(done.stdout)
    hooks = [doc for doc in rendered if "helm.sh/hook" in doc["metadata"].get("annotations", {})]
    assert [(doc["kind"], doc["metadata"]["name"]) for doc in hooks] == [("Pod", "stagger-selftest")]
    token = named(rendered, "Secret", TOKEN_SECRET)
    kept = [doc for doc in rendered if doc not in hooks and doc is not token]
    assert docs[1:] == kept


def test_every_namespaced_object_is_in_stagger_system(docs: list[Doc]) -> None:
    for doc in docs:
        where = (doc["kind"], doc["metadata"]["name"])
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], where
        else:
            # Without one, `kubectl apply` would put it in the namespace of the user's kubeconfig.
            assert doc["metadata"].get("namespace") == NAMESPACE, where
        # And every reference (binding subjects, the webhooks' Services) points there too.
        assert set(namespaces(doc)) <= {NAMESPACE}, where


def test_the_certificates_come_from_cert_manager(docs: list[Doc]) -> None:
    serving = named(docs, "Certificate", "stagger-controller")
    assert serving["spec"]["secretName"] == "stagger-controller-tls"
    assert serving["spec"]["issuerRef"]["name"] == "stagger-controller-ca"
    assert named(docs, "Certificate", "stagger-controller-ca")["spec"]["isCA"] is True
    assert named(docs, "Issuer", "stagger-controller-selfsigned")["spec"] == {"selfSigned": {}}
    webhooks = named(docs, "MutatingWebhookConfiguration", "stagger-controller")
    annotations = webhooks["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/stagger-controller"
    # cert-manager's cainjector fills the caBundle in the cluster; none is rendered.
    assert all("caBundle" not in hook["clientConfig"] for hook in webhooks["webhooks"])


def test_no_secret_no_private_key_and_how_to_make_the_token(manifest: Path, docs: list[Doc]) -> None:
    text = manifest.read_text()
    assert [doc for doc in docs if doc["kind"] == "Secret"] == []
    assert "PRIVATE KEY" not in text
    # Both parts mount the token Secret the file leaves out; its first lines say how to make it.
    for kind, name in (("DaemonSet", "stagger-lockd"), ("Deployment", "stagger-controller")):
        volumes = named(docs, kind, name)["spec"]["template"]["spec"]["volumes"]
        assert TOKEN_SECRET in {v.get("secret", {}).get("secretName") for v in volumes}, kind
    command = f"kubectl -n {NAMESPACE} create secret generic {TOKEN_SECRET} --from-literal=token="
    header = text[: text.index("apiVersion:")]
    assert f"#   {command}" in header


def test_the_readme_makes_the_token_as_the_manifest_says(manifest: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Install without Helm", 1)[1].split("\n#", 1)[0]
    commands = " ".join(re.findall(r"```sh\n(.*?)```", section, re.DOTALL)).replace("\\\n", " ")
    header = manifest.read_text().split("apiVersion:", 1)[0]
    [made] = re.findall(r"^#   (kubectl .*)$", header, re.MULTILINE)
    assert " ".join(made.split()) in " ".join(commands.split())


def test_no_helm_hooks_and_no_test_pods(docs: list[Doc]) -> None:
    assert "Pod" not in {doc["kind"] for doc in docs}
    for doc in docs:
        annotations = doc["metadata"].get("annotations", {})
        assert not [key for key in annotations if key.startswith("helm.sh/")], doc["metadata"]["name"]


def test_the_image_is_the_charts_app_version(docs: list[Doc]) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    expected = f"ghcr.io/technicianted/stagger:{app_version}"
    for kind, name in (("DaemonSet", "stagger-lockd"), ("Deployment", "stagger-controller")):
        spec = named(docs, kind, name)["spec"]["template"]["spec"]
        images = {c["image"] for c in spec.get("initContainers", []) + spec["containers"]}
        assert images == {expected}, kind


def test_two_builds_write_the_same_bytes(manifest: Path, tmp_path: Path) -> None:
    """Nothing random and nothing `lookup` reads back: the file is the same wherever it is built."""
    assert build(tmp_path) == manifest.read_text()


def test_manifest_args_reach_helm(tmp_path: Path) -> None:
    docs = objects(build(tmp_path, "MANIFEST_ARGS=--set image.repository=registry.example.com/stagger"))
    [container] = named(docs, "DaemonSet", "stagger-lockd")["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("registry.example.com/stagger:")


def test_a_failed_render_fails_and_leaves_no_file(tmp_path: Path) -> None:
    tool("helm")
    # The chart refuses an existing Secret together with cert-manager (the release values' choice).
    done = make("manifests", f"DIST={tmp_path}", "MANIFEST_ARGS=--set controller.tls.existingSecret=mine")
    assert done.returncode != 0
    assert "set either existingSecret or certManager.enabled" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def cert_manager_crds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cert-manager's CRDs (deploy/crds of its Go module, which the module proxy serves), downloaded into
    Go's module cache once."""
    go = shutil.which("go")
    if go is None:
        pytest.skip(f"no go on PATH: cert-manager's CRDs come from its Go module {CERT_MANAGER}")
    # Outside any module, so that no go.mod around is read or changed.
    done = subprocess.run(
        [go, "mod", "download", "-json", CERT_MANAGER],
        cwd=tmp_path_factory.mktemp("go"),
        env={**os.environ, "GOFLAGS": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"go mod download {CERT_MANAGER}: {done.stdout}{done.stderr}"
    crds = Path(json.loads(done.stdout)["Dir"]) / "deploy" / "crds"
    assert sorted(crds.glob("cert-manager.io_*.yaml")), f"no CRDs in {crds}"
    return crds


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = str(kubeconfig)

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [str(tool("kubectl")), "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane,
    cert_manager_crds: Path,
    manifest: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kubectl]:
    """The session's real control plane with cert-manager's CRDs and the manifest's Namespace (a dry run
    creates nothing, so the namespaced objects need it to exist), for the module: a namespace being
    deleted takes no new objects, not even in a dry run. Both removed afterwards."""
    kubectl = Kubectl(control_plane.kubeconfig)
    kubectl("apply", "--server-side", "-f", str(cert_manager_crds))
    names = [
        yaml.safe_load(path.read_text())["metadata"]["name"] for path in cert_manager_crds.glob("*.yaml")
    ]
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{name}" for name in names))
    namespace = tmp_path_factory.mktemp("namespace") / "namespace.yaml"
    namespace.write_text(yaml.safe_dump(objects(manifest.read_text())[0]))
    kubectl("apply", "--server-side", "-f", str(namespace))
    try:
        yield kubectl
    finally:
        # Not waited for: the namespace controller finishes it; nothing else on this plane uses either.
        kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        kubectl("delete", "-f", str(cert_manager_crds), "--wait=false")


@pytest.mark.parametrize(
    "apply",
    [pytest.param(("--server-side",), id="server-side"), pytest.param((), id="client-side")],
)
def test_the_api_server_accepts_the_manifest(
    cluster: Kubectl, manifest: Path, docs: list[Doc], apply: tuple[str, ...]
) -> None:
    accepted = json.loads(cluster("apply", *apply, "--dry-run=server", "-f", str(manifest), "-o", "json"))
    items = accepted["items"] if accepted.get("kind") == "List" else [accepted]
    assert [(item["kind"], item["metadata"]["name"]) for item in items] == [
        (doc["kind"], doc["metadata"]["name"]) for doc in docs
    ]
    # The API server's own word on which kinds are namespaced (its discovery): they all landed in
    # stagger-system. Columns: NAME [SHORTNAMES] APIVERSION NAMESPACED KIND.
    rows = [line.split() for line in cluster("api-resources", "--no-headers").splitlines()]
    namespaced = {(group(row[-3]), row[-1]) for row in rows if row[-2] == "true"}
    for item in items:
        where = (item["kind"], item["metadata"]["name"])
        if (group(item["apiVersion"]), item["kind"]) in namespaced:
            assert item["metadata"]["namespace"] == NAMESPACE, where
        else:
            assert item["kind"] in CLUSTER_SCOPED and "namespace" not in item["metadata"], where


def group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""
