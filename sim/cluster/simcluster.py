"""The simulated cluster: nodes, a lockd process per node, scheduler, kubelets and controllers, all talking
to a Kubernetes API server (any: the emulator, or a real one) over HTTP.

Library: ``async with SimCluster(api_url=..., settings=ClusterSettings(...)) as cluster: ...``.
Command line: ``python -m sim cluster`` (``sim.cli.cluster``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from sim.cluster.clock import SimClock
from sim.cluster.controllers import ControllerManager, ControllerSettings
from sim.cluster.initproc import LaunchGate
from sim.cluster.kubelet import Kubelet, KubeletSettings
from sim.cluster.lockdproc import LockdProcess, LockdSpec, common_free_port
from sim.cluster.scenario import (
    NodePool,
    Scenario,
    StaggerConfig,
    workload_manifest,
)
from sim.cluster.scheduler import Scheduler, SchedulerSettings
from sim.cluster.startup import ModelSettings
from sim.kubeconfig import write_kubeconfig
from stagger.informer import InformerSettings
from stagger.kube import BY_KIND, NAMESPACES, NODES, ApiError, RestClient
from stagger.objects import Obj

logger = logging.getLogger(__name__)

KUBELET_VERSION = "v1.30.0-sim"


@dataclass(frozen=True)
class ClusterSettings:
    nodes: NodePool = field(default_factory=NodePool)
    time_scale: float = 10.0
    model: ModelSettings = field(default_factory=ModelSettings)
    stagger: StaggerConfig = field(default_factory=StaggerConfig)
    node_ip_prefix: str = "127.0.1."
    """Node i gets InternalIP ``<prefix><i+1>`` (Linux answers on all of 127/8)."""
    lockd_ready_timeout_seconds: float = 20.0
    lockd_stop_timeout_seconds: float = 5.0
    lockd_sample_interval: str = "200ms"
    lockd_log_level: str = "warning"
    request_timeout_seconds: float = 30.0
    kubelet_max_tick_seconds: float = 0.5
    launch_concurrency: int = field(default_factory=lambda: os.cpu_count() or 2)
    """Init client processes starting up at once on this machine (see ``sim.cluster.initproc.LaunchGate``)."""
    launch_hold_seconds: float = 0.25
    work_dir: Path | None = None
    """Load files, the policy file and lockd logs; a temporary directory (removed at the end) when None."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    controllers: ControllerSettings = field(default_factory=ControllerSettings)
    informer: InformerSettings = field(default_factory=InformerSettings)

    @classmethod
    def from_scenario(cls, scenario: Scenario, **overrides: Any) -> ClusterSettings:
        fields: dict[str, Any] = {
            "nodes": scenario.nodes,
            "time_scale": scenario.time_scale,
            "model": scenario.model,
            "stagger": scenario.stagger,
        }
        return cls(**{**fields, **overrides})


def node_name(index: int) -> str:
    return f"sim-node-{index}"


def _cpu_quantity(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def node_manifests(*, index: int, pool: NodePool, ip: str) -> tuple[Obj, Obj]:
    """The Node to create and the status its kubelet reports (written through the status subresource)."""
    name = node_name(index)
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
        "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
    }
    if pool.taints:
        node["spec"]["taints"] = [dict(t) for t in pool.taints]
    resources = {"cpu": _cpu_quantity(pool.cores), "memory": pool.memory, "pods": str(pool.pods)}

    def cond(kind: str, status: str, reason: str, message: str) -> Obj:
        return {"type": kind, "status": status, "reason": reason, "message": message}

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


