"""The release manifest (`make manifests`, README "Install without Helm") on real nodes: `kubectl apply -f` of
it, with cert-manager running beside the control plane (its own controller and cainjector, built from its Go
module by `make node-tools`, out of cluster with the admin kubeconfig) and the token made as the README says,
installs a working stagger: cert-manager issues the controller's certificate and puts its CA in the
webhook's caBundle, lockd is Ready on every node, a controller replica leads, and an opted-in pod gets the
init client and its grant and starts. `kubectl delete -f` removes it all. Runs before the session's Helm
release exists (same names, same hostPorts)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.realcluster.cluster import NODE_TOOLS_DIR, RealCluster
from tests.nodes.kube import PREFIX, Kube, is_ready, wait_for, workload
from tests.nodes.policies import STAGGER_IMAGE
from tests.tools import ROOT, tool

NAMESPACE = "stagger-system"
CERT_MANAGER_MODULE = ROOT / "testbed" / "certmanager"


def _cert_manager_crds() -> str:
    """cert-manager's CRDs of the version the test bed builds (its module's deploy/crds), with the labels its
    chart would template filled in as a release named cert-manager has them."""
    listed = subprocess.run(
        ["go", "list", "-m", "-json", "github.com/cert-manager/cert-manager"],
        cwd=CERT_MANAGER_MODULE,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    crds = sorted((Path(json.loads(listed.stdout)["Dir"]) / "deploy" / "crds").glob("crd-*.yaml"))
    assert crds, "no CRDs in cert-manager's module"
    text = "\n---\n".join(path.read_text() for path in crds)
    for template in ('{{ template "cert-manager.name" . }}', "{{ .Release.Name }}"):
        text = text.replace(template, "cert-manager")
    return text


@pytest.fixture(scope="module")
def cert_manager(kube: Kube, real_cluster: RealCluster) -> Iterator[None]:
    binaries = NODE_TOOLS_DIR / "cert-manager"
    if not (binaries / "controller").exists():
        pytest.fail("no cert-manager in .tools/nodes: run `make node-tools`", pytrace=False)
    crds = _cert_manager_crds()
    kube.run("kubectl", "apply", "-f", "-", input=crds)
    logs = Path(real_cluster.data_dir) / "cert-manager"
    logs.mkdir(exist_ok=True)
    common = ["--kubeconfig", kube.kubeconfig, "--leader-elect=false"]
    processes = []
    try:
        for name, extra in (
            (
                "controller",
                ["--metrics-listen-address=127.0.0.1:0", "--cluster-resource-namespace=kube-system"],
            ),
            ("cainjector", []),
        ):
            with open(logs / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [str(binaries / name), *common, *extra], stdout=log, stderr=subprocess.STDOUT
                    )
                )
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        kube.run("kubectl", "delete", "-f", "-", "--wait", input=crds, check=False)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make manifests` with the test bed's image (no registry here) in place of the published one."""
    path = tmp_path_factory.mktemp("manifest") / "install.yaml"
    repository, _, tag = STAGGER_IMAGE.rpartition(":")
    args = f"--set image.repository={repository} --set image.tag={tag} --set image.pullPolicy=Never"
    done = subprocess.run(
        ["make", "-s", "manifests", f"MANIFEST={path}", f"MANIFEST_ARGS={args}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return path


def _make_the_token(manifest: Path, kube: Kube) -> None:
    """The token command, run by a shell as the manifest's own comment writes it (the README shows the same)."""
    line = next(line for line in manifest.read_text().splitlines() if "create secret generic" in line)
    command = line.lstrip("# ")
    assert command.startswith(f"kubectl -n {NAMESPACE} create secret generic "), command
    kubectl = tool("kubectl")
    env = {**os.environ, "KUBECONFIG": kube.kubeconfig, "PATH": f"{kubectl.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{command}: {done.stderr}"


def test_kubectl_apply_of_the_release_manifest_installs_a_working_stagger(
    cert_manager: None, manifest: Path, kube: Kube, real_cluster: RealCluster
) -> None:
    kubectl = str(tool("kubectl"))
    kube.run("kubectl", "apply", "-f", str(manifest))
    namespace = "manifest-pods"
    try:
        _make_the_token(manifest, kube)

        def issued() -> bool | None:
            names = kube.run("kubectl", "-n", NAMESPACE, "get", "secret", "-o", "name").split()
            return True if "secret/stagger-controller-tls" in names else None

        wait_for("cert-manager to issue the controller's certificate", issued, timeout=120)

        def injected() -> str | None:
            hooks = json.loads(
                kube.run("kubectl", "get", "mutatingwebhookconfiguration", "stagger-controller", "-o", "json")
            )["webhooks"]
            bundles = {hook.get("clientConfig", {}).get("caBundle", "") for hook in hooks}
            return bundles.pop() if len(bundles) == 1 and "" not in bundles else None

        wait_for("cainjector to put the CA in every webhook's caBundle", injected, timeout=120)

        def ready() -> bool | None:
            lockds = kube.pods(NAMESPACE, "app.kubernetes.io/component=lockd")
            leaders = kube.pods(NAMESPACE, f"app.kubernetes.io/component=controller,{PREFIX}/leader=1")
            nodes = len(real_cluster.nodes)
            return True if sum(map(is_ready, lockds)) >= nodes and any(map(is_ready, leaders)) else None

        wait_for("lockd Ready on every node and a controller leader", ready, timeout=180)

        kube.namespace(namespace)
        kube.apply(workload("opted", namespace, replicas=1, cpu_seconds=0.2))

        def started() -> dict | None:
            pods = kube.pods(namespace)
            return pods[0] if len(pods) == 1 and is_ready(pods[0]) else None

        pod = wait_for("the opted-in pod Ready", started, timeout=120)
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["stagger-wait"]
        assert f"{PREFIX}/granted-at" in pod["metadata"]["annotations"]
    finally:
        kube.delete_namespace(namespace)
        subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                kube.kubeconfig,
                "delete",
                "-f",
                str(manifest),
                "--wait",
                "--timeout=180s",
            ],
            capture_output=True,
            timeout=240,
            check=False,
        )
    status, _ = real_cluster.api("GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert status == 404, "the namespace outlived kubectl delete -f"
    status, _ = real_cluster.api(
        "GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/stagger-controller"
    )
    assert status == 404, "the webhook configuration outlived kubectl delete -f"
