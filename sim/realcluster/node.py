"""One real node: containerd, kubelet and kube-proxy in the node's network namespace.

Their configuration follows docs REAL-NODES (in ../shared) for this kind of machine: cgroup v1 with the
cgroupfs driver and a cgroupRoot made beforehand, no CAP_SYS_RESOURCE (containerd's
`restrict_oom_score_adj`, kubelet's `oomScoreAdj: 0`), containerd with its own root, state, socket and runc
root, kubelet and kube-proxy with x509 credentials from the cluster CA (`system:node:NAME`,
`system:kube-proxy`), and kube-proxy leaving the host's conntrack settings alone. Every path is under the
node's folder; the processes start in the node's cgroup, so that stopping the node kills whatever they
started (containerd's shims, the containers) with them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from sim.controlplane.certs import Pki, issue_client_cert
from sim.controlplane.launcher import kubeconfig_dict, tail, write_private
from sim.realcluster.host import HostError, in_netns, join_cgroup, run
from sim.realcluster.plan import ClusterPlan, NodePlan

logger = logging.getLogger(__name__)

SANDBOX_IMAGE = "localhost/stagger-testbed/pause:1"
"""containerd's sandbox image: the test bed's own pause (no registry to pull upstream's from)."""

CNI_BIN_DIR = "/usr/lib/cni"
"""Where Debian's containernetworking-plugins puts bridge, host-local, portmap and loopback."""

SOCKET_ROOT = Path("/run/stgr")
"""The nodes' containerd sockets (host.OUTSIDE_PATHS removes it at the end)."""


@dataclass(frozen=True)
class NodeTools:
    """The node binaries: kubelet, kube-proxy, crictl and containerd 2 (its runc shim and ctr) from `make
    node-tools`; runc, the CNI plugins, iptables and conntrack from Debian's packages (on PATH)."""

    kubelet: Path
    kube_proxy: Path
    crictl: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path

    def missing(self) -> list[str]:
        built = (self.kubelet, self.kube_proxy, self.crictl, self.containerd, self.containerd_shim, self.ctr)
        gone = [str(p) for p in built if not os.access(p, os.X_OK)]
        gone += [name for name in ("runc", "nsenter", "iptables", "conntrack") if not shutil.which(name)]
        gone += [
            f"{CNI_BIN_DIR}/{name}"
            for name in ("bridge", "host-local", "portmap", "loopback")
            if not os.access(f"{CNI_BIN_DIR}/{name}", os.X_OK)
        ]
        return gone


@dataclass
class Daemon:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def start(self, *, cgroup: str) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "ab")  # noqa: SIM115 - closed by stop()
        self._log_file.write(f"# {' '.join(self.argv)}\n".encode())
        self._log_file.flush()

        def enter_cgroup() -> None:
            join_cgroup(cgroup, os.getpid())

        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=enter_cgroup,
        )

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class NodeError(Exception):
    """A node's daemon did not start or stopped; the message names it with the end of its log."""


