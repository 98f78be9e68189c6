"""The real controller (`python -m webhook`) for a simulated cluster: one process on loopback, serving
admission and the group grant API over TLS with a CA made for the run, and the MutatingWebhookConfiguration
that sends the cluster's enabled pods (`/mutate/pods`) and Jobs (`/mutate/jobs`, evict mode: evictions not
counted as failures) to it (as the Helm chart registers it: objectSelector on the enable label,
failurePolicy Ignore, a 5 s timeout, reinvocation IfNeeded).

lockd processes reach it with `lockd_args()` (URL, bearer token file, CA file). One replica by default,
with `--no-leader-elect`; several elect a leader on a Lease, behind two proxies that play the chart's
Services (`ControllerProcess`); the leader's also serves as each replica's `--leader-url` (where a
replica that is not the leader forwards evict mode's admission decisions).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import trustme

from sim.cluster.launchers.stopping import stop_process
from stagger.kube import LEASES, ApiError, RestClient
from stagger.names import Names
from stagger.objects import Obj

__all__ = ["ControllerError", "ControllerProcess", "ControllerSpec"]

logger = logging.getLogger(__name__)

BANNER = re.compile(r"admission on https://([\d.]+):(\d+)/mutate/pods")
PROBES = re.compile(r"probes on (http://[\d.]+:\d+)")
WEBHOOK_NAME = "pods.stagger.sim"
JOBS_WEBHOOK_NAME = "jobs.stagger.sim"


class ControllerError(RuntimeError):
    """The controller did not come up; the message has the end of its log."""


@dataclass(frozen=True)
class ControllerSpec:
    work_dir: Path
    kubeconfig: Path
    policies: Path
    lockd_port: int
    image: str
    names: Names = field(default_factory=Names)
    host: str = "127.0.0.1"
    log_level: str = "warning"
    python: str = sys.executable
    replicas: int = 1
    """With 2 or more, the replicas elect a leader on a Lease (the timings below, in wall seconds)."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class _Replica:
    def __init__(self, *, argv: list[str], log_file: Path, identity: str) -> None:
        self.argv = argv
        self.log_file = log_file
        self.identity = identity
        self.port = 0
        self.probes_url = ""
        self.ready = False
        """Its /readyz said 200 since it was last started (a Service's endpoints list only ready pods)."""
        self._proc: asyncio.subprocess.Process | None = None
        self._log: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self, *, within: float) -> None:
        self.ready = False
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        assert self._proc.stderr is not None
        stderr = self._proc.stderr
        lines: list[str] = []

        async def banner() -> re.Match[str]:
            while True:
                line = (await stderr.readline()).decode(errors="replace")
                if not line:
                    raise ControllerError("the controller exited before listening:\n" + "".join(lines[-20:]))
                lines.append(line)
                if match := BANNER.search(line):
                    return match

        try:
            match = await asyncio.wait_for(banner(), timeout=within)
        except TimeoutError:
            raise ControllerError(
                f"the controller did not listen within {within:g}s:\n{''.join(lines[-20:])}"
            ) from None
        self.port = int(match[2])
        probes = PROBES.search(lines[-1])
        self.probes_url = probes[1] if probes else ""
        with self.log_file.open("a") as out:  # a restarted replica's log goes on after the last one's
            out.write("".join(lines))
        self._log = asyncio.create_task(self._copy_log(stderr), name=f"{self.identity}-log")

    async def wait_ready(self, *, within: float) -> None:
        """Until `/readyz` answers 200 (its pod watch has listed every enabled pod): what a Service waits
        for before it sends the replica anything, and what `helm install --wait` waits for."""
        deadline = asyncio.get_running_loop().time() + within
        async with aiohttp.ClientSession() as session:
            while True:
                if not self.running:
                    raise ControllerError(f"{self.identity} exited before it was ready")
                try:
                    async with session.get(
                        self.probes_url + "/readyz", timeout=aiohttp.ClientTimeout(total=2)
                    ) as response:
                        if response.status == 200:
                            self.ready = True
                            return
                        why = f"HTTP {response.status}: {(await response.text())[:200]}"
                except (aiohttp.ClientError, TimeoutError) as err:
                    why = str(err) or type(err).__name__
                if asyncio.get_running_loop().time() >= deadline:
                    raise ControllerError(f"{self.identity} was not ready within {within:g}s: {why}")
                await asyncio.sleep(0.05)

    async def _copy_log(self, stream: asyncio.StreamReader) -> None:
        with self.log_file.open("a") as out:
            while line := await stream.readline():
                out.write(line.decode(errors="replace"))
                out.flush()

    def kill(self) -> None:
        if self.running:
            assert self._proc is not None
            self._proc.kill()

    async def stop(self, *, grace: float) -> None:
        proc = self._proc
        if proc is not None:

            def on_kill() -> None:
                logger.warning("%s did not stop within %gs: killed", self.identity, grace)

            await stop_process(proc, grace=grace, on_kill=on_kill)
        if self._log is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._log


