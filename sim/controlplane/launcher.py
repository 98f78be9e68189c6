"""Starts and stops a real control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The binaries are the ones `make control-plane` builds into .tools/controlplane from testbed/go.mod (another
Kubernetes minor: `make control-plane KUBE_VERSION=1.34` into .tools/k8s-1.34/controlplane, used when
TESTBED_KUBE_VERSION names it, as the Makefile's test targets set it; `kube_build`). Each
listens on 127.0.0.1 only, on a free port unless given, with kubeadm's layout of certificates
(sim.controlplane.certs) and kubeadm's flags: Node,RBAC authorization, the default admission plugins
(plus NodeRestriction), client-certificate and service-account-token authentication, the aggregation
layer's front proxy, TLS to etcd, leader election, per-controller service-account credentials.

`ControlPlane` is for tests and tools:

    with ControlPlane(data_dir=tmp) as cp:        # or: async with ControlPlane(...) as cp:
        kubernetes.config.load_kube_config(str(cp.kubeconfig))

The processes are children of the thread that starts them and get SIGTERM if that thread ends
(PR_SET_PDEATHSIG), so a killed test run leaves none behind; `stop()` ends them in order (controllers,
then the apiserver, then etcd).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

from sim.controlplane.certs import CLUSTER_DOMAIN, SERVICE_CIDR, Pair, Pki, ensure_pki

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED = REPO_ROOT / "testbed"
KUBE_VERSION_ENV = "TESTBED_KUBE_VERSION"
"""The Kubernetes minor whose binaries the test bed runs (`make test-real KUBE_VERSION=1.34` sets it)."""


@dataclass(frozen=True)
class KubeBuild:
    """One Kubernetes minor's build (docs/testbed.md, "Versions"): the module file its binaries are built
    from, and the folder holding its controlplane/ and nodes/."""

    modfile: Path
    tools: Path

    @property
    def version(self) -> str:
        """The k8s.io/kubernetes release the module file pins (what the binaries report), e.g. v1.34.4."""
        found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", self.modfile.read_text(), re.MULTILINE)
        if found is None:
            raise ValueError(f"{self.modfile} requires no k8s.io/kubernetes")
        return found.group(1)


def kube_build(minor: str | None = None) -> KubeBuild:
    """The build of `minor` (by default $TESTBED_KUBE_VERSION): unset, empty or the minor testbed/go.mod
    pins, that one in .tools/; another, the one from testbed/go.<minor>.mod in .tools/k8s-<minor>/. One
    setting for both folders, so a real cluster's control plane and kubelets are of one release."""
    chosen = os.environ.get(KUBE_VERSION_ENV, "") if minor is None else minor
    alternate = TESTBED / f"go.{chosen}.mod"
    if chosen and alternate.is_file():
        return KubeBuild(modfile=alternate, tools=REPO_ROOT / ".tools" / f"k8s-{chosen}")
    default = KubeBuild(modfile=TESTBED / "go.mod", tools=REPO_ROOT / ".tools")
    # Read only when asked for another minor: without the setting no file is needed.
    if chosen and not default.version.startswith(f"v{chosen}."):
        raise ValueError(
            f"{KUBE_VERSION_ENV}={chosen}: no {alternate.relative_to(REPO_ROOT)}, and testbed/go.mod pins "
            f"{default.version}"
        )
    return default


KUBE_BUILD = kube_build()
DEFAULT_BIN_DIR = KUBE_BUILD.tools / "controlplane"
ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)
CLUSTER_NAME = "stagger-controlplane"
# The order `stop()` ends them in: what talks to the apiserver first, etcd last.
_STOP_ORDER = ((CONTROLLER_MANAGER, SCHEDULER), (APISERVER,), (ETCD,))


class ControlPlaneError(Exception):
    """The control plane could not start, or a part of it stopped."""


