"""lockd's `--pacemaker-configs` against a real kube-apiserver, with pod-pacemaker's own CRD (the API
emulator serves no custom resources: tests/lockd_cluster/test_pacemaker_objects.py tests the CRD's
absence there, and the pure rules). lockd runs as a real process over HTTP.

Started before the CRD is installed, lockd says it is absent, finds it within `--pacemaker-recheck` once
it is, and follows the objects: one of higher priority applies (its name and source in /status), a change
of it applies at once, an invalid version (one the CRD accepts and stagger refuses) is skipped, logged
naming the object and the field, and counted, and its last good version stays; of equal priority the
file's node policy wins, and so does the file's of the same name (logged once); with the CRD deleted,
lockd says it is absent again and the file alone applies. A new object wakes a waiting long poll.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from lockd.pacemakerwatch import PACEMAKERCONFIGS
from sim.controlplane.launcher import ControlPlane
from stagger import kube
from stagger.kube import NAMESPACES, NODES, PODS, ApiError, Resource, RestClient
from stagger.names import Names
from tests.controlplane.support import requires_binaries
from tests.lockd_cluster.test_pacemaker_objects import LockdProcess, lockd_process
from tests.waiting import eventually

pytestmark = [pytest.mark.controlplane, requires_binaries]

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False)

# github.com/woehrl01/pod-pacemaker charts/pod-pacemaker/crds/woehrl.net_pacemakerconfigs.yaml (commit
# 79e4275), its descriptions left out.
CRD = yaml.safe_load(r"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pacemakerconfigs.woehrl.net}
spec:
  group: woehrl.net
  names:
    kind: PacemakerConfig
    listKind: PacemakerConfigList
    plural: pacemakerconfigs
    singular: pacemakerconfig
  scope: Cluster
  versions:
  - name: v1alpha
    schema:
      openAPIV3Schema:
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            properties:
              nodeSelector:
                additionalProperties: {type: string}
                type: object
              priority: {type: integer}
              throttleConfig:
                properties:
                  cpu:
                    properties:
                      incrementBy: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                      maxLoad: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                    required: [maxLoad]
                    type: object
                  io:
                    properties:
                      incrementBy: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                      maxLoad: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                    required: [maxLoad]
                    type: object
                  loadAvg:
                    properties:
                      incrementBy: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                      maxLoad: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                      perCore: {type: boolean}
                    required: [maxLoad]
                    type: object
                  maxConcurrent:
                    properties:
                      perCore: {pattern: '^[0-9]+(\.[0-9]+)?$', type: string}
                      value: {minimum: 1, type: integer}
                    type: object
                  rateLimit:
                    properties:
                      burst: {minimum: 1, type: integer}
                      fillFactor: {pattern: '^[0-9]+(\.[0-9]+)?(µs|ns|ms|s|m|h)$', type: string}
                    required: [burst, fillFactor]
                    type: object
                type: object
            required: [nodeSelector, priority, throttleConfig]
            type: object
        type: object
    served: true
    storage: true
    subresources:
      status: {}
""")

POLICIES = """\
nodePolicies:
- name: general
  throttleConfig: {maxConcurrent: {value: 1}}
- name: gpu
  priority: 5
  nodeSelector: {pool: gpu}
  throttleConfig: {maxConcurrent: {value: 1}}
"""
SHADOWED_LINE = "PacemakerConfig gpu has the name of a node policy of the policy file"
ABSENT_LINE = "the PacemakerConfig CRD (pacemakerconfigs.woehrl.net) is not installed"

Probe = Callable[[], Awaitable[bool]]


@pytest.fixture
async def kube_client(control_plane: ControlPlane) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield RestClient(session=session, config=kube.load_config(kubeconfig=control_plane.kubeconfig))


async def install_crd(client: RestClient) -> None:
    await client.create(CRDS, CRD)

    async def established() -> bool:
        crd = await client.get(CRDS, name=CRD["metadata"]["name"])
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, within=30, what="the CRD to be established", poll=0.1)


async def remove_crd(client: RestClient) -> None:
    """Delete the CRD (its objects go with it) and wait until it is gone."""
    try:
        await client.delete(CRDS, name=CRD["metadata"]["name"])
    except ApiError as err:
        if err.status != 404:
            raise

    async def gone() -> bool:
        try:
            await client.get(CRDS, name=CRD["metadata"]["name"])
        except ApiError as err:
            return err.status == 404
        return False

    await eventually(gone, within=60, what="the CRD to be deleted", poll=0.1)


