"""The chart's wiring, end to end: `helm install` into a real control plane, then the real lockd and
controller run with exactly the command, args and env of the installed DaemonSet and Deployment (their
mounted ConfigMaps and Secrets written to temporary files; tests/install/podprocess.py says what else is
mapped and why), on a simulated node. A pod labelled as NOTES.txt says is sent by the installed webhook
configuration (through its Service, TLS checked against the chart's generated CA) to the controller, gets
the init client, is granted its slot by lockd (which records it on the pod with its own ServiceAccount's
rights) and becomes Ready. A typo in a flag or an env name in the chart, a wrong mount path, a missing RBAC
rule or a certificate that does not cover the Service fails this test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sim.cluster.backend import ApiBackend, wait_namespace_ready
from sim.cluster.launchers.lockdproc import common_free_port
from sim.cluster.scenario import StaggerConfig
from sim.cluster.simcluster import SimCluster
from sim.controlplane.launcher import APISERVER, ControlPlane
from sim.controlplane.serviceproxy import ServiceProxy
from stagger.kube import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS, Resource, RestClient
from tests.cluster.helpers import cluster_settings, list_items
from tests.install.podprocess import PodProcess, service_account_token
from tests.tools import ROOT, tool
from tests.waiting import eventually

SERVICES = Resource("", "v1", "services", "Service")
CHART = ROOT / "charts" / "stagger"
RELEASE, NAMESPACE, PREFIX = "demo", "stagger", "v1.stagger.technicianted"
FULLNAME = f"{RELEASE}-stagger"
# Node throttles without the CPU one: this machine's own load must not decide when the test's pods start.
POLICIES = {"nodePolicies": [{"name": "default", "throttleConfig": {"maxConcurrent": {"value": 2}}}]}


def helm(kubeconfig: Path, *args: str) -> str:
    done = subprocess.run(
        [str(tool("helm")), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextlib.asynccontextmanager
async def control_plane_with_services(work: Path) -> AsyncIterator[tuple[ControlPlane, ServiceProxy]]:
    """A fresh real control plane whose apiserver reaches Services through a proxy the test routes."""
    async with ServiceProxy(socket_path=work / "services.sock") as proxy:
        egress = proxy.egress_config(work / "egress.yaml")
        extra = {APISERVER: [f"--egress-selector-config-file={egress}"]}
        async with ControlPlane(data_dir=work / "controlplane", extra_args=extra) as plane:
            yield plane, proxy


async def pods_of(client: RestClient, component: str, count: int) -> list[dict[str, Any]]:
    """The installed component's pods, once its controller (DaemonSet, ReplicaSet) made `count`."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    found: list[dict[str, Any]] = []

    async def made() -> bool:
        nonlocal found
        found = [
            p
            for p in await list_items(client, PODS, namespace=NAMESPACE, label_selector=selector)
            if p["spec"].get("nodeName")
        ]
        return len(found) == count

    await eventually(made, within=60, what=f"{count} scheduled {component} pod(s)", poll=0.2)
    return sorted(found, key=lambda p: p["metadata"]["name"])


async def answers(
    session: aiohttp.ClientSession, url: str, *, ssl_context: ssl.SSLContext | bool = True
) -> bool:
    try:
        async with session.get(url, ssl=ssl_context, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def workload(namespace: str) -> dict[str, Any]:
    """A Deployment opted in as NOTES.txt says: the enable label on its pod template."""
    labels = {"app": "web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, f"{PREFIX}/enable": "1"}},
                "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
            },
        },
    }


@pytest.mark.usefixtures("control_plane_binaries")
async def test_a_pod_labelled_as_the_notes_say_is_admitted_granted_and_started(tmp_path: Path) -> None:
    async with control_plane_with_services(tmp_path) as (plane, proxy):
        settings = cluster_settings(nodes=1, stagger=StaggerConfig(enabled=False), work_dir=tmp_path / "sim")
        node_ip = settings.node_ip_prefix + "1"
        lockd_port = common_free_port([node_ip])
        values = tmp_path / "values.json"
        values.write_text(json.dumps({"lockd": {"port": lockd_port}, "policies": POLICIES}))
        notes = await asyncio.to_thread(
            helm,
            plane.kubeconfig,
            "install",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "-f",
            str(values),
        )
        assert f"{PREFIX}/enable" in notes
        async with SimCluster(api=ApiBackend.real(plane.kubeconfig), settings=settings) as cluster:
            client = cluster.client
            [lockd_pod] = await pods_of(client, "lockd", 1)
            controller_pods = await pods_of(client, "controller", 2)
            # Each container as its kubelet would run it; lockd first (`_serve` relies on the order).
            containers = [("lockd", lockd_pod)] + [("controller", pod) for pod in controller_pods]
            processes = [
                PodProcess(
                    pod=pod,
                    container=container,
                    node_name=pod["spec"]["nodeName"],
                    node_ip=node_ip,
                    work_dir=tmp_path / "pods",
                )
                for container, pod in containers
            ]
            ca_file = plane.pki.ca.cert
            try:
                for process in processes:
                    token = await service_account_token(client, process.pod)
                    await process.prepare(client=client, server=plane.server, ca_file=ca_file, token=token)
                    await process.start(tmp_path / f"{process.name}.log")
                await _serve(cluster, proxy, processes, lockd_port=lockd_port, node_ip=node_ip, logs=tmp_path)
            finally:
                await asyncio.gather(*(p.stop() for p in processes))