class MissingBinaries(ControlPlaneError):
    def __init__(self, bin_dir: Path, missing: Sequence[str]) -> None:
        super().__init__(
            f"control-plane binaries missing in {bin_dir}: {', '.join(missing)}; run `make control-plane` first"
        )
        self.bin_dir = bin_dir
        self.missing = list(missing)


class ComponentDied(ControlPlaneError):
    def __init__(self, name: str, code: int, log: Path, tail: str) -> None:
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        super().__init__(f"{name} {how}; last lines of {log}:\n{tail}")
        self.name = name
        self.code = code
        self.log = log
        self.tail = tail


def missing_binaries(bin_dir: Path = DEFAULT_BIN_DIR) -> list[str]:
    """The components whose executable is not in `bin_dir`."""
    return [name for name in COMPONENTS if not os.access(bin_dir / name, os.X_OK)]


def free_port(taken: set[int] | None = None) -> int:
    """A loopback port nothing listens on now (and not in `taken`)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not taken or port not in taken:
            return port


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return f"(cannot read {path}: {err})"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when the thread that forked it ends."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return preexec


def kubeconfig_dict(server: str, ca: Pair, client: Pair, user: str) -> dict[str, Any]:
    """A kubeconfig with the CA and the client certificate embedded, so the file works on its own."""
    import base64

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    context = f"{user}@{CLUSTER_NAME}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": b64(ca.cert_pem())},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.cert_pem()),
                    "client-key-data": b64(client.key_pem()),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def write_private(path: Path, text: str) -> None:
    """Writes `text` to `path` (mode 0600) through a temporary file, so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


@dataclass(frozen=True)
class Ports:
    apiserver: int
    etcd_client: int
    etcd_peer: int
    controller_manager: int
    scheduler: int

    @classmethod
    def choose(cls, apiserver: int | None = None) -> Ports:
        taken: set[int] = set() if apiserver is None else {apiserver}
        chosen = []
        for _ in range(5 if apiserver is None else 4):
            port = free_port(taken)
            taken.add(port)
            chosen.append(port)
        if apiserver is not None:
            chosen.insert(0, apiserver)
        return cls(*chosen)


