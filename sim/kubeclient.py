"""What of the API client only the simulator and the tests use: a client for a plain URL (the API
emulator's, with no kubeconfig), and a pod's Binding, which kube-scheduler posts and nothing of stagger's
does (the simulated scheduler, `sim.cluster.kubernetes.scheduler`, is its one user)."""

from __future__ import annotations

from typing import Any

import aiohttp

from stagger.kube import PODS, ClusterConfig, RestClient

__all__ = ["bind_pod", "client_for_url"]


def client_for_url(
    *, session: aiohttp.ClientSession, base_url: str, request_timeout: float = 30.0
) -> RestClient:
    """A client of the API server at `base_url` with no credentials (the emulator asks for none)."""
    return RestClient(session=session, config=ClusterConfig(server=base_url), request_timeout=request_timeout)


async def bind_pod(client: RestClient, *, namespace: str, name: str, node: str) -> dict[str, Any]:
    """POST pods/NAME/binding: the pod to `node`, as kube-scheduler binds it."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return await client.request(
        "POST", PODS.path(namespace=namespace, name=name, subresource="binding"), body=binding
    )