class SimCluster:
    """Nodes with their kubelets (and lockd processes when stagger is on), a scheduler and controllers."""

    def __init__(self, *, api_url: str, settings: ClusterSettings) -> None:
        self.api_url = api_url
        self.settings = settings
        self.clock = SimClock(time_scale=settings.time_scale)
        self.kubelets: dict[str, Kubelet] = {}
        self.lockds: dict[str, LockdProcess] = {}
        self.host_port: int | None = None
        self.scheduler: Scheduler | None = None
        self.controllers: ControllerManager | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client: RestClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._work_dir: Path | None = None
        self._own_work_dir = False

    @property
    def client(self) -> RestClient:
        if self._client is None:
            raise RuntimeError("the cluster is not running")
        return self._client

    @property
    def work_dir(self) -> Path:
        if self._work_dir is None:
            raise RuntimeError("the cluster is not running")
        return self._work_dir

    def node_ip(self, index: int) -> str:
        return f"{self.settings.node_ip_prefix}{index + 1}"

    def peak_starting(self) -> dict[str, int]:
        return {name: k.peak_starting for name, k in self.kubelets.items()}

    async def __aenter__(self) -> SimCluster:
        try:
            await self._start()
        except BaseException:
            await self._stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()

    async def _start(self) -> None:
        s = self.settings
        if s.work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="sim-cluster-"))
            self._own_work_dir = True
        else:
            self._work_dir = s.work_dir
            self._work_dir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession()
        self._client = RestClient.for_url(
            session=self._session, base_url=self.api_url, request_timeout=s.request_timeout_seconds
        )
        ips = [self.node_ip(i) for i in range(s.nodes.count)]
        await asyncio.gather(*(self._register_node(i, ip) for i, ip in enumerate(ips)))
        if s.stagger.enabled:
            await self._start_lockds(ips)
        self.scheduler = Scheduler(client=self.client, clock=self.clock, settings=s.scheduler)
        self.controllers = ControllerManager(client=self.client, clock=self.clock, settings=s.controllers)
        gate = LaunchGate(concurrency=s.launch_concurrency, hold_seconds=s.launch_hold_seconds)
        for i, ip in enumerate(ips):
            name = node_name(i)
            lockd = self.lockds.get(name)
            self.kubelets[name] = Kubelet(
                settings=KubeletSettings(
                    node_name=name,
                    node_ip=ip,
                    pod_ip_prefix=f"10.244.{i}.",
                    cores=s.nodes.cores,
                    model=s.model,
                    lockd_url=lockd.spec.url if lockd is not None else None,
                    # Standalone lockd cannot see pods become Ready: the kubelet gives the slot back.
                    release_slots=s.stagger.lockd_mode == "standalone",
                    load_file=self.work_dir / f"{name}.load.json",
                    max_tick_seconds=s.kubelet_max_tick_seconds,
                    informer=s.informer,
                ),
                client=self.client,
                session=self._session,
                clock=self.clock,
                launch_gate=gate,
            )
        self._run(self.scheduler.run(), "scheduler")
        self._run(self.controllers.run(), "controllers")
        for name, kubelet in self.kubelets.items():
            self._run(kubelet.run(), f"kubelet-{name}")
        logger.info(
            "cluster up: %d nodes of %g cores, time scale %g, stagger %s",
            s.nodes.count,
            s.nodes.cores,
            s.time_scale,
            f"on (lockd on port {self.host_port})" if s.stagger.enabled else "off",
        )

    def _run(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(_report_crash)
        self._tasks.append(task)

    async def _register_node(self, index: int, ip: str) -> None:
        node, status = node_manifests(index=index, pool=self.settings.nodes, ip=ip)
        await self.client.create(NODES, node)
        await self.client.patch(NODES, name=node_name(index), subresource="status", patch={"status": status})

    async def _start_lockds(self, ips: Sequence[str]) -> None:
        s = self.settings
        self.host_port = s.stagger.host_port or common_free_port(ips)
        policies: Path | None = None
        if s.stagger.policies.strip():
            policies = self.work_dir / "policies.yaml"
            policies.write_text(s.stagger.policies)
        kubeconfig_path: Path | None = None
        if s.stagger.lockd_mode == "cluster":
            kubeconfig_path = self.work_dir / "lockd.kubeconfig"
            write_kubeconfig(kubeconfig_path, self.api_url, token="lockd")
        for i, ip in enumerate(ips):
            name = node_name(i)
            load_file = self.work_dir / f"{name}.load.json"
            load_file.write_text('{"cpuPercent": 0.0, "ioPercent": 0.0}')
            self.lockds[name] = LockdProcess(
                LockdSpec(
                    node_name=name,
                    host=ip,
                    port=self.host_port,
                    policies=policies,
                    load_file=load_file,
                    log_file=self.work_dir / f"{name}.lockd.log",
                    cores=max(1, round(s.nodes.cores)),
                    labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **s.nodes.labels},
                    kubeconfig=kubeconfig_path,
                    sample_interval=s.lockd_sample_interval,
                    log_level=s.lockd_log_level,
                )
            )
        await asyncio.gather(*(p.start() for p in self.lockds.values()))
        assert self._session is not None
        session = self._session
        await asyncio.gather(
            *(
                p.wait_ready(session=session, deadline=s.lockd_ready_timeout_seconds)
                for p in self.lockds.values()
            )
        )

    async def _stop(self) -> None:
        # Kubelets first: they stop their init clients while lockd still answers.
        kubelet_tasks = [t for t in self._tasks if t.get_name().startswith("kubelet-")]
        for task in kubelet_tasks:
            task.cancel()
        await asyncio.gather(*kubelet_tasks, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await asyncio.gather(
            *(p.stop(grace=self.settings.lockd_stop_timeout_seconds) for p in self.lockds.values()),
            return_exceptions=True,
        )
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._own_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    async def ensure_namespace(self, name: str) -> None:
        try:
            await self.client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except ApiError as exc:
            if exc.status != 409:
                raise

    async def apply(self, manifest: Mapping[str, Any]) -> Obj:
        """Create an object (its namespace first, if needed)."""
        resource = BY_KIND[str(manifest.get("kind"))]
        namespace = (
            str((manifest.get("metadata") or {}).get("namespace") or "default")
            if resource.namespaced
            else None
        )
        if namespace is not None:
            await self.ensure_namespace(namespace)
        return await self.client.create(resource, manifest, namespace=namespace)

    async def apply_workloads(self, scenario: Scenario) -> None:
        """Create the scenario's workloads; their pods use stagger when this cluster runs it."""
        stagger = replace(self.settings.stagger, host_port=self.host_port or self.settings.stagger.host_port)
        for workload in scenario.workloads:
            await self.apply(workload_manifest(workload, stagger=stagger))


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("%s stopped: %r", task.get_name(), task.exception(), exc_info=task.exception())