async def _serve(
    cluster: SimCluster,
    proxy: ServiceProxy,
    processes: list[PodProcess],
    *,
    lockd_port: int,
    node_ip: str,
    logs: Path,
) -> None:
    client = cluster.client
    controllers = processes[1:]  # processes[0] is lockd
    # kube-proxy's part: the Service's port 443 → targetPort `https` of each ready replica.
    service = await client.get(SERVICES, name=f"{FULLNAME}-controller", namespace=NAMESPACE)
    [port] = service["spec"]["ports"]
    assert port["targetPort"] == "https"
    proxy.route((service["spec"]["clusterIP"], port["port"]), [c.port("https") for c in controllers])
    async with aiohttp.ClientSession() as session:

        def log_tails() -> str:
            return "\n".join(
                f"--- {p.name}\n{(logs / f'{p.name}.log').read_text()[-3000:]}" for p in processes
            )

        async def all_ready() -> bool:
            for p in processes:
                assert p.process is not None and p.process.returncode is None, log_tails()
            urls = [f"http://{node_ip}:{lockd_port}/readyz"]
            urls += [f"http://{host}:{port}/readyz" for host, port in (c.port("probes") for c in controllers)]
            return all(await asyncio.gather(*(answers(session, url) for url in urls)))

        await eventually(all_ready, within=60, what="lockd and both controller replicas ready", poll=0.2)

        async def a_leader() -> bool:
            pods = await list_items(client, PODS, namespace=NAMESPACE, label_selector=f"{PREFIX}/leader=1")
            return len(pods) == 1

        await eventually(
            a_leader, within=60, what="a controller replica to lead (and label its pod)", poll=0.2
        )

        namespace = "team-a"
        await client.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await wait_namespace_ready(cluster.api, client, namespace)
        await client.create(DEPLOYMENTS, workload(namespace), namespace=namespace)

        pods: list[dict[str, Any]] = []

        async def started() -> bool:
            nonlocal pods
            pods = await list_items(client, PODS, namespace=namespace)
            ready = [
                p
                for p in pods
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions", [])
                )
            ]
            return len(pods) == 3 and len(ready) == 3

        await eventually(started, within=120, what="the opted-in pods Ready", poll=0.5)
        for pod in pods:
            [init, *_] = pod["spec"]["initContainers"]
            assert init["name"] == "stagger-wait", pod["spec"]["initContainers"]
            assert f"{PREFIX}/granted-at" in pod["metadata"].get("annotations", {}), pod["metadata"]
        assert any(target[1] == 443 for target in proxy.connections)
        # What NOTES.txt tells people to curl: the node's /status, with the policy from the chart's value.
        async with session.get(f"http://{node_ip}:{lockd_port}/status") as resp:
            status = await resp.json()
        assert status["node"] in cluster.kubelets
        assert status["policy"]["maxConcurrent"] == 2
        assert status["counters"]["granted"] == 3, status["counters"]
        # The controller's /status over TLS, verified as the API server verifies it: the chart's CA, the
        # Service's name.
        ca = await client.get(CONFIGMAPS, name=f"{FULLNAME}-controller-ca", namespace=NAMESPACE)
        context = ssl.create_default_context(cadata=ca["data"]["ca.crt"])
        host, https_port = controllers[0].port("https")
        async with session.get(
            f"https://{host}:{https_port}/status",
            ssl=context,
            server_hostname=f"{FULLNAME}-controller.{NAMESPACE}.svc",
        ) as resp:
            assert resp.status == 200, await resp.text()
        # Nothing went wrong on the way, not even what the processes survive (a 403 from a missing RBAC
        # rule is logged as a warning and the Event or patch is skipped).
        for process in processes:
            log = (logs / f"{process.name}.log").read_text()
            assert not re.search(r" (WARNING|ERROR|CRITICAL) ", log), log
