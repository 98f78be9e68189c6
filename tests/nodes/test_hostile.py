"""A hostile pod on a real node against the real lockd, with real service-account tokens: a pod that is not
opted in mounts its own projected token (stagger's audience, as admission mounts it into the init client)
and asks lockd for a slot, then to release it, in the name of an opted-in pod on the same node. The kubelet
issued the token for the attacker, the API server's TokenReview says so, and lockd refuses both (403)
naming whose the token is. Then it asks and releases again with no token at all: with the chart's defaults
(`lockd.requirePodToken: false`) lockd still refuses both (403), because admission gave the victim a
token, so an ask in its name must carry it. The victim's own init client, with the token admission
projected into it, was verified and granted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.nodes.kube import Kube, Release, init_status, is_ready, wait_for, workload
from tests.nodes.policies import STAGGER_IMAGE
from tests.tools import tool

# The attacker: reads its own token, then GET and DELETE /v1/lock in the victim's name, printing the answers.
ATTACK = """
import os, urllib.error, urllib.request
token = open("/var/run/secrets/stagger/token").read().strip()
query = "namespace={}&name={}&uid={}".format(os.environ["VICTIM_NAMESPACE"], os.environ["VICTIM_NAME"], os.environ["VICTIM_UID"])
url = "http://{}:{}/v1/lock?{}".format(os.environ["HOST_IP"], os.environ["LOCKD_PORT"], query)
for headers in ({"Authorization": "Bearer " + token}, {}):
    for method in ("GET", "DELETE"):
        request = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                print(method, answer.status, answer.read().decode().strip(), flush=True)
        except urllib.error.HTTPError as err:
            print(method, err.code, err.read().decode().strip(), flush=True)
"""


def _attacker(namespace: str, victim: dict[str, Any], port: int) -> dict[str, Any]:
    meta = victim["metadata"]
    env = [
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "LOCKD_PORT", "value": str(port)},
        {"name": "VICTIM_NAMESPACE", "value": meta["namespace"]},
        {"name": "VICTIM_NAME", "value": meta["name"]},
        {"name": "VICTIM_UID", "value": meta["uid"]},
    ]
    token = {"serviceAccountToken": {"audience": "stagger", "expirationSeconds": 600, "path": "token"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "attacker", "namespace": namespace},
        "spec": {
            "nodeName": victim["spec"]["nodeName"],
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "attack",
                    "image": STAGGER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", ATTACK],
                    "env": env,
                    "volumeMounts": [
                        {"name": "token", "mountPath": "/var/run/secrets/stagger", "readOnly": True}
                    ],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                }
            ],
            "volumes": [{"name": "token", "projected": {"sources": [token]}}],
        },
    }


def test_a_pod_with_its_own_token_cannot_act_in_another_pods_name(stagger: Release, kube: Kube) -> None:
    namespace = kube.namespace("hostile")
    try:
        kube.apply(workload("victim", namespace, replicas=1, cpu_seconds=0.2))

        def victim_ready() -> dict[str, Any] | None:
            pods = kube.pods(namespace, "app=victim")
            return pods[0] if len(pods) == 1 and is_ready(pods[0]) else None

        victim = wait_for("the victim Ready", victim_ready, timeout=120)
        # Its own init client showed lockd the token admission projected into it, and was granted.
        [token_volume] = [v for v in victim["spec"]["volumes"] if v["name"] == "stagger-pod-token"]
        assert token_volume["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "stagger"
        assert init_status(victim, "stagger-wait")["state"]["terminated"]["message"] == '{"slot": "granted"}'

        kube.apply(_attacker(namespace, victim, stagger.lockd_port()))

        def finished() -> bool | None:
            phase = kube.get(f"/api/v1/namespaces/{namespace}/pods/attacker")["status"].get("phase")
            return True if phase in ("Succeeded", "Failed") else None

        wait_for("the attacker to finish", finished, timeout=90)
        log = kube.run("kubectl", "logs", "-n", namespace, "attacker")
        # One line per answer (a JSON answer ends with its own newline: stripped by the attacker).
        lines = [line for line in log.strip().splitlines() if line.strip()]
        assert [line.split(" ", 2)[:2] for line in lines] == [["GET", "403"], ["DELETE", "403"]] * 2, log
        whose = f"the token is pod {namespace}/attacker's"
        assert all(whose in line for line in lines[:2]), log
        # Without a token at all, under the chart's defaults (no requirePodToken): the victim was given
        # one by admission, so an ask or a release in its name must show it.
        assert all("token" in line for line in lines[2:]), log
    finally:
        kube.delete_namespace(namespace)


def _sleeper(name: str, namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "sleep",
                    "image": STAGGER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "import time; time.sleep(3600)"],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                }
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }


def test_lockds_token_cannot_patch_a_pod_on_another_node(
    stagger: Release, kube: Kube, tmp_path: Path
) -> None:
    """Someone who takes node A's lockd token (the token the API server issues for lockd's pod there, with
    its node-name claim; asked for here with the TokenRequest API, as the kubelet asks for it) can change
    stagger's annotations on node A's pods, and nothing on node B's, nor a pod's image on node A: the
    chart's ValidatingAdmissionPolicy (`lockd.confineWrites`, on by default) refuses, whatever RBAC says."""
    nodes = sorted(node["metadata"]["name"] for node in kube.get("/api/v1/nodes")["items"])
    assert len(nodes) >= 2, nodes
    namespace = kube.namespace("hostile-writes")
    try:
        kube.apply(_sleeper("on-a", namespace, nodes[0]), _sleeper("on-b", namespace, nodes[1]))
        lockd = stagger.lockd_pod(nodes[0])
        token = kube.run(
            "kubectl", "create", "token", lockd["spec"]["serviceAccountName"], "-n", stagger.namespace,
            "--bound-object-kind", "Pod", "--bound-object-name", lockd["metadata"]["name"], "--duration", "10m",
        ).strip()  # fmt: skip
        admin = yaml.safe_load(Path(kube.kubeconfig).read_text())
        cluster = admin["clusters"][0]["cluster"]
        as_lockd = tmp_path / "lockd-kubeconfig"
        as_lockd.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "users": [{"name": "lockd", "user": {"token": token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "lockd"}}],
                    "current-context": "c",
                }
            )
        )

        def patch(pod: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
            # A strategic merge (kubectl's default for pods): the containers merge by name, so an image
            # change is a valid pod update and reaches the admission policy.
            return subprocess.run(
                [str(tool("kubectl")), "--kubeconfig", str(as_lockd), "patch", "pod", pod, "-n", namespace,
                 "-p", json.dumps(body)],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        stamp = {"metadata": {"annotations": {f"{stagger.prefix}/granted-at": "2026-11-28T00:00:00Z"}}}
        own = patch("on-a", stamp)
        assert own.returncode == 0, own.stderr
        other = patch("on-b", stamp)
        assert other.returncode != 0 and "denied" in other.stderr.lower(), other.stderr
        image = patch("on-a", {"spec": {"containers": [{"name": "sleep", "image": "attacker/image:1"}]}})
        assert image.returncode != 0 and "denied" in image.stderr.lower(), image.stderr
        on_b = kube.get(f"/api/v1/namespaces/{namespace}/pods/on-b")
        assert f"{stagger.prefix}/granted-at" not in (on_b["metadata"].get("annotations") or {})
    finally:
        kube.delete_namespace(namespace)