class ControlPlane:
    """One control plane on loopback. `start()`/`stop()`, or a (sync or async) context manager.

    kubeconfig: where the admin kubeconfig (system:masters) is written once the apiserver is ready
    (default DATA_DIR/admin.conf). data_dir: certificates, etcd's data, kubeconfigs and the components'
    logs (logs/NAME.log); a temporary dir, removed by `stop()`, if none is given. A data dir given again
    keeps its CA and etcd data (the controllers then wait out the previous run's leader leases, ~15 s).
    port: the apiserver's port (free one if None). extra_args: more flags per component name.
    address: where the apiserver listens and what it advertises: 127.0.0.1 by default; an address that
    pods can route to for real nodes (`sim.realcluster`), which then also publishes it as the `kubernetes`
    Service's endpoint (the lease reconciler) and names it in the serving certificate. service_cidr: the
    Service range (198.19.0.0/16 by default; its first address is the `kubernetes` Service's).
    """

    def __init__(
        self,
        *,
        kubeconfig: Path | str | None = None,
        data_dir: Path | str | None = None,
        port: int | None = None,
        bin_dir: Path | str = DEFAULT_BIN_DIR,
        ready_timeout: float = 90.0,
        extra_args: dict[str, list[str]] | None = None,
        address: str = "127.0.0.1",
        service_cidr: str = SERVICE_CIDR,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.address = address
        self.service_cidr = service_cidr
        self._own_data_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="controlplane-"))
        )
        self.kubeconfig = Path(kubeconfig) if kubeconfig is not None else self.data_dir / "admin.conf"
        self.ready_timeout = ready_timeout
        self.extra_args = extra_args or {}
        self.ports = Ports.choose(port)
        self.server = f"https://{address}:{self.ports.apiserver}"
        self.version = ""
        self.startup_seconds = 0.0
        self.components: dict[str, Component] = {}
        self.pki = Pki(self.data_dir / "pki")
        self._started = False

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        """Starts everything and returns once the apiserver is ready (blocking). From a running event
        loop, await `start_async()` instead."""
        asyncio.run(self.start_async())
        return self

    async def start_async(self) -> ControlPlane:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise MissingBinaries(self.bin_dir, missing)
        began = time.monotonic()
        self._started = True
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            (self.data_dir / "logs").mkdir(exist_ok=True)
            self.pki = ensure_pki(
                self.data_dir / "pki",
                service_cidr=self.service_cidr,
                addresses=() if self._loopback else (self.address,),
            )
            self._write_component_kubeconfigs()
            self._spawn(ETCD, self._etcd_args())
            self._spawn(APISERVER, self._apiserver_args())
            admin = self.admin_ssl()
            await self._wait_ok(APISERVER, f"{self.server}/readyz", admin)
            self._spawn(CONTROLLER_MANAGER, self._controller_manager_args())
            self._spawn(SCHEDULER, self._scheduler_args())
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE  # their serving certs are self-signed in memory
            await asyncio.gather(
                self._wait_ok(
                    CONTROLLER_MANAGER, f"https://127.0.0.1:{self.ports.controller_manager}/healthz", insecure
                ),
                self._wait_ok(SCHEDULER, f"https://127.0.0.1:{self.ports.scheduler}/healthz", insecure),
            )
            status, body = await asyncio.to_thread(_get, f"{self.server}/version", admin)
            self.version = str(json.loads(body).get("gitVersion", "")) if status == 200 else ""
            admin_config = kubeconfig_dict(self.server, self.pki.ca, self.pki.admin, "kubernetes-admin")
            write_private(self.kubeconfig, yaml.safe_dump(admin_config, sort_keys=False))
        except BaseException:
            self.stop(remove_data=False)
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def dead(self) -> Component | None:
        """The first started component whose process has exited, if any."""
        for component in self.components.values():
            if component.exit_code() is not None:
                return component
        return None

    def check(self) -> None:
        """Raises ComponentDied if a component has exited."""
        component = self.dead()
        if component is not None:
            raise self._died(component)

    def stop(self, *, timeout: float = 20.0, remove_data: bool | None = None) -> None:
        """Ends every process (SIGTERM, then SIGKILL after `timeout`), in order. Removes a temporary data
        dir unless remove_data is False (the default keeps it when a component had died, for its logs)."""
        died = self.dead() is not None
        for group in _STOP_ORDER:
            procs = [c.proc for name in group if (c := self.components.get(name)) and c.proc]
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for component in self.components.values():
            if component._log_file is not None:
                component._log_file.close()
                component._log_file = None
        if remove_data is None:
            remove_data = not died
        if self._own_data_dir and remove_data and self._started:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ControlPlane:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def log(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"

    # --- processes -----------------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        argv = [str(self.bin_dir / name), *args, *self.extra_args.get(name, [])]
        component = Component(name, argv, self.log(name))
        component._log_file = open(component.log, "wb")  # noqa: SIM115 - closed by stop()
        component._log_file.write(f"# {' '.join(argv)}\n".encode())
        component._log_file.flush()
        self.components[name] = component
        component.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=component._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,  # a Ctrl-C reaches the launcher only, which stops them in order
            preexec_fn=_die_with_parent(),
        )

    def _died(self, component: Component) -> ComponentDied:
        return ComponentDied(component.name, component.exit_code() or 0, component.log, tail(component.log))

    async def _wait_ok(self, name: str, url: str, context: ssl.SSLContext) -> None:
        """Polls `url` until it answers 200; fails at once if any component exits."""
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer yet"
        while True:
            self.check()
            try:
                status, body = await asyncio.to_thread(_get, url, context)
                if status == 200:
                    return
                last = f"HTTP {status}: {body.strip()[-500:]}"
            except OSError as err:
                last = str(err)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not ready at {url} within {self.ready_timeout:g}s ({last}); "
                    f"last lines of {self.log(name)}:\n{tail(self.log(name))}"
                )
            await asyncio.sleep(0.2)

    @property
    def _loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback

    def admin_ssl(self) -> ssl.SSLContext:
        """A TLS context that trusts the cluster CA and presents the admin certificate (system:masters)."""
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    # --- configuration -------------------------------------------------------------------------------

    def _conf(self, name: str) -> Path:
        return self.data_dir / f"{name}.conf"

    def _write_component_kubeconfigs(self) -> None:
        for name, pair, user in (
            ("controller-manager", self.pki.controller_manager, "system:kube-controller-manager"),
            ("scheduler", self.pki.scheduler, "system:kube-scheduler"),
        ):
            config = kubeconfig_dict(self.server, self.pki.ca, pair, user)
            write_private(self._conf(name), yaml.safe_dump(config, sort_keys=False))

    def _etcd_args(self) -> list[str]:
        pki = self.pki
        client = f"https://127.0.0.1:{self.ports.etcd_client}"
        peer = f"https://127.0.0.1:{self.ports.etcd_peer}"
        return [
            "--name=default",
            f"--data-dir={self.data_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            f"--cert-file={pki.etcd_server.cert}",
            f"--key-file={pki.etcd_server.key}",
            "--client-cert-auth=true",
            f"--trusted-ca-file={pki.etcd_ca.cert}",
            f"--peer-cert-file={pki.etcd_peer.cert}",
            f"--peer-key-file={pki.etcd_peer.key}",
            "--peer-client-cert-auth=true",
            f"--peer-trusted-ca-file={pki.etcd_ca.cert}",
            "--snapshot-count=10000",
            # A test bed's etcd need not survive a power cut; without fsync a 2-core CI box keeps up.
            "--unsafe-no-fsync=true",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        # The apiserver would publish its address in the `kubernetes` Service's Endpoints, which refuse
        # loopback addresses (an error every 10 s); with everything on 127.0.0.1 it has none. On an address
        # pods can reach (real nodes) it publishes it, as kubeadm's control planes do.
        reconciler = "none" if self._loopback else "lease"
        return [
            f"--advertise-address={self.address}",
            f"--bind-address={self.address}",
            f"--secure-port={self.ports.apiserver}",
            "--allow-privileged=true",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",  # added to the default set, as kubeadm does
            f"--client-ca-file={pki.ca.cert}",
            "--enable-bootstrap-token-auth=true",
            f"--endpoint-reconciler-type={reconciler}",
            f"--etcd-servers=https://127.0.0.1:{self.ports.etcd_client}",
            f"--etcd-cafile={pki.etcd_ca.cert}",
            f"--etcd-certfile={pki.apiserver_etcd_client.cert}",
            f"--etcd-keyfile={pki.apiserver_etcd_client.key}",
            f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
            f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
            f"--proxy-client-key-file={pki.front_proxy_client.key}",
            "--requestheader-allowed-names=front-proxy-client",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
        ]

    def _controller_manager_args(self) -> list[str]:
        pki = self.pki
        conf = self._conf("controller-manager")
        return [
            f"--kubeconfig={conf}",
            f"--authentication-kubeconfig={conf}",
            f"--authorization-kubeconfig={conf}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.controller_manager}",
            f"--client-ca-file={pki.ca.cert}",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            f"--cluster-name={CLUSTER_NAME}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--leader-elect=true",
            f"--root-ca-file={pki.ca.cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--use-service-account-credentials=true",
        ]

    def _scheduler_args(self) -> list[str]:
        conf = self._conf("scheduler")
        return [
            f"--kubeconfig={conf}",
            f"--authentication-kubeconfig={conf}",
            f"--authorization-kubeconfig={conf}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.scheduler}",
            "--leader-elect=true",
        ]


def _get(url: str, context: ssl.SSLContext, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        with contextlib.closing(err):
            return err.code, err.read().decode(errors="replace")
