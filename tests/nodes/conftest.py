"""The real cluster the tests on real nodes share (`make test-nodes`, `pytest --real-nodes tests/nodes`).

`real_cluster`: one `python -m sim realcluster`-style cluster for the session: the real control plane and
2 real nodes (containerd, kubelet, kube-proxy, each node in its own network namespace), CoreDNS, and the
image `make image` builds (localhost/stagger:dev) imported into both, also under a second name
(localhost/stagger:dev-upgrade, a buildah tag removed once imported) for test_upgrade's `helm upgrade`. Its stop is checked: nothing of it
left on the host (network namespaces, the bridge, mounts, cgroups).

`stagger`: the chart installed once for the session with that image (pullPolicy Never, no registry), every
node's lockd Ready and a controller leader. Tests that change the policy set it back when they end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.realcluster.cluster import RealCluster, RealClusterError, preflight
from tests.nodes.kube import Kube, Release, lockd_status, wait_for
from tests.nodes.policies import ONE_SLOT_LABEL, POLICIES, STAGGER_IMAGE, UPGRADE_IMAGE


def _require_real_nodes() -> None:
    if os.geteuid() != 0:
        pytest.fail("the tests on real nodes need root (network namespaces, cgroups, mounts)", pytrace=False)
    try:
        preflight()
    except RealClusterError as err:
        pytest.fail(str(err), pytrace=False)
    if shutil.which("buildah") is None:
        pytest.fail("no buildah: run `make image` first", pytrace=False)


def _buildah(*args: str, check: bool = True) -> None:
    done = subprocess.run(["buildah", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        pytest.fail(
            f"buildah {' '.join(args)}: {done.stderr.strip()} (run `make image` first)", pytrace=False
        )


ORDER = (
    "test_cli",
    "test_manifest",
    "test_install",
    "test_deployment",
    "test_modes",
    "test_readiness",
    "test_initclient_cost",
    "test_peers",
    "test_upgrade",
    "test_lifecycle",
    "test_hostile",
    "test_failures",
    "test_coldstart",
)
"""The modules' order: the command's own test before the session's cluster exists (one per machine), then the
tests that only add workloads, and last those that break the cluster on purpose (lockd killed, a kubelet
restarted, lockd kept off a node, the whole cluster powered off), so each test starts on a settled cluster."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        stem = item.path.stem
        return ORDER.index(stem) if stem in ORDER else len(ORDER)

    items.sort(key=rank)  # stable: the tests of a module keep their order


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    _require_real_nodes()
    _buildah("tag", STAGGER_IMAGE, UPGRADE_IMAGE)
    images = [STAGGER_IMAGE, UPGRADE_IMAGE]
    cluster = RealCluster(nodes=2, data_dir=tmp_path_factory.mktemp("realcluster"), images=images)
    try:
        cluster.start()
    except BaseException:
        cluster.stop(keep_data=True)
        raise
    finally:
        # Imported into the nodes (or failed to be): the host's image store keeps only what `make image` made.
        _buildah("rmi", UPGRADE_IMAGE, check=False)
    try:
        yield cluster
    finally:
        problems = cluster.stop()
        assert not problems, f"not undone: {problems}"
        assert not Path("/sys/class/net/stgr0").exists()
        assert not any(
            n.startswith("stgr-") for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
        )


@pytest.fixture(scope="session")
def kube(real_cluster: RealCluster) -> Kube:
    return Kube(real_cluster)


@pytest.fixture(scope="session")
def stagger(kube: Kube, real_cluster: RealCluster) -> Iterator[Release]:
    """The chart as the session's release `stagger` in namespace `stagger-system`."""
    release = Release(kube, name="stagger", namespace="stagger-system", image=STAGGER_IMAGE)
    release.install({"policies": POLICIES})
    release.wait_ready(nodes=len(real_cluster.nodes))
    yield release


@pytest.fixture(scope="module")
def one_slot_node(stagger: Release, kube: Kube, real_cluster: RealCluster) -> Iterator[tuple[str, str]]:
    """The first node, labelled to start one pod at a time; (name, address). The label is removed after."""
    node = real_cluster.nodes[0].plan
    kube.run("kubectl", "label", "node", node.name, f"{ONE_SLOT_LABEL}=1", "--overwrite")
    try:
        wait_for(
            f"lockd on {node.name} to choose node policy one-slot",
            lambda: True if lockd_status(node.address)["policy"]["name"] == "one-slot" else None,
            timeout=30,
        )
        yield node.name, node.address
    finally:
        kube.run("kubectl", "label", "node", node.name, f"{ONE_SLOT_LABEL}-")