class TcpProxy:
    """What a Service and kube-proxy do for the simulated cluster: each connection goes to the port
    `choose()` names at that moment (None: the connection is closed, as with no endpoints). `delay()`, if
    given, is how long to hold back each piece of a request now (a chaos run's slow network)."""

    def __init__(
        self, *, host: str, choose: Callable[[], int | None], delay: Callable[[], float] | None = None
    ) -> None:
        self._host = host
        self._choose = choose
        self._delay = delay
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self._choose()
        try:
            if target is None:
                return
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(self._host, target)
            except OSError:
                return
            try:
                await asyncio.gather(
                    _pipe(reader, upstream_writer, delay=self._delay), _pipe(upstream_reader, writer)
                )
            finally:
                upstream_writer.close()
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delay: Callable[[], float] | None = None
) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            pause = delay() if delay is not None else 0.0
            if pause > 0:
                await asyncio.sleep(pause)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


class ControllerProcess:
    """The controller replicas of a simulated cluster, with the files they share (as the chart's Secrets:
    the serving pair, its CA, the bearer token). One replica runs with `--no-leader-elect` and is reached
    directly; with more, they elect a leader on a Lease named for the run, and two proxies stand in for
    the chart's Services: admission goes to any running replica, group grants to the Lease's holder
    (the chart's leader Service selects the label the leader puts on its pod)."""

    def __init__(self, spec: ControllerSpec) -> None:
        self.spec = spec
        folder = spec.work_dir / "controller"
        folder.mkdir(parents=True, exist_ok=True)
        self._ca = trustme.CA()
        pair = self._ca.issue_cert(spec.host, "localhost")
        self.cert_file, self.key_file = folder / "tls.crt", folder / "tls.key"
        self.ca_file, self.token_file = folder / "ca.crt", folder / "token"
        pair.cert_chain_pems[0].write_to_path(str(self.cert_file))
        pair.private_key_pem.write_to_path(str(self.key_file))
        self._ca.cert_pem.write_to_path(str(self.ca_file))
        self.token_file.write_text(secrets.token_hex(24))
        run = secrets.token_hex(4)
        # The MutatingWebhookConfiguration's and the Lease's names: one per run, so runs on a shared API
        # server never clash.
        self.webhook_name = f"stagger-sim-{run}"
        self.lease_name = f"stagger-sim-{run}"
        # The argv is completed in start(), once the leader's proxy has a port (`--leader-url`).
        self.replicas = [
            _Replica(
                argv=self._argv(i), log_file=folder / f"controller-{i}.log", identity=f"sim-controller-{i}"
            )
            for i in range(max(1, spec.replicas))
        ]
        self.leader: str | None = None  # the Lease's holder as last read (replicas > 1)
        self.admission_delay: Callable[[], float] = lambda: 0.0
        """How long the admission Service holds back a request now (chaos runs make the webhook time out)."""
        self._admission: TcpProxy | None = None
        self._grants: TcpProxy | None = None
        self._follow: asyncio.Task[None] | None = None
        self._next = 0

    def _argv(self, index: int, *, leader_url: str | None = None) -> list[str]:
        s = self.spec
        argv = [
            s.python, "-m", "webhook",
            "--listen", f"{s.host}:0", "--probe-listen", f"{s.host}:0",
            "--tls-cert", str(self.cert_file), "--tls-key", str(self.key_file),
            "--policies", str(s.policies), "--kubeconfig", str(s.kubeconfig),
            "--token-file", str(self.token_file), "--image", s.image,
            "--lockd-port", str(s.lockd_port), "--prefix", s.names.prefix,
            "--log-level", s.log_level,
        ]  # fmt: skip
        if s.replicas <= 1:
            return [*argv, "--no-leader-elect"]
        if leader_url is not None:
            argv += ["--leader-url", leader_url, "--leader-ca-file", str(self.ca_file)]
        return [
            *argv,
            "--identity", f"sim-controller-{index}",
            "--lease-name", self.lease_name, "--lease-namespace", "default",
            "--lease-duration", f"{s.lease_duration:g}s", "--renew-deadline", f"{s.renew_deadline:g}s",
            "--retry-period", f"{s.retry_period:g}s",
        ]  # fmt: skip

    @property
    def url(self) -> str:
        """Where lockd asks for group grants: the leader (through its proxy with several replicas)."""
        port = self._grants.port if self._grants is not None else self.replicas[0].port
        return f"https://{self.spec.host}:{port}"

    @property
    def admission_url(self) -> str:
        port = self._admission.port if self._admission is not None else self.replicas[0].port
        return f"https://{self.spec.host}:{port}"

    async def start(self, *, client: RestClient | None = None, within: float = 30.0) -> None:
        """Start the replicas; with several, first the two proxies (the leader's is every replica's
        `--leader-url`), and then follow the Lease."""
        if len(self.replicas) > 1:
            assert client is not None, "several replicas need a client to follow their Lease"
            self._admission = TcpProxy(
                host=self.spec.host, choose=self._any_replica, delay=lambda: self.admission_delay()
            )
            self._grants = TcpProxy(host=self.spec.host, choose=self._leader_port)
            await self._admission.start()
            await self._grants.start()
            for i, replica in enumerate(self.replicas):
                replica.argv = self._argv(i, leader_url=self.url)
        await asyncio.gather(*(replica.start(within=within) for replica in self.replicas))
        # The chart's Services send requests only to ready replicas (and `helm install --wait` waits for
        # them): the webhook is registered once they are.
        await asyncio.gather(*(replica.wait_ready(within=within) for replica in self.replicas))
        if client is not None and len(self.replicas) > 1:
            self._follow = asyncio.create_task(self._follow_lease(client), name="controller-lease")

    def _any_replica(self) -> int | None:
        # As the chart's Service: only replicas that are running and were ready since they started.
        running = [r for r in self.replicas if r.running and r.ready]
        if not running:
            return None
        self._next += 1
        return running[self._next % len(running)].port

    def _leader_port(self) -> int | None:
        for replica in self.replicas:
            if replica.identity == self.leader and replica.running:
                return replica.port
        return None

    async def _follow_lease(self, client: RestClient) -> None:
        while True:
            try:
                lease = await client.get(LEASES, name=self.lease_name, namespace="default")
                self.leader = (lease.get("spec") or {}).get("holderIdentity") or None
            except (ApiError, aiohttp.ClientError) as exc:
                logger.debug("reading the controllers' Lease: %s", exc)
            await asyncio.sleep(0.1)

    def kill(self, identity: str) -> None:
        """SIGKILL one replica (it neither releases its Lease nor removes anything)."""
        for replica in self.replicas:
            if replica.identity == identity:
                replica.kill()

    async def restart(self, identity: str, *, within: float = 30.0) -> None:
        """Start a killed replica again (as its Deployment would), once it has exited; returns when it is
        ready. Only with several replicas: the proxies find its new port."""
        for replica in self.replicas:
            if replica.identity == identity and not replica.running:
                await replica.start(within=within)
                await replica.wait_ready(within=within)

    def lockd_args(self) -> list[str]:
        """What each lockd needs to ask this controller for group grants."""
        return [
            "--controller-url", self.url,
            "--controller-token-file", str(self.token_file),
            "--controller-ca-file", str(self.ca_file),
        ]  # fmt: skip

    def webhook_configuration(self) -> Obj:
        """Pods (`/mutate/pods`) and Jobs (`/mutate/jobs`: an Ignore rule for DisruptionTarget in the
        Job's podFailurePolicy, so that evict mode's evictions are not failures), both CREATE only, on
        the enable label; failurePolicy Ignore, so a controller without the Jobs route (404) admits
        Jobs unchanged."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.webhook_name},
            "webhooks": [
                self._webhook(WEBHOOK_NAME, path="/mutate/pods", group="", resource="pods"),
                self._webhook(JOBS_WEBHOOK_NAME, path="/mutate/jobs", group="batch", resource="jobs"),
            ],
        }

    def _webhook(self, name: str, *, path: str, group: str, resource: str) -> Obj:
        return {
            "name": name,
            "clientConfig": {
                "url": f"{self.admission_url}{path}",
                "caBundle": base64.b64encode(self._ca.cert_pem.bytes()).decode(),
            },
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": [resource],
                    "scope": "Namespaced",
                }
            ],
            "objectSelector": {"matchLabels": {self.spec.names.enable_label: "1"}},
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
        }

    def log_tail(self, lines: int = 20) -> str:
        tails = []
        for replica in self.replicas:
            try:
                text = replica.log_file.read_text(errors="replace")
            except OSError:
                continue
            tails.append(f"--- {replica.identity}\n" + "".join(text.splitlines(keepends=True)[-lines:]))
        return "".join(tails)

    async def stop(self, *, grace: float = 10.0) -> None:
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
        await asyncio.gather(*(replica.stop(grace=grace) for replica in self.replicas))
        for proxy in (self._admission, self._grants):
            if proxy is not None:
                await proxy.stop()
