"""The simulated cluster: nodes, a lockd process per node, scheduler, kubelets and controllers, all talking
to a Kubernetes API server over HTTP: the emulator, or a real control plane whose own scheduler and
controllers then do their part (``sim.cluster.backend`` says what differs).

Library: ``async with SimCluster(api=ApiBackend(url), settings=ClusterSettings(...)) as cluster: ...``.
Command line: ``python -m sim cluster`` (``sim.cli.cluster``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp

from sim.cluster import standins
from sim.cluster.backend import ApiBackend, wait_namespace_ready
from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.controllers import ControllerManager, ControllerSettings
from sim.cluster.kubernetes.kubelet import Kubelet
from sim.cluster.kubernetes.kubeletpool import KubeletPool, PoolSpec
from sim.cluster.kubernetes.kubeletstate import KubeletSettings, NodeStats
from sim.cluster.kubernetes.nodeagent import NodeAgent, NodeAgentSettings, node_name, pod_subnet
from sim.cluster.kubernetes.scheduler import Scheduler, SchedulerSettings
from sim.cluster.launchers.controllerproc import ControllerProcess, ControllerSpec
from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import LaunchGate, process_env
from sim.cluster.launchers.lockdproc import LockdProcess, LockdSpec, common_free_port
from sim.cluster.scenario import (
    STAGGER_IMAGE,
    NodePool,
    Scenario,
    StaggerConfig,
    workload_manifest,
)
from sim.cluster.startup import ModelSettings
from sim.kubeconfig import write_kubeconfig
from sim.running import report_crash
from stagger.informer import InformerSettings
from stagger.kube import BY_KIND, NAMESPACES, PODS, ApiError, Resource, RestClient
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)

MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)


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
    lockd_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """More environment variables for the lockd of a node, by node name (a chaos run's clock skew)."""
    controller_lease: tuple[float, float, float] = (15.0, 10.0, 2.0)
    """The controller replicas' Lease: duration, renew deadline, retry period (wall seconds)."""
    request_timeout_seconds: float = 30.0
    kubelet_max_tick_seconds: float = 0.5
    launch_concurrency: int = field(default_factory=lambda: os.cpu_count() or 2)
    """Init client processes starting up at once on this machine (see ``sim.cluster.launchers.initproc.LaunchGate``)."""
    launch_hold_seconds: float = 0.25
    http_connection_limit: int | None = None
    """Connections the simulator's HTTP session may open at once (every kubelet's pod watch holds one for
    good); None: 100 + 4 per node. aiohttp's default of 100 in all left 50 nodes' status writes queueing
    behind 50 watches until they timed out."""
    initclient_launch: Literal["exec", "fork"] = "exec"
    """How the kubelets start init client processes: ``exec`` (``python -m initclient``, each paying the
    interpreter's start-up and imports: about 0.25 CPU-seconds and 25-30 MB) or ``fork`` (from a fork
    server that imported the init client once, ``sim.cluster.launchers.forkserver``: milliseconds and about a MB;
    no launch gate then). The same init client code runs either way, each in a process of its own."""
    kubelet_processes: int = 0
    """Processes the kubelets run in, the nodes dealt among them (``sim.cluster.kubernetes.kubeletpool``);
    0: in this process, as objects a test can reach (``SimCluster.kubelets``). At 3,000 pods one event loop
    running 50 kubelets was what the herd waited for."""
    kubelet_pool_ready_seconds: float = 60.0
    work_dir: Path | None = None
    """Load files, the policy file and lockd logs; a temporary directory (removed at the end) when None."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    """sim's scheduler (on the emulator only)."""
    controllers: ControllerSettings = field(default_factory=ControllerSettings)
    """sim's workload controllers (on the emulator only)."""
    node_agent: NodeAgentSettings = field(default_factory=NodeAgentSettings)
    stagger_api_url: str | None = None
    """Where lockd and the controller reach the API server (the chaos fault proxy, `sim.chaos.proxy`,
    plain HTTP on loopback; it authenticates upstream); None: directly. The sim's own kubelets,
    scheduler and controllers always go directly."""
    informer: InformerSettings = field(default_factory=InformerSettings)
    standin_namespace: str | None = None
    """A namespace where each stagger process (lockd per node, each controller replica) gets a pod labelled
    as the chart's, with its address (`sim.cluster.standins`), so that `kubectl stagger status` finds them
    through the API server; None: no such pods."""

    @classmethod
    def from_scenario(cls, scenario: Scenario, **overrides: Any) -> ClusterSettings:
        fields: dict[str, Any] = {
            "nodes": scenario.nodes,
            "time_scale": scenario.time_scale,
            "model": scenario.model,
            "stagger": scenario.stagger,
        }
        return cls(**{**fields, **overrides})


def http_connections(settings: ClusterSettings, *, nodes: int) -> int:
    """The connection limit of an HTTP session serving `nodes` nodes' kubelets (`http_connection_limit`)."""
    return settings.http_connection_limit or 100 + 4 * nodes


class SimCluster:
    """Nodes with their kubelets (and lockd processes when stagger is on), and on the emulator a scheduler
    and the workload controllers."""

    def __init__(self, *, api: ApiBackend, settings: ClusterSettings) -> None:
        self.api = api
        self.settings = settings
        self.clock = SimClock(time_scale=settings.time_scale)
        self.kubelets: dict[str, Kubelet] = {}
        """The kubelets run in this process (none with ``kubelet_processes``)."""
        self.kubelet_pools: list[KubeletPool] = []
        self._pool_stats: dict[str, NodeStats] = {}
        self.node_agents: dict[str, NodeAgent] = {}
        self.lockds: dict[str, LockdProcess] = {}
        self.controller: ControllerProcess | None = None
        self.host_port: int | None = None
        self.scheduler: Scheduler | None = None
        self.controllers: ControllerManager | None = None
        self.fork_server: ForkServer | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client: RestClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._work_dir: Path | None = None
        self._own_work_dir = False
        self._standins: list[str] = []

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
        return {name: stats.peak_starting for name, stats in self.node_stats().items()}

    def node_stats(self) -> dict[str, NodeStats]:
        """Each node's kubelet's stats: live for the kubelets in this process, as of the last
        `refresh_node_stats` (or the pools' stop) for those in pool processes."""
        live = {name: k.stats() for name, k in self.kubelets.items()}
        return {**self._pool_stats, **live}

    async def refresh_node_stats(self) -> dict[str, NodeStats]:
        answers = await asyncio.gather(*(pool.stats() for pool in self.kubelet_pools))
        for answer in answers:
            self._pool_stats.update(answer)
        return self.node_stats()

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
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=http_connections(s, nodes=s.nodes.count))
        )
        self._client = self.api.client(self._session, request_timeout=s.request_timeout_seconds)
        ips = [self.node_ip(i) for i in range(s.nodes.count)]
        for i, ip in enumerate(ips):
            agent = NodeAgent(client=self.client, index=i, pool=s.nodes, ip=ip, settings=s.node_agent)
            self.node_agents[agent.name] = agent
        await asyncio.gather(*(agent.register() for agent in self.node_agents.values()))
        if s.stagger.enabled:
            await self._start_lockds(ips)
        if not self.api.runs_controllers:
            self.scheduler = Scheduler(client=self.client, clock=self.clock, settings=s.scheduler)
            self.controllers = ControllerManager(client=self.client, clock=self.clock, settings=s.controllers)
        gate: LaunchGate | None = None
        if s.initclient_launch == "fork" and s.stagger.enabled:
            self.fork_server = ForkServer(
                socket_path=self.work_dir / "initclient-forkserver.sock",
                env=process_env({}, hostname="forkserver"),
            )
            await self.fork_server.start()
        else:
            gate = LaunchGate(concurrency=s.launch_concurrency, hold_seconds=s.launch_hold_seconds)
        kubelets = [self._kubelet_settings(i, ip) for i, ip in enumerate(ips)]
        if s.kubelet_processes > 0:
            await self._start_pools(
                kubelets, gate_concurrency=max(1, s.launch_concurrency // s.kubelet_processes)
            )
        else:
            for settings in kubelets:
                self.kubelets[settings.node_name] = Kubelet(
                    settings=settings,
                    client=self.client,
                    session=self._session,
                    clock=self.clock,
                    launch_gate=gate,
                    fork_server=self.fork_server,
                )
        if self.scheduler is not None:
            self._run(self.scheduler.run(), "scheduler")
        if self.controllers is not None:
            self._run(self.controllers.run(), "controllers")
        for name, agent in self.node_agents.items():
            self._run(agent.run(), f"node-{name}")
        for name, kubelet in self.kubelets.items():
            self._run(kubelet.run(), f"kubelet-{name}")
        await asyncio.gather(*(agent.wait_schedulable() for agent in self.node_agents.values()))
        if s.standin_namespace is not None and s.stagger.enabled:
            await self._register_standins(s.standin_namespace)
        logger.info(
            "cluster up on the %s: %d nodes of %g cores, time scale %g, stagger %s",
            "real control plane" if self.api.kind == "real" else "API emulator",
            s.nodes.count,
            s.nodes.cores,
            s.time_scale,
            f"on (lockd on port {self.host_port})" if s.stagger.enabled else "off",
        )

    def _kubelet_settings(self, index: int, ip: str) -> KubeletSettings:
        s = self.settings
        name = node_name(index)
        lockd = self.lockds.get(name)
        return KubeletSettings(
            node_name=name,
            node_ip=ip,
            pod_ip_prefix=f"{pod_subnet(index)}.",
            cores=s.nodes.cores,
            model=s.model,
            lockd_url=lockd.spec.url if lockd is not None else None,
            # Standalone lockd cannot see pods become Ready: the kubelet gives the slot back.
            release_slots=s.stagger.lockd_mode == "standalone",
            load_file=self.work_dir / f"{name}.load.json",
            max_tick_seconds=s.kubelet_max_tick_seconds,
            informer=s.informer,
        )

    async def _start_pools(self, kubelets: Sequence[KubeletSettings], *, gate_concurrency: int) -> None:
        s = self.settings
        count = min(s.kubelet_processes, len(kubelets))
        for p in range(count):
            mine = tuple(kubelets[p::count])
            spec = PoolSpec(
                backend=self.api,
                kubelets=mine,
                time_scale=self.clock.time_scale,
                clock_start=self.clock.start,
                clock_base=self.clock.base,
                request_timeout_seconds=s.request_timeout_seconds,
                connection_limit=http_connections(s, nodes=len(mine)),
                fork_socket=None if self.fork_server is None else self.fork_server.socket_path,
                launch_concurrency=gate_concurrency,
                launch_hold_seconds=s.launch_hold_seconds,
                log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()),
            )
            pool = KubeletPool(spec=spec, spec_path=self.work_dir / f"kubelet-pool-{p}.spec")
            self.kubelet_pools.append(pool)
        await asyncio.gather(
            *(pool.start(ready_within=s.kubelet_pool_ready_seconds) for pool in self.kubelet_pools)
        )

    async def _stop_pools(self) -> None:
        if not self.kubelet_pools:
            return
        try:
            await asyncio.wait_for(self.refresh_node_stats(), timeout=30)
        except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
            logger.warning("the kubelet pools' last stats were not read: %r", exc)
        await asyncio.gather(*(pool.stop() for pool in self.kubelet_pools), return_exceptions=True)

    def _run(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(report_crash)
        self._tasks.append(task)

    async def _start_lockds(self, ips: Sequence[str]) -> None:
        s = self.settings
        self.host_port = s.stagger.host_port or common_free_port(ips)
        policies: Path | None = None
        if s.stagger.policies.strip():
            policies = self.work_dir / "policies.yaml"
            policies.write_text(s.stagger.policies)
        kubeconfig_path: Path | None = None
        if s.stagger.lockd_mode == "cluster":
            kubeconfig_path = self.api.lockd_kubeconfig(self.work_dir)
            if s.stagger_api_url is not None:
                kubeconfig_path = self.work_dir / "stagger-via-proxy.kubeconfig"
                write_kubeconfig(kubeconfig_path, s.stagger_api_url, token="lockd")
        extra: tuple[str, ...] = ()
        if s.stagger.controller and kubeconfig_path is not None and policies is not None:
            extra = tuple(await self._start_controller(kubeconfig=kubeconfig_path, policies=policies))
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
                    extra_args=extra,
                    env=s.lockd_env.get(name, {}),
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

    async def _start_controller(self, *, kubeconfig: Path, policies: Path) -> list[str]:
        """The real controller, registered as the cluster's mutating webhook; lockd's flags to reach it."""
        assert self.host_port is not None and self._client is not None
        controller = ControllerProcess(
            ControllerSpec(
                work_dir=self.work_dir,
                kubeconfig=kubeconfig,
                policies=policies,
                lockd_port=self.host_port,
                image=STAGGER_IMAGE,
                log_level=self.settings.lockd_log_level,
                replicas=self.settings.stagger.controller_replicas,
                lease_duration=self.settings.controller_lease[0],
                renew_deadline=self.settings.controller_lease[1],
                retry_period=self.settings.controller_lease[2],
            )
        )
        self.controller = controller
        await controller.start(client=self._client)
        await self._client.create(MUTATING_WEBHOOKS, controller.webhook_configuration())
        logger.info(
            "controller on %s, registered as the mutating webhook for enabled pods and Jobs", controller.url
        )
        return controller.lockd_args()

    async def _register_standins(self, namespace: str) -> None:
        """A pod for each stagger process, Ready at its address (see `sim.cluster.standins`)."""
        assert self.host_port is not None
        await self.ensure_namespace(namespace)
        now = format_rfc3339(time.time(), digits=0)
        pods: list[tuple[Obj, str, str]] = []
        for i, (name, lockd) in enumerate(self.lockds.items()):
            manifest = standins.lockd_pod(
                namespace=namespace, node=name, port=self.host_port, image=STAGGER_IMAGE
            )
            pods.append((manifest, lockd.spec.host, self.node_ip(i)))
        if self.controller is not None:
            for i, replica in enumerate(self.controller.replicas):
                manifest = standins.controller_pod(
                    namespace=namespace, index=i, node=node_name(0), port=replica.port, image=STAGGER_IMAGE
                )
                pods.append((manifest, self.controller.spec.host, self.node_ip(0)))
        for manifest, ip, host_ip in pods:
            created = await self.client.create(PODS, manifest, namespace=namespace)
            await self.client.patch(
                PODS,
                name=created["metadata"]["name"],
                namespace=namespace,
                subresource="status",
                patch=standins.running_status(ip=ip, host_ip=host_ip, now=now),
            )
            self._standins.append(created["metadata"]["name"])

    async def _remove_standins(self) -> None:
        namespace = self.settings.standin_namespace
        for name in self._standins:
            try:
                await self.client.delete(PODS, name=name, namespace=namespace, grace_period_seconds=0)
            except (ApiError, aiohttp.ClientError) as exc:
                logger.warning("stand-in pod %s/%s not deleted: %s", namespace, name, exc)
        self._standins.clear()

    async def _stop(self) -> None:
        # Kubelets first: they stop their init clients while lockd still answers.
        kubelet_tasks = [t for t in self._tasks if t.get_name().startswith("kubelet-")]
        for task in kubelet_tasks:
            task.cancel()
        await asyncio.gather(*kubelet_tasks, return_exceptions=True)
        await self._stop_pools()
        if self.fork_server is not None:
            await self.fork_server.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await asyncio.gather(
            *(p.stop(grace=self.settings.lockd_stop_timeout_seconds) for p in self.lockds.values()),
            return_exceptions=True,
        )
        if self.controller is not None:
            await self.controller.stop()
            if self._client is not None:
                # On a shared API server (a real control plane), the next cluster's pods must not be sent to
                # a controller that is gone.
                try:
                    await self._client.delete(MUTATING_WEBHOOKS, name=self.controller.webhook_name)
                except (ApiError, aiohttp.ClientError) as exc:
                    logger.warning("the controller's MutatingWebhookConfiguration was not deleted: %s", exc)
        if self._client is not None:
            await self._remove_standins()
            results = await asyncio.gather(
                *(agent.unregister() for agent in self.node_agents.values()), return_exceptions=True
            )
            for name, result in zip(self.node_agents, results, strict=True):
                if isinstance(result, BaseException):
                    logger.warning("%s: not unregistered: %r", name, result)
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._own_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    async def ensure_namespace(self, name: str) -> None:
        """Create the namespace if it is missing; returns once it takes pods."""
        try:
            await self.client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
        await wait_namespace_ready(self.api, self.client, name)

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
