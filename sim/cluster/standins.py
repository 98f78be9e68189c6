"""Pods that stand in for the stagger processes the simulated cluster runs itself (lockd on each node, the
controller's replicas), labelled as the Helm chart labels its pods (charts/stagger/templates: the release's
`app.kubernetes.io/*` labels and `app.kubernetes.io/component: lockd | controller`), with the address each
process listens on as the pod's IP and its port as the container's named port.

So a tool that finds stagger through the API server alone, as `kubectl stagger status` does (by label,
then `GET pods/{scheme}:{name}:{port}/proxy/status`), finds these processes on a simulated cluster as it
finds the chart's pods on a real one. No kubelet runs them (`sim.cluster.objects.STANDIN_ANNOTATION`,
as a static pod's mirror pod), and nothing else counts them: they carry no enable label.
"""

from __future__ import annotations

from typing import Any

from sim.cluster.objects import STANDIN_ANNOTATION
from stagger.objects import Obj

__all__ = ["RELEASE", "controller_pod", "lockd_pod", "running_status"]

RELEASE = "stagger"
"""The release name in the stand-ins' `app.kubernetes.io/instance` label (the chart's default install)."""


def _labels(component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "stagger",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": component,
    }


def _pod(
    *,
    name: str,
    namespace: str,
    component: str,
    node: str,
    image: str,
    port: dict[str, Any],
    host_network: bool,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _labels(component),
            "annotations": {STANDIN_ANNOTATION: component},
        },
        "spec": {
            "nodeName": node,
            "hostNetwork": host_network,
            "containers": [{"name": component, "image": image, "ports": [port]}],
        },
    }


def lockd_pod(*, namespace: str, node: str, port: int, image: str) -> Obj:
    """lockd of `node`: listens on the node's address (the chart's hostPort; here the node's own address,
    as a hostNetwork pod), port `http`."""
    port_spec = {"name": "http", "containerPort": port, "hostPort": port, "protocol": "TCP"}
    return _pod(
        name=f"stagger-lockd-{node}",
        namespace=namespace,
        component="lockd",
        node=node,
        image=image,
        port=port_spec,
        host_network=True,
    )


def controller_pod(*, namespace: str, index: int, node: str, port: int, image: str) -> Obj:
    """The controller's replica `index`: TLS on `port` (named `https`, as in the chart)."""
    port_spec = {"name": "https", "containerPort": port, "protocol": "TCP"}
    return _pod(
        name=f"stagger-controller-{index}",
        namespace=namespace,
        component="controller",
        node=node,
        image=image,
        port=port_spec,
        host_network=False,
    )


def running_status(*, ip: str, host_ip: str, now: str) -> Obj:
    """The status a kubelet would write for the running, Ready process listening on `ip`."""
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "status": {
            "phase": "Running",
            "hostIP": host_ip,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "conditions": conditions,
        }
    }
