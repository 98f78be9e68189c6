"""The real cluster's addresses and names, as data: nothing here touches the host.

Every address is in 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking, so the test bed never uses
a private range (10/8, 172.16/12, 192.168/16) that the machine or its network may already use:

- 198.18.0.0/24: the link between the host and the nodes: the host's bridge is .1 (where the apiserver
  listens), node N is .(10+N).
- 198.18.N.0/24 for N ≥ 1: node N's pods, behind its CNI bridge (gateway 198.18.N.1).
- 198.19.0.0/16: Services; the `kubernetes` Service is .0.1, the cluster DNS .0.10.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from sim.controlplane.certs import kubernetes_service_ip

LINK_CIDR = "198.18.0.0/24"
POD_CIDR = "198.18.0.0/16"
SERVICE_CIDR = "198.19.0.0/16"
HOST_ADDRESS = "198.18.0.1"
CLUSTER_DOMAIN = "cluster.local"
MAX_NODES = 200
"""Node N's link address is 198.18.0.(10+N) and its pods' /24 is 198.18.N.0: both must fit."""

BRIDGE = "stgr0"
"""The host's bridge; its name also marks a real cluster as running (one at a time on a machine)."""


@dataclass(frozen=True)
class NodePlan:
    """One node: its name, network namespace, addresses and interface names."""

    index: int
    name: str
    netns: str
    address: str
    pod_cidr: str
    pod_gateway: str
    host_veth: str

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"


@dataclass(frozen=True)
class ClusterPlan:
    nodes: tuple[NodePlan, ...]
    host_address: str = HOST_ADDRESS
    link_prefix: int = 24
    pod_cidr: str = POD_CIDR
    service_cidr: str = SERVICE_CIDR
    cluster_domain: str = CLUSTER_DOMAIN

    @property
    def kubernetes_service_ip(self) -> str:
        return kubernetes_service_ip(self.service_cidr)

    @property
    def dns_service_ip(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr)[10])


def plan_cluster(nodes: int, *, name_prefix: str = "node") -> ClusterPlan:
    """The plan for `nodes` real nodes named `<name_prefix>-1` ... (ValueError outside 1..MAX_NODES)."""
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"--nodes must be between 1 and {MAX_NODES}, not {nodes}")
    link = ipaddress.ip_network(LINK_CIDR)
    plans = []
    for index in range(1, nodes + 1):
        pods = ipaddress.ip_network(f"198.18.{index}.0/24")
        plans.append(
            NodePlan(
                index=index,
                name=f"{name_prefix}-{index}",
                netns=f"stgr-{name_prefix}-{index}",
                address=str(link[10 + index]),
                pod_cidr=str(pods),
                pod_gateway=str(pods[1]),
                host_veth=f"stgr{index}",
            )
        )
    return ClusterPlan(nodes=tuple(plans))
