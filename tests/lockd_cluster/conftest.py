"""Fixtures: the sim API emulator and a cluster-mode lockd app, both real HTTP servers on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from lockd import daemon
from lockd.settings import Settings
from sim.emulator.server import ApiServer, ApiServerSettings
from sim.kubeclient import client_for_url
from stagger.contracts.podtoken import TOKEN_VOLUME
from stagger.kube import EVENTS, NODES, PODS, RestClient
from stagger.names import Names
from stagger.options import grouped
from tests.waiting import eventually

NAMES = Names()
NODE = "node-a"


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(ApiServerSettings(port=0)) as server:
        yield server


@pytest.fixture
async def kube(api: ApiServer) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield client_for_url(session=session, base_url=api.url)


async def make_node(
    kube: RestClient, name: str = NODE, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return await kube.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
    )


async def make_pod(
    kube: RestClient,
    name: str,
    *,
    node: str = NODE,
    namespace: str = "default",
    stagger: bool = True,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    token_volume: bool = False,
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod bound to `node`; with `token_volume`, the projected token volume admission injects (lockd then
    wants the pod's token with every ask and release in its name); `containers` instead of one plain one."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if stagger:
        metadata["labels"][NAMES.enable_label] = "1"
        metadata["labels"][NAMES.staggered_label] = "1"
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": f"uid-{owner[1]}",
                "controller": True,
            }
        ]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": containers or [{"name": "app", "image": "example/app:1"}]},
    }
    if token_volume:
        source = {"audience": "stagger", "expirationSeconds": 600, "path": "token"}
        pod["spec"]["volumes"] = [
            {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": source}]}}
        ]
    return await kube.create(PODS, pod, namespace=namespace)


async def pod_token(kube: RestClient, pod: dict[str, Any], *, audience: str = "stagger") -> str:
    """What the kubelet asks for a pod's projected token volume: a token of its service account, bound to
    the pod (TokenRequest, which the emulator answers as kube-apiserver does)."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [audience],
            "expirationSeconds": 600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
    answer = await kube.request("POST", path, body=body)
    return str(answer["status"]["token"])


async def patch_status(kube: RestClient, pod: dict[str, Any], *, status: dict[str, Any]) -> None:
    """Merge `status` into the pod's status (the status subresource), as its kubelet would."""
    await kube.patch(
        PODS,
        name=pod["metadata"]["name"],
        namespace=pod["metadata"]["namespace"],
        subresource="status",
        patch={"status": status},
    )


async def set_ready(
    kube: RestClient, pod: dict[str, Any], *, ready: bool = True, phase: str = "Running"
) -> None:
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    await patch_status(kube, pod, status=status)


async def pod_events(kube: RestClient, name: str) -> list[str]:
    listed = await kube.list(EVENTS, namespace="default", field_selector=f"involvedObject.name={name}")
    return [item["reason"] for item in listed["items"]]


@dataclass
class ClusterLockd:
    client: TestClient
    app: web.Application
    policy_path: Path

    async def status(self) -> dict[str, Any]:
        response = await self.client.get("/status")
        return await response.json()

    async def lock(
        self, pod: dict[str, Any], *, token: str | None = None, **extra: str
    ) -> aiohttp.ClientResponse:
        """`GET /v1/lock` in the pod's name, with its service-account `token` when given."""
        meta = pod["metadata"]
        query = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], **extra}
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.client.get("/v1/lock", params=query, headers=headers)

    async def wait_ready(self, within: float = 10.0) -> None:
        await eventually(lambda: self._ready(), within=within, what="lockd to become ready")

    async def _ready(self) -> bool:
        return (await self.client.get("/readyz")).status == 200


StartLockd = Callable[..., Awaitable[ClusterLockd]]


@pytest.fixture
def start_lockd(api: ApiServer, aiohttp_client, tmp_path: Path) -> StartLockd:
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    load = tmp_path / "load.json"
    load.write_text(json.dumps({"cpuPercent": 1.0, "ioPercent": 0.0}))

    async def start(policy_yaml: str, *, wait_ready: bool = True, **overrides: Any) -> ClusterLockd:
        policy_path = tmp_path / "policies.yaml"
        policy_path.write_text(policy_yaml)
        settings = grouped(
            Settings,
            {
                "standalone": False,
                "kubeconfig": kubeconfig,
                "node_name": NODE,
                "cores": 4,
                "load_file": load,
                "sample_interval": 0.05,
                "reload_interval": 0.1,
                "policies": policy_path,
                **overrides,
            },
        )
        app = daemon.make_app(settings)
        lockd = ClusterLockd(client=await aiohttp_client(app), app=app, policy_path=policy_path)
        if wait_ready:
            await lockd.wait_ready()
        return lockd

    return start