@pytest.fixture
async def node(kube_client: RestClient) -> AsyncIterator[str]:
    """A Node labelled pool=gpu (no kubelet), which the scheduler leaves alone (a NoSchedule taint): only
    the pods a test binds to it by name run there. The CRD is absent before and after the test."""
    await remove_crd(kube_client)
    name = f"pacemaker-{uuid.uuid4().hex[:8]}"
    await kube_client.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": "gpu"}},
            "spec": {"taints": [{"key": "stagger-test/pacemaker", "effect": "NoSchedule"}]},
        },
    )
    try:
        yield name
    finally:
        await remove_crd(kube_client)
        await kube_client.delete(NODES, name=name)


def pacemaker_config(name: str, *, priority: int, throttle: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": PACEMAKERCONFIGS.api_version,
        "kind": PACEMAKERCONFIGS.kind,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"pool": "gpu"}, "priority": priority, "throttleConfig": throttle},
    }


def concurrent(value: int) -> dict[str, Any]:
    return {"maxConcurrent": {"value": value}}


def applies(lockd: LockdProcess, name: str, source: str, limit: int) -> Probe:
    """Whether /status shows this node policy in force, from this source, with this maxConcurrent."""

    async def probe() -> bool:
        shown = (await lockd.status())["policy"]
        return (shown["name"], shown["source"], shown["maxConcurrent"]) == (name, source, limit)

    return probe


async def wait_applies(lockd: LockdProcess, name: str, source: str, limit: int, *, what: str) -> None:
    await eventually(applies(lockd, name, source, limit), within=20, what=what, poll=0.05)


async def pacemaker_status(lockd: LockdProcess) -> dict[str, Any]:
    found: dict[str, Any] = (await lockd.status())["policy"]["pacemakerConfigs"]
    return found


async def wait_status(lockd: LockdProcess, check: Callable[[dict[str, Any]], bool], *, what: str) -> None:
    """Until /status's `policy.pacemakerConfigs` passes `check`."""

    async def probe() -> bool:
        return check(await pacemaker_status(lockd))

    await eventually(probe, within=30, what=what, poll=0.05)


def pacemaker_lockd(
    work: Path, control_plane: ControlPlane, node: str
) -> AbstractAsyncContextManager[LockdProcess]:
    return lockd_process(
        "--pacemaker-configs",
        "--pacemaker-recheck",
        "0.5s",
        work=work,
        kubeconfig=control_plane.kubeconfig,
        node=node,
        policies=POLICIES,
    )


async def test_lockd_finds_the_crd_and_follows_an_object(
    kube_client: RestClient, node: str, tmp_path: Path, control_plane: ControlPlane
) -> None:
    file = str(tmp_path / "policies.yaml")
    async with pacemaker_lockd(tmp_path, control_plane, node) as lockd:
        assert (await pacemaker_status(lockd))["crd"] == "absent"
        await wait_applies(lockd, "gpu", file, 1, what="the file's gpu policy")
        await install_crd(kube_client)
        await wait_status(lockd, lambda found: found["crd"] == "installed", what="lockd to find the CRD")

        # Higher priority than the file's: the object applies; a change of it applies too.
        fast = pacemaker_config("fast", priority=10, throttle=concurrent(3))
        await kube_client.create(PACEMAKERCONFIGS, fast)
        await wait_applies(lockd, "fast", "PacemakerConfig/fast", 3, what="the object to apply")
        patch = {"spec": {"throttleConfig": concurrent(4)}}
        await kube_client.patch(PACEMAKERCONFIGS, name="fast", patch=patch)
        await wait_applies(lockd, "fast", "PacemakerConfig/fast", 4, what="the object's change to apply")

        # A version the CRD takes and stagger refuses: skipped, logged, counted; the last good one stays.
        patch = {"spec": {"throttleConfig": {"cpu": {"maxLoad": "150"}}}}
        await kube_client.patch(PACEMAKERCONFIGS, name="fast", patch=patch)
        await wait_status(lockd, lambda found: "fast" in found["invalid"], what="the invalid version")
        problems = (await pacemaker_status(lockd))["invalid"]["fast"]
        assert 'PacemakerConfig "fast".spec.throttleConfig.cpu.maxLoad: must be greater than 0' in problems
        assert await applies(lockd, "fast", "PacemakerConfig/fast", 4)()
        metrics = (await lockd.get("/metrics"))[1]
        assert 'stagger_lockd_policy_reloads_total{result="object_error"} 1.0' in metrics
        assert 'stagger_lockd_policy_reloads_total{result="object_ok"} 2.0' in metrics

        # The CRD deleted (its objects with it): absent again, the file alone.
        await remove_crd(kube_client)
        await wait_status(
            lockd,
            lambda found: found["crd"] == "absent" and found["objects"] == [],
            what="lockd to see the CRD gone",
        )
        await wait_applies(lockd, "gpu", file, 1, what="the file's policy without the CRD")
        assert lockd.proc.returncode is None
    logged = lockd.log.read_text()
    assert "PacemakerConfig fast skipped (its last good version stays):" in logged
    assert logged.count(ABSENT_LINE) == 2, logged  # at start, and once deleted
    assert "Traceback" not in logged


