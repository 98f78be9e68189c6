"""`helm install`, `helm upgrade` with a changed policy, and `helm uninstall` of a second release on the real
nodes (its own prefix, namespace and lockd port, beside the session's release): the upgrade's policy reaches
every node's lockd (its /status on the node's address shows the new limit), and the uninstall leaves nothing
of the release: no pod, no object in its namespace or cluster-wide, no lockd answering on the nodes."""

from __future__ import annotations

import json
import urllib.error

import pytest

from sim.realcluster.cluster import RealCluster
from tests.nodes.kube import Kube, Release, lockd_status, wait_for

PORT = 9401


def _policies(limit: int) -> dict:
    return {"nodePolicies": [{"name": "default", "throttleConfig": {"maxConcurrent": {"value": limit}}}]}


def _limits(real_cluster: RealCluster) -> set[int] | None:
    try:
        return {lockd_status(n.plan.address, PORT)["policy"]["maxConcurrent"] for n in real_cluster.nodes}
    except OSError:
        return None


def test_upgrade_changes_the_policy_and_uninstall_leaves_nothing(
    stagger: Release, kube: Kube, real_cluster: RealCluster
) -> None:
    release = Release(kube, name="lifecycle", namespace="lifecycle-system", image=stagger.image)
    # Its probe port is on the pod's IP (no hostPort): only its own lock port must differ from it.
    values = {"prefix": "lifecycle.stagger.test", "lockd": {"port": PORT, "probePort": PORT + 1}}
    release.install({**values, "policies": _policies(1)})
    try:
        release.wait_ready(nodes=len(real_cluster.nodes))
        assert _limits(real_cluster) == {1}
        release.upgrade({**values, "policies": _policies(3)})
        wait_for(
            "the new policy on every node",
            lambda: True if _limits(real_cluster) == {3} else None,
            timeout=120,
        )
    finally:
        release.uninstall()

    def release_objects() -> list:
        return json.loads(
            kube.run("kubectl", "get", "all,configmap,secret,serviceaccount,role,rolebinding,lease,pdb", "-A",
                     "-l", "app.kubernetes.io/instance=lifecycle", "-o", "json")
        )["items"]  # fmt: skip

    # `helm uninstall --wait` returns once the objects it deleted are gone; their pods go after their grace
    # period (the garbage collector deletes them with their ReplicaSet and DaemonSet).
    wait_for("the release's pods gone", lambda: True if not release_objects() else None, timeout=60)
    leftovers = release_objects()
    cluster_wide = json.loads(
        kube.run(
            "kubectl", "get", "clusterrole,clusterrolebinding,mutatingwebhookconfiguration", "-o", "json"
        )
    )["items"]
    mine = [o["metadata"]["name"] for o in cluster_wide if o["metadata"]["name"].startswith("lifecycle-")]
    assert not leftovers, [f"{o['kind']} {o['metadata']['name']}" for o in leftovers]
    assert not mine, mine
    in_namespace = json.loads(
        kube.run("kubectl", "get", "all,configmap,secret,lease", "-n", release.namespace, "-o", "json")
    )
    owned = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in in_namespace["items"]
        if o["kind"] not in ("ConfigMap",) or o["metadata"]["name"] != "kube-root-ca.crt"
    ]
    assert not owned, owned
    for node in real_cluster.nodes:
        with pytest.raises(urllib.error.URLError):
            lockd_status(node.plan.address, PORT)
