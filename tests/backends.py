"""The API server an end-to-end test runs on, chosen by `pytest --control-plane {emulator,real,both}`.

A test that takes the `backend` fixture (tests/conftest.py) runs once per chosen kind: on a fresh API
emulator of its own, or on the session's real control plane (etcd, kube-apiserver, kube-controller-
manager and kube-scheduler from `make control-plane`), in a namespace of its own either way. On the real
one, the namespace's workloads and pods are removed after the test (nodes are removed by the simulated
cluster itself when it stops), so that the next test's nodes, which have the same names, start empty.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from sim.cluster.backend import ApiBackend, BackendKind, read_metrics, requests_served, wait_namespace_ready
from stagger.kube import (
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    PDBS,
    PODS,
    REPLICASETS,
    ApiError,
    Resource,
    RestClient,
)

if TYPE_CHECKING:
    from sim.emulator.server import ApiServer

STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
WORKLOADS = (DEPLOYMENTS, STATEFULSETS, JOBS, DAEMONSETS, REPLICASETS, PDBS)
"""What a test may leave in its namespace on the real control plane, owners first."""


@dataclass
class Backend:
    """One test's API server: where and what it is (`api`: URL, kubeconfig, kind), the namespace the test
    works in, a client, and on the emulator the emulator itself (`emulator`, for its request counters)."""

    api: ApiBackend
    namespace: str
    client: RestClient
    session: aiohttp.ClientSession
    emulator: ApiServer | None = None

    @property
    def kind(self) -> BackendKind:
        return self.api.kind

    @property
    def real(self) -> bool:
        return self.api.kind == "real"

    async def requests(self, *, verb: str, resource: str) -> int:
        """Requests the API server has answered so far for one verb (`patch`, `create` ...) and resource
        (`pods`, `pods/status` ...): the emulator's counters, or a real API server's
        `apiserver_request_total` (all clients, every namespace: take differences)."""
        if self.emulator is not None:
            return self.emulator.request_counts.get((verb.lower(), resource), 0)
        return requests_served(await read_metrics(self.api, self.session), verb=verb, resource=resource)


@asynccontextmanager
async def open_backend(api: ApiBackend, *, emulator: ApiServer | None = None) -> AsyncIterator[Backend]:
    """A fresh namespace (`t-` and 8 hex digits) on `api`, ready for pods; cleaned up afterwards on a real
    control plane."""
    async with aiohttp.ClientSession() as session:
        client = api.client(session)
        namespace = f"t-{uuid.uuid4().hex[:8]}"
        await client.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await wait_namespace_ready(api, client, namespace)
        try:
            yield Backend(api=api, namespace=namespace, client=client, session=session, emulator=emulator)
        finally:
            if api.kind == "real":
                await clean_namespace(client, namespace)


async def clean_namespace(client: RestClient, namespace: str, *, within: float = 60.0) -> None:
    """Delete the namespace's workloads, then its pods for good (their nodes are gone: no kubelet would
    confirm a graceful deletion), wait until no pod is left, and delete the namespace (not waited for)."""
    background = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    for resource in WORKLOADS:
        await _ignore_missing(client.request("DELETE", resource.path(namespace=namespace), body=background))
    deadline = time.monotonic() + within
    while True:
        pods = (await client.list(PODS, namespace=namespace)).get("items") or []
        if not pods:
            break
        if time.monotonic() > deadline:
            names = sorted(p["metadata"]["name"] for p in pods)
            raise AssertionError(f"pods left in {namespace} after {within:g}s: {names}")
        for pod in pods:
            await _ignore_missing(_force_delete(client, pod))
        await asyncio.sleep(0.5)
    await _ignore_missing(client.delete(NAMESPACES, name=namespace))


async def _force_delete(client: RestClient, pod: dict[str, Any]) -> None:
    meta = pod["metadata"]
    if meta.get("finalizers"):
        # A Job's tracking finalizer: its controller lets go of pods whose Job is gone, in its own time;
        # a test bed need not wait for it.
        await client.patch(
            PODS, name=meta["name"], namespace=meta["namespace"], patch={"metadata": {"finalizers": None}}
        )
    await client.delete(PODS, name=meta["name"], namespace=meta["namespace"], grace_period_seconds=0)


async def _ignore_missing(call: Any) -> None:
    try:
        await call
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise
