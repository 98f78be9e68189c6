"""The API server a simulated cluster runs on, and everything that differs between the two kinds.

* ``emulator``: sim's own API server emulator (plain HTTP, no authentication). Nothing else runs there,
  so the simulated cluster brings its own scheduler, workload controllers and garbage collector.
* ``real``: a real kube-apiserver with the real kube-scheduler and kube-controller-manager
  (``sim.controlplane``, or any cluster a kubeconfig points to). Those do the scheduling and the
  workload controllers' work; the simulated cluster brings only the nodes: kubelets and lockd.

The kubelets, node agents, lockd processes and init clients talk HTTP to either in the same way; this
module is the one place where the kinds differ (who schedules, how to authenticate, when a new namespace
can take pods).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp

from sim.kubeconfig import write_kubeconfig
from stagger.kube import ApiError, ClusterConfig, Resource, RestClient, kubeconfig_config

BackendKind = Literal["emulator", "real"]
BACKEND_KINDS: tuple[BackendKind, ...] = ("emulator", "real")

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


@dataclass(frozen=True)
class ApiBackend:
    """Where the API server is (``url``), how to authenticate (``kubeconfig``; None: the emulator
    without authentication) and what it is (``kind``)."""

    url: str
    kind: BackendKind = "emulator"
    kubeconfig: Path | None = None

    @classmethod
    def real(cls, kubeconfig: Path) -> ApiBackend:
        """The cluster an (admin) kubeconfig points to."""
        return cls(url=kubeconfig_config(kubeconfig).server, kind="real", kubeconfig=kubeconfig)

    @property
    def runs_controllers(self) -> bool:
        """A real kube-scheduler and kube-controller-manager bind pods, run the Deployment, ReplicaSet,
        StatefulSet, Job and DaemonSet controllers and collect garbage: sim's own stand aside."""
        return self.kind == "real"

    @property
    def service_account_admission(self) -> bool:
        """Pods are refused in a namespace until its ``default`` ServiceAccount exists (the real
        controller-manager creates it a moment after the namespace)."""
        return self.kind == "real"

    def cluster_config(self) -> ClusterConfig:
        if self.kubeconfig is None:
            return ClusterConfig(server=self.url)
        return kubeconfig_config(self.kubeconfig)

    def client(self, session: aiohttp.ClientSession, *, request_timeout: float = 30.0) -> RestClient:
        return RestClient(session=session, config=self.cluster_config(), request_timeout=request_timeout)

    def lockd_kubeconfig(self, work_dir: Path) -> Path:
        """The kubeconfig lockd runs with in cluster mode: the backend's own (on a real control plane, the
        admin's: real node credentials and NodeRestriction are not needed for a test bed), or one written
        for the emulator."""
        if self.kubeconfig is not None:
            return self.kubeconfig
        path = work_dir / "lockd.kubeconfig"
        write_kubeconfig(path, self.url, token="lockd")
        return path


async def wait_namespace_ready(
    backend: ApiBackend, client: RestClient, namespace: str, *, within: float = 60.0
) -> None:
    """Returns once pods can be created in ``namespace`` (at once on the emulator)."""
    if not backend.service_account_admission:
        return
    deadline = time.monotonic() + within
    while True:
        try:
            await client.get(SERVICEACCOUNTS, name="default", namespace=namespace)
            return
        except ApiError as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in namespace {namespace} after {within:g}s")
        await asyncio.sleep(0.1)


async def read_metrics(backend: ApiBackend, session: aiohttp.ClientSession) -> str:
    """The API server's Prometheus metrics (``GET /metrics``; a real API server's only)."""
    config = backend.cluster_config()
    headers = {"Accept": "text/plain"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    async with session.get(
        f"{config.server.rstrip('/')}/metrics",
        headers=headers,
        ssl=config.ssl_context(),
        timeout=aiohttp.ClientTimeout(total=30),
    ) as resp:
        resp.raise_for_status()
        return await resp.text()


_REQUEST_TOTAL = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def requests_by_kind(metrics: str) -> dict[str, int]:
    """The requests a real API server has answered (``apiserver_request_total``) by "VERB resource[/sub]"
    (``PATCH pods``, ``POST events``, ``WATCH pods``), its codes and scopes summed."""
    kinds: dict[str, float] = {}
    for labels_text, value in _REQUEST_TOTAL.findall(metrics):
        labels = dict(_LABEL.findall(labels_text))
        resource, sub = labels.get("resource", ""), labels.get("subresource", "")
        # A non-resource request (/healthz) has its path as the subresource and no resource.
        name = f"{resource}/{sub}" if resource and sub else resource or sub or "-"
        kind = f"{labels.get('verb', '?')} {name}"
        kinds[kind] = kinds.get(kind, 0.0) + float(value)
    return {kind: int(total) for kind, total in kinds.items()}


def requests_served(metrics: str, *, verb: str | None = None, resource: str | None = None) -> int:
    """The requests a real API server has answered (``apiserver_request_total``), all or those of one
    verb (``PATCH``, ``LIST`` ...) and resource (``pods``, ``pods/status``, ...)."""
    total = 0.0
    for labels_text, value in _REQUEST_TOTAL.findall(metrics):
        labels = dict(_LABEL.findall(labels_text))
        if verb is not None and labels.get("verb") != verb.upper():
            continue
        if resource is not None:
            name, _, sub = resource.partition("/")
            if (labels.get("resource"), labels.get("subresource", "")) != (name, sub):
                continue
        total += float(value)
    return int(total)
