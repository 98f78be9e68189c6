"""The node half of a simulated kubelet: it registers its Node, renews the node's Lease in
``kube-node-lease`` and posts the node's status (Ready, with a fresh heartbeat), as a real kubelet does,
so that a real node lifecycle controller keeps the node Ready and untainted; on the way out it removes
the Lease and the Node. The pod half is ``sim.cluster.kubernetes.kubelet``.

Heartbeats are wall time (the node lifecycle controller compares them with its own clock), not the
simulated time of the start-up model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from sim.cluster.scenario import NodePool
from stagger.kube import LEASES, NODES, ApiError, Resource, RestClient
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)

KUBELET_VERSION = "v1.36.3-sim"
LEASE_NAMESPACE = "kube-node-lease"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""Put on every new Node by the API server's TaintNodesByCondition admission plugin; the node lifecycle
controller removes it once the node reports Ready."""


def pod_subnet(index: int) -> str:
    """The first three octets of simulated node `index`'s pod addresses: 198.18.128.0/17, a /24 a node (the
    test bed keeps to 198.18.0.0/15, RFC 2544's benchmarking range; real nodes' pods use 198.18.1-127.x,
    sim/realcluster/plan.py). Simulated pods never use their address on a network; past 128 nodes the
    subnets repeat."""
    return f"198.18.{128 + index % 128}"


def node_name(index: int) -> str:
    return f"sim-node-{index}"


def _cpu_quantity(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def node_manifests(*, index: int, pool: NodePool, ip: str, now: float | None = None) -> tuple[Obj, Obj]:
    """The Node to create and the status its kubelet reports (written through the status subresource);
    ``now`` (epoch seconds, default: now) stamps the conditions' heartbeat and transition times."""
    name = node_name(index)
    stamp = format_rfc3339(time.time() if now is None else now, digits=0)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **pool.labels,
    }
    node: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": f"{pod_subnet(index)}.0/24", "podCIDRs": [f"{pod_subnet(index)}.0/24"]},
    }
    if pool.taints:
        node["spec"]["taints"] = [dict(t) for t in pool.taints]
    resources = {"cpu": _cpu_quantity(pool.cores), "memory": pool.memory, "pods": str(pool.pods)}

    def cond(kind: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    status: Obj = {
        "capacity": dict(resources),
        "allocatable": dict(resources),
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "conditions": [
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "stagger sim",
            "kernelVersion": "sim",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "containerRuntimeVersion": "containerd://1.7.0-sim",
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
        },
    }
    return node, status


def heartbeat_status(status: Obj, *, now: float) -> Obj:
    """``status`` with every condition's heartbeat at ``now`` (transition times unchanged)."""
    stamp = format_rfc3339(now, digits=0)
    return {**status, "conditions": [{**c, "lastHeartbeatTime": stamp} for c in status["conditions"]]}


def lease_manifest(*, node: Obj, duration_seconds: int, now: float) -> Obj:
    """The node's Lease in kube-node-lease, owned by the Node (as a kubelet writes it)."""
    name = str(node["metadata"]["name"])
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            ],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": format_rfc3339(now, digits=6),
        },
    }


def is_schedulable(node: Obj) -> bool:
    """Ready as far as a scheduler is concerned: no not-ready taint (any more)."""
    taints = (node.get("spec") or {}).get("taints") or []
    return not any(t.get("key") == NOT_READY_TAINT for t in taints)


@dataclass(frozen=True)
class NodeAgentSettings:
    lease_duration_seconds: int = 40
    renew_seconds: float = 10.0
    """Wall seconds between Lease renewals (a kubelet's default: a quarter of the duration)."""
    status_seconds: float = 60.0
    """Wall seconds between node status posts when nothing changes (a kubelet's default is 5 min; the
    Lease is what tells the node lifecycle controller the node is alive)."""
    schedulable_timeout_seconds: float = 60.0


class NodeAgent:
    """One node's registration and heartbeats: ``await register()``, then ``await run()`` (until
    cancelled), and ``await unregister()`` at the end."""

    def __init__(
        self,
        *,
        client: RestClient,
        index: int,
        pool: NodePool,
        ip: str,
        settings: NodeAgentSettings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.name = node_name(index)
        self.settings = settings
        self._clock = clock
        self._node, self._status = node_manifests(index=index, pool=pool, ip=ip, now=clock())
        self._registered: Obj | None = None

    async def register(self) -> None:
        """Create the Node with its status (replacing a Node of the same name left by an earlier run),
        post the status (an API server may drop status on create) and take the Lease."""
        body = {**self._node, "status": self._status}
        try:
            created = await self.client.create(NODES, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            logger.info("%s: a Node of that name exists; replacing it", self.name)
            await self._delete(NODES, self.name)
            created = await self.client.create(NODES, body)
        self._registered = created
        await self.post_status()
        await self._delete(LEASES, self.name, namespace=LEASE_NAMESPACE)
        await self.client.create(
            LEASES,
            lease_manifest(
                node=created, duration_seconds=self.settings.lease_duration_seconds, now=self._clock()
            ),
            namespace=LEASE_NAMESPACE,
        )

    async def wait_schedulable(self) -> None:
        """Until the node has no not-ready taint (on a real control plane, the node lifecycle controller
        removes the one admission put on the new Node within seconds)."""
        deadline = time.monotonic() + self.settings.schedulable_timeout_seconds
        while True:
            node = await self.client.get(NODES, name=self.name)
            if is_schedulable(node):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: still tainted {NOT_READY_TAINT} after registration")
            await asyncio.sleep(0.2)

    async def post_status(self) -> None:
        await self.client.patch(
            NODES,
            name=self.name,
            subresource="status",
            patch={"status": heartbeat_status(self._status, now=self._clock())},
            patch_type="strategic",
        )

    async def renew(self) -> None:
        await self.client.patch(
            LEASES,
            name=self.name,
            namespace=LEASE_NAMESPACE,
            patch={"spec": {"renewTime": format_rfc3339(self._clock(), digits=6)}},
        )

    async def run(self) -> None:
        s = self.settings
        last_status = time.monotonic()
        while True:
            await asyncio.sleep(s.renew_seconds)
            try:
                await self.renew()
                if time.monotonic() - last_status >= s.status_seconds:
                    await self.post_status()
                    last_status = time.monotonic()
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                logger.warning("%s: heartbeat failed: %r", self.name, exc)

    async def unregister(self) -> None:
        """Remove the Lease and the Node (their pods, if any are left, are the control plane's to clean)."""
        await self._delete(LEASES, self.name, namespace=LEASE_NAMESPACE)
        await self._delete(NODES, self.name)

    async def _delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        try:
            await self.client.delete(resource, name=name, namespace=namespace)
        except ApiError as exc:
            if exc.status != 404:
                raise
