"""The whole real cluster: host network, control plane, nodes, DNS, images; and its teardown.

    with RealCluster(nodes=2, data_dir=tmp, images=["localhost/stagger:dev"]) as cluster:
        ...  # cluster.kubeconfig: the admin's; cluster.nodes: the Node objects (their daemons)

Order of start (each step's undo recorded before it is made, `sim.realcluster.host`): the host's settings
saved, the bridge and every node's network namespace (all before any containerd starts: `ip netns add`
after containerd made pod namespaces bind-mounts /run/netns over itself), the control plane on the bridge's
address, the nodes' cgroups, then per node containerd, the images, kubelet and kube-proxy; then CoreDNS,
and the start returns once every node is Ready and the DNS answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

from sim.controlplane.launcher import DEFAULT_BIN_DIR, KUBE_BUILD, ControlPlane, missing_binaries
from sim.realcluster import addons
from sim.realcluster.host import (
    KUBELET_SYSCTLS,
    OUTSIDE_PATHS,
    HostChanges,
    in_netns,
    kill_cgroup,
    mounts_under,
    own_cgroup_base,
    run,
)
from sim.realcluster.node import Node, NodeTools
from sim.realcluster.plan import BRIDGE, ClusterPlan, plan_cluster

logger = logging.getLogger(__name__)

NODE_TOOLS_DIR = KUBE_BUILD.tools / "nodes"
"""kubelet, kube-proxy and the rest, of the minor the control plane is (`make node-tools [KUBE_VERSION=1.N]`)."""
TESTBED_IMAGES = ("pause", "coredns", "workload", "startup-lock-init")
"""Images `make node-tools` builds as archives in .tools/nodes/images/NAME.tar, loaded into every node."""
WORKLOAD_IMAGE = "localhost/stagger-testbed/workload:1"
UNIX_PATH_MAX = 107
"""The longest path a Unix socket may have (108 bytes with the final NUL)."""
KUBELET_SOCKET_TAIL = len("/pod-resources/1234567890")
"""What kubelet adds to its root-dir for its longest socket."""


class RealClusterError(Exception):
    """The real cluster could not start (or a part of it stopped): the message says which and why."""


def image_archive(image: str, work: Path) -> Path:
    """An archive of `image` to import: the path itself when it is a file (an OCI or docker archive),
    else the local image of that name pushed by buildah (as `make image` leaves it)."""
    if Path(image).is_file():
        return Path(image)
    if shutil.which("buildah") is None:
        raise RealClusterError(f"--load-image {image}: not a file, and no buildah to read a local image with")
    archive = work / (image.replace("/", "_").replace(":", "_") + ".tar")
    work.mkdir(parents=True, exist_ok=True)
    archive.unlink(missing_ok=True)
    done = subprocess.run(
        ["buildah", "push", "--quiet", image, f"docker-archive:{archive}:{image}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RealClusterError(f"--load-image {image}: `buildah push` failed: {done.stderr.strip()}")
    return archive


def node_tools(node_tools_dir: Path) -> NodeTools:
    return NodeTools(
        kubelet=node_tools_dir / "kubelet",
        kube_proxy=node_tools_dir / "kube-proxy",
        crictl=node_tools_dir / "crictl",
        containerd=node_tools_dir / "containerd",
        containerd_shim=node_tools_dir / "containerd-shim-runc-v2",
        ctr=node_tools_dir / "ctr",
    )


def preflight(node_tools_dir: Path = NODE_TOOLS_DIR, bin_dir: Path = DEFAULT_BIN_DIR) -> None:
    """Fails with what is missing or in the way, before anything is changed."""
    tools = node_tools(node_tools_dir)
    missing = [str(bin_dir / name) for name in missing_binaries(bin_dir)]
    missing += tools.missing()
    archives = [node_tools_dir / "images" / f"{name}.tar" for name in TESTBED_IMAGES]
    missing += [str(path) for path in archives if not path.is_file()]
    if missing:
        raise RealClusterError(f"missing: {', '.join(missing)}; run `make control-plane node-tools` first")
    if Path("/sys/class/net", BRIDGE).exists():
        raise RealClusterError(
            f"a real cluster is running already (the bridge {BRIDGE} exists): stop it, or clean up after a "
            "crashed one with `python -m sim realcluster --clean DATA_DIR`"
        )
    if not Path("/sys/fs/cgroup/cpu").is_dir():
        raise RealClusterError(
            "no cgroup v1 hierarchies under /sys/fs/cgroup: the test bed's kubelet needs them"
        )


class RealCluster:
    """A real control plane and `nodes` real nodes on this machine (root only). See the module doc."""

    def __init__(
        self,
        *,
        nodes: int,
        data_dir: Path | str | None = None,
        kubeconfig: Path | str | None = None,
        images: Sequence[str] = (),
        bin_dir: Path = DEFAULT_BIN_DIR,
        node_tools_dir: Path = NODE_TOOLS_DIR,
        ready_timeout: float = 120.0,
    ) -> None:
        self.plan: ClusterPlan = plan_cluster(nodes)
        self._own_data_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="realcluster-"))
        )
        self.images = list(images)
        self.node_tools_dir = node_tools_dir
        self.tools = node_tools(node_tools_dir)
        self.ready_timeout = ready_timeout
        self.control_plane = ControlPlane(
            kubeconfig=kubeconfig,
            data_dir=self.data_dir / "controlplane",
            bin_dir=bin_dir,
            address=self.plan.host_address,
            service_cidr=self.plan.service_cidr,
            # Webhooks and aggregated APIs named by a Service are called at a ready endpoint's pod address
            # (routed to its node), not at the ClusterIP, which only the nodes' kube-proxy knows.
            extra_args={"kube-apiserver": ["--enable-aggregator-routing=true"]},
        )
        self.kubeconfig = self.control_plane.kubeconfig
        self.cgroup = f"{own_cgroup_base().rstrip('/')}/stagger-realcluster"
        self.nodes: list[Node] = []
        self.changes = HostChanges.open(self.data_dir)
        self.startup_seconds = 0.0

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start_async(self) -> RealCluster:
        preflight(self.node_tools_dir, self.control_plane.bin_dir)
        if self.changes.steps:
            raise RealClusterError(
                f"{self.data_dir} holds the record of a run whose changes to the host were not undone: "
                f"`python -m sim realcluster --clean {self.data_dir}` first"
            )
        longest = max(len(str(self.data_dir / "nodes" / n.name / "kubelet")) for n in self.plan.nodes)
        if longest + KUBELET_SOCKET_TAIL > UNIX_PATH_MAX:
            raise RealClusterError(
                f"--data-dir {self.data_dir} is too long by {longest + KUBELET_SOCKET_TAIL - UNIX_PATH_MAX} "
                f"characters: kubelet's sockets under it would pass the {UNIX_PATH_MAX}-byte limit of a Unix "
                "socket's path; give a shorter one"
            )
        began = time.monotonic()
        # A new cluster each time: what an earlier run left in the data dir (etcd's data, the nodes' state)
        # would bring its objects back.
        for leftover in ("controlplane", "nodes", "images", "host-changes.tmp"):
            shutil.rmtree(self.data_dir / leftover, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.changes.save_sysctls((*KUBELET_SYSCTLS, "net.ipv4.ip_forward"))
            self.changes.watch_paths(OUTSIDE_PATHS)
            self._make_network()
            await self.control_plane.start_async()
            self.changes.add_cgroup(self.cgroup)
            self.changes.unmount_at_end(self.data_dir)
            await asyncio.to_thread(self._start_nodes)
            await self._wait_nodes_ready()
            await asyncio.to_thread(self._install_dns)
            await self._wait_deployment_available("kube-system", "coredns")
        except BaseException:
            await asyncio.to_thread(self.stop, keep_data=True)
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def start(self) -> RealCluster:
        return asyncio.run(self.start_async())

    def stop(self, *, keep_data: bool = False) -> list[str]:
        """Stops everything and undoes every change to the host; returns what could not be undone. The
        data dir (logs) is removed if it was a temporary one and nothing went wrong."""
        self._kill_nodes()
        self.control_plane.stop(remove_data=False)
        problems = self.changes.undo()
        if self._own_data_dir and not keep_data and not problems:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return problems

    async def cold_restart(self, *, down_seconds: float = 2.0) -> None:
        """The whole cluster off and on again, as after a power cut: every process killed (control plane,
        kubelets, kube-proxies, containerd, every container), the mounts and the runtime's state gone (tmpfs
        on a real machine), etcd's data, the images and kubelet's root-dir kept. The nodes come back first
        and their kubelets wait for the API server, which comes back on the same address and port; returns
        once every node is Ready again (the pods are the caller's to wait for)."""
        self._kill_nodes()
        self.control_plane.stop(remove_data=False)
        for point in mounts_under(self.data_dir):
            run("umount", "-l", point, check=False)
        for node in self.nodes:
            node.forget_runtime_state()
        await asyncio.sleep(down_seconds)
        for node in self.nodes:
            await asyncio.to_thread(node.start_runtime)
            await asyncio.to_thread(node.start_kubelet)
            await asyncio.to_thread(node.start_kube_proxy)
        old = self.control_plane
        self.control_plane = ControlPlane(
            kubeconfig=old.kubeconfig,
            data_dir=old.data_dir,
            bin_dir=old.bin_dir,
            port=old.ports.apiserver,
            address=old.address,
            service_cidr=old.service_cidr,
            extra_args=old.extra_args,
        )
        await self.control_plane.start_async()
        await self._wait_nodes_ready()

    def _kill_nodes(self) -> None:
        for node in self.nodes:
            for name in ("kube-proxy", "kubelet"):
                node.stop_daemon(name)
        # The containers and containerd's shims, then containerd: a shim killed first would leave its
        # containers to containerd's clean-up, which has nothing left to do then.
        with contextlib.suppress(Exception):
            kill_cgroup(f"{self.cgroup}/")
        for node in self.nodes:
            node.stop()

    async def __aenter__(self) -> RealCluster:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> RealCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def check(self) -> None:
        """Raises if a daemon of the control plane or of a node has exited."""
        self.control_plane.check()
        for node in self.nodes:
            node.check()

    # --- the network ---------------------------------------------------------------------------------

    def _make_network(self) -> None:
        plan = self.plan
        self.changes.add_link(BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{plan.host_address}/{plan.link_prefix}", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        for node in plan.nodes:
            self.changes.add_netns(node.netns)
            self.changes.add_link(node.host_veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
            run("ip", "link", "set", node.host_veth, "master", BRIDGE, "up")
            inside = in_netns(node.netns)
            run(*inside, "ip", "link", "set", "lo", "up")
            run(*inside, "ip", "addr", "add", f"{node.address}/{plan.link_prefix}", "dev", "eth0")
            run(*inside, "ip", "link", "set", "eth0", "up")
            run(*inside, "ip", "route", "add", "default", "via", plan.host_address)
            # The node forwards to and from its pods; per network namespace, gone with it.
            run(*inside, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
            for other in plan.nodes:
                if other is not node:
                    run(*inside, "ip", "route", "add", other.pod_cidr, "via", other.address)
            # The host (the apiserver calling webhooks and the pod proxy) reaches each node's pods directly.
            run("ip", "route", "add", node.pod_cidr, "via", node.address, "dev", BRIDGE)

    # --- nodes ---------------------------------------------------------------------------------------

    def _start_nodes(self) -> None:
        archives = [self.node_tools_dir / "images" / f"{name}.tar" for name in TESTBED_IMAGES]
        archives += [image_archive(image, self.data_dir / "images") for image in self.images]
        for plan in self.plan.nodes:
            cgroup = f"{self.cgroup}/{plan.name}"
            self.changes.add_cgroup(f"{cgroup}/daemons")
            self.changes.add_cgroup(f"{cgroup}/pods")
            self.nodes.append(
                Node(
                    plan=plan,
                    cluster=self.plan,
                    root=self.data_dir / "nodes" / plan.name,
                    pki=self.control_plane.pki,
                    server=self.control_plane.server,
                    cgroup=cgroup,
                    tools=self.tools,
                )
            )

        def bring_up(node: Node) -> None:
            node.start_runtime()
            for archive in archives:
                node.load_image(archive)
            node.start_kubelet()
            node.start_kube_proxy()

        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for future in [pool.submit(bring_up, node) for node in self.nodes]:
                future.result()

    # --- the API -------------------------------------------------------------------------------------

    def _ssl(self) -> ssl.SSLContext:
        return self.control_plane.admin_ssl()

    def api_stream(self, path: str, *, timeout: float = 30) -> Any:
        """A streaming GET as the admin (a watch): the response, to iterate line by line and close."""
        request = urllib.request.Request(self.control_plane.server + path)
        return urllib.request.urlopen(request, timeout=timeout, context=self._ssl())

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        """One request to the apiserver as the admin: (status, decoded JSON body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.control_plane.server + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._ssl()) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            with contextlib.closing(err):
                raw = err.read()
            try:
                return err.code, json.loads(raw or b"{}")
            except ValueError:
                return err.code, {"message": raw.decode(errors="replace")}

    async def _wait(self, what: str, done: Callable[[], tuple[bool, str]]) -> None:
        """Polls `done` (in a thread) until it says so, for at most ready_timeout; fails at once when a
        daemon exits."""
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while True:
            self.check()
            ok, last = await asyncio.to_thread(done)
            if ok:
                return
            if time.monotonic() > deadline:
                raise RealClusterError(f"{what} not within {self.ready_timeout:g}s: {last}")
            await asyncio.sleep(0.25)

    async def _wait_nodes_ready(self) -> None:
        names = {node.plan.name for node in self.nodes}

        def ready() -> tuple[bool, str]:
            status, body = self.api("GET", "/api/v1/nodes")
            if status != 200:
                return False, f"GET nodes: {status}"
            seen = {
                item["metadata"]["name"]: any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in item.get("status", {}).get("conditions", [])
                )
                for item in body.get("items", [])
            }
            waiting = sorted(name for name in names if not seen.get(name))
            return not waiting, f"not Ready: {', '.join(waiting)}"

        await self._wait("every node Ready", ready)

    def _install_dns(self) -> None:
        for path, obj in addons.coredns_objects(self.plan):
            status, body = self.api("POST", path, obj)
            if status not in (200, 201, 409):
                raise RealClusterError(
                    f"creating {obj['kind']} {obj['metadata']['name']}: {status} {body.get('message')}"
                )

    async def _wait_deployment_available(self, namespace: str, name: str) -> None:
        def available() -> tuple[bool, str]:
            status, body = self.api("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            replicas = body.get("status", {}).get("availableReplicas", 0) if status == 200 else 0
            return replicas >= 1, f"{namespace}/{name}: {replicas} available"

        await self._wait(f"Deployment {namespace}/{name} available", available)