async def test_the_files_node_policy_wins_ties_and_names(
    kube_client: RestClient, node: str, tmp_path: Path, control_plane: ControlPlane
) -> None:
    await install_crd(kube_client)
    file = str(tmp_path / "policies.yaml")
    async with pacemaker_lockd(tmp_path, control_plane, node) as lockd:
        for name, priority in (("tied", 5), ("gpu", 100)):
            await kube_client.create(
                PACEMAKERCONFIGS, pacemaker_config(name, priority=priority, throttle=concurrent(7))
            )
        # An object whose name is no node policy's name: refused, naming the field.
        await kube_client.create(PACEMAKERCONFIGS, pacemaker_config("bad.name", priority=50, throttle={}))
        await wait_status(
            lockd,
            lambda found: found["objects"] == ["gpu", "tied"] and list(found["invalid"]) == ["bad.name"],
            what="the objects to be read",
        )
        found = await pacemaker_status(lockd)
        assert found["shadowedByFile"] == ["gpu"]
        assert 'PacemakerConfig "bad.name".metadata.name: ' in found["invalid"]["bad.name"]
        assert await applies(lockd, "gpu", file, 1)()
    logged = lockd.log.read_text()
    assert logged.count(SHADOWED_LINE) == 1, logged


async def make_pod(client: RestClient, *, name: str, namespace: str, node: str) -> dict[str, Any]:
    names = Names()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {names.enable_label: "1", names.staggered_label: "1"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }
    return await client.create(PODS, pod, namespace=namespace)


@pytest.fixture
async def namespace(kube_client: RestClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    await kube_client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        yield name
    finally:
        # No kubelet confirms a graceful deletion: the pods go at once.
        for pod in (await kube_client.list(PODS, namespace=name)).get("items") or []:
            await kube_client.delete(
                PODS, name=pod["metadata"]["name"], namespace=name, grace_period_seconds=0
            )
        await kube_client.delete(NAMESPACES, name=name)


async def test_a_new_object_wakes_a_waiting_long_poll(
    kube_client: RestClient, node: str, namespace: str, tmp_path: Path, control_plane: ControlPlane
) -> None:
    await install_crd(kube_client)
    first, second = [
        await make_pod(kube_client, name=f"p{i}", namespace=namespace, node=node) for i in range(2)
    ]
    async with lockd_process(
        "--pacemaker-configs",
        work=tmp_path,
        kubeconfig=control_plane.kubeconfig,
        node=node,
        policies=POLICIES,
    ) as lockd:
        assert (await pacemaker_status(lockd))["crd"] == "installed"  # listed before lockd was ready

        async def ask(pod: dict[str, Any], **extra: str) -> int:
            meta = pod["metadata"]
            return (
                await lockd.get("/v1/lock", namespace=namespace, name=meta["name"], uid=meta["uid"], **extra)
            )[0]

        assert await ask(first) == 200
        waiting = asyncio.create_task(ask(second, wait="50"))

        async def queued() -> bool:
            return bool((await lockd.status())["waiting"] == 1)

        await eventually(queued, within=20, what="the second pod to wait")
        await kube_client.create(
            PACEMAKERCONFIGS, pacemaker_config("roomy", priority=10, throttle=concurrent(2))
        )
        # Answered by the new policy (the long poll would end with 423 at its wait).
        assert await waiting == 200
        shown = (await lockd.status())["policy"]
        assert (shown["name"], shown["source"]) == ("roomy", "PacemakerConfig/roomy")