class Node:
    """One node's files and daemons. `start()` runs containerd (and waits for its socket), then kubelet
    and kube-proxy; `stop()` ends them. Images are imported with `load_image` once containerd runs."""

    def __init__(
        self,
        *,
        plan: NodePlan,
        cluster: ClusterPlan,
        root: Path,
        pki: Pki,
        server: str,
        cgroup: str,
        tools: NodeTools,
    ) -> None:
        self.plan = plan
        self.cluster = cluster
        self.root = root
        self.pki = pki
        self.server = server
        self.cgroup = cgroup
        self.tools = tools
        self.daemons: dict[str, Daemon] = {}

    # --- paths ---------------------------------------------------------------------------------------

    @property
    def socket(self) -> Path:
        """containerd's socket: in a short folder of its own, not the data dir, since a Unix socket's path
        may have 104 bytes at most (pytest's temporary folders are longer)."""
        return SOCKET_ROOT / self.plan.name / "containerd.sock"

    def logfile(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    # --- lifecycle -----------------------------------------------------------------------------------

    def start_runtime(self, *, timeout: float = 30.0) -> None:
        config = self._write_containerd_config()
        self._spawn("containerd", [str(self.tools.containerd), "--config", str(config)])
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            if self.socket.exists() and self._ctr("version", check=False).returncode == 0:
                return
            if time.monotonic() > deadline:
                raise NodeError(
                    f"{self.plan.name}: containerd not answering on {self.socket} within {timeout:g}s"
                )
            time.sleep(0.1)

    def start_kubelet(self) -> None:
        config, kubeconfig = self._write_kubelet_files()
        self._spawn(
            "kubelet",
            [
                str(self.tools.kubelet),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet' / 'pki'}",
                f"--hostname-override={self.plan.name}",
                f"--node-ip={self.plan.address}",
            ],
        )

    def start_kube_proxy(self) -> None:
        config = self._write_kube_proxy_files()
        self._spawn("kube-proxy", [str(self.tools.kube_proxy), f"--config={config}"])

    def load_image(self, archive: Path) -> None:
        """Imports an image archive (OCI or docker-archive) into the node's containerd, where kubelet finds
        it (namespace k8s.io), as `kind load image-archive` does."""
        self._ctr("images", "import", str(archive))

    def crictl(self, *args: str) -> str:
        """crictl against this node's containerd, as an operator on the node runs it."""
        argv = [str(self.tools.crictl), "--runtime-endpoint", f"unix://{self.socket}", *args]
        try:
            return run(*argv).stdout
        except HostError as err:
            raise NodeError(f"{self.plan.name}: {err}") from err

    def container_pid(self, name: str) -> int:
        """The host PID of the running container `name` (the first crictl lists)."""
        ids = self.crictl("ps", "--name", f"^{name}$", "--state", "running", "-q").split()
        if not ids:
            raise NodeError(f"{self.plan.name}: no running container named {name}")
        return int(self.crictl("inspect", "-o", "go-template", "--template", "{{.info.pid}}", ids[0]).strip())

    def check(self) -> None:
        for daemon in self.daemons.values():
            code = daemon.exit_code()
            if code is not None:
                raise NodeError(
                    f"{self.plan.name}: {daemon.name} exited with code {code}; last lines of {daemon.log}:\n{tail(daemon.log)}"
                )

    def stop_daemon(self, name: str) -> None:
        daemon = self.daemons.pop(name, None)
        if daemon is not None:
            daemon.stop()

    def restart_daemon(self, name: str) -> None:
        """Stops and starts one daemon again with the same files (a kubelet restart, say)."""
        daemon = self.daemons.pop(name)
        daemon.stop()
        self._spawn(name, daemon.argv)

    def forget_runtime_state(self) -> None:
        """What a power cut clears: containerd's state and runc's root (tmpfs under /run on a real node).
        Its root (images, snapshots) and kubelet's root-dir stay, as on disk."""
        for name in ("state", "runc"):
            shutil.rmtree(self.root / "containerd" / name, ignore_errors=True)

    def stop(self) -> None:
        """kube-proxy and kubelet first (so that nothing starts containers while containerd goes), then
        containerd. The containers and shims are killed with the node's cgroup, by the cluster."""
        for name in ("kube-proxy", "kubelet", "containerd"):
            self.stop_daemon(name)

    # --- helpers -------------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        daemon = Daemon(name, [*in_netns(self.plan.netns), *argv], self.logfile(name))
        daemon.start(cgroup=f"{self.cgroup}/daemons")
        self.daemons[name] = daemon

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.tools.ctr), "--address", str(self.socket), "--namespace", "k8s.io", *args]
        try:
            return run(*argv, check=check)
        except HostError as err:
            raise NodeError(f"{self.plan.name}: {err}") from err

    def _write_containerd_config(self) -> Path:
        base = self.root / "containerd"
        cni = self.root / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-stagger.conflist").write_text(json.dumps(self._cni_config(), indent=1))
        runtime = 'plugins."io.containerd.cri.v1.runtime"'
        # containerd 2's format (version 3, which every 2.x reads; 2.4 migrates it to its version 4 with a
        # warning at start): the CRI plugin is split into cri.v1.images and cri.v1.runtime.
        # Every path it would default outside the node's folder is given: /opt/containerd (opt), the CDI
        # spec dirs; NRI (its socket in /var/run/nri) is off, the nodes have no NRI plugins.
        text = f"""# containerd {self.plan.name}: written by sim.realcluster
version = 3
root = "{base / "root"}"
state = "{base / "state"}"

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{SANDBOX_IMAGE}"

[{runtime}]
  # No CAP_SYS_RESOURCE here: runc cannot set a negative oom_score_adj (docs REAL-NODES).
  restrict_oom_score_adj = true
  disable_apparmor = true
  cdi_spec_dirs = ["{base / "cdi"}"]

[{runtime}.containerd]
  default_runtime_name = "runc"

[{runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # The shim built with this containerd, not one an installed containerd put on PATH.
  runtime_path = "{self.tools.containerd_shim}"

[{runtime}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{base / "runc"}"

[{runtime}.cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{cni / "net.d"}"
"""
        path = base / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "0.4.0",
            "name": "stagger-testbed",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "hairpinMode": True,
                    # Pods keep their own address towards the host and the other nodes, which route the
                    # node's /24 back to it.
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.plan.pod_cidr, "gateway": self.plan.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.root / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            ],
        }

    def _kubeconfig(self, name: str, common_name: str, organizations: tuple[str, ...] = ()) -> Path:
        pair = self.pki.pair(f"nodes/{self.plan.name}/{name}")
        issue_client_cert(self.pki, pair, common_name, organizations=organizations)
        path = self.root / name / "kubeconfig"
        write_private(
            path,
            yaml.safe_dump(kubeconfig_dict(self.server, self.pki.ca, pair, common_name), sort_keys=False),
        )
        return path

    def _write_kubelet_files(self) -> tuple[Path, Path]:
        kubelet = self.root / "kubelet"
        kubeconfig = self._kubeconfig("kubelet", f"system:node:{self.plan.name}", ("system:nodes",))
        resolv = kubelet / "resolv.conf"
        # Pods' resolv.conf: the cluster DNS first (clusterDNS below); no upstream resolver here.
        resolv.write_text("# the test bed has no upstream resolver\noptions ndots:5\n")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.plan.address,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.pki.ca.cert)},
            },
            "authorization": {"mode": "Webhook"},
            # cgroup v1 on this VM, with no systemd: the cgroupfs driver, under a cgroupRoot made beforehand.
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"{self.cgroup}/pods",
            "failCgroupV1": False,
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "resolvConf": str(resolv),
            "clusterDNS": [self.cluster.dns_service_ip],
            "clusterDomain": self.cluster.cluster_domain,
            "podLogsDir": str(kubelet / "pod-logs"),
            # The disk is shared with the rest of the machine: evict only when it is really full.
            "evictionHard": {
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "memory.available": "100Mi",
            },
            "rotateCertificates": False,
            "serializeImagePulls": False,
            "protectKernelDefaults": False,
        }
        path = kubelet / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path, kubeconfig

    def _write_kube_proxy_files(self) -> Path:
        kubeconfig = self._kubeconfig("kube-proxy", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.plan.name,
            "mode": "iptables",
            "bindAddress": self.plan.address,
            "healthzBindAddress": f"{self.plan.address}:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "clusterCIDR": self.cluster.pod_cidr,
            # Zeros leave the host's conntrack sysctls as they are (they are not per network namespace).
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": [f"{self.plan.address}/32"],
        }
        path = self.root / "kube-proxy" / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path
