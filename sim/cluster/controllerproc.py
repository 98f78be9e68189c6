"""The real controller (`python -m webhook`) for a simulated cluster: one process on loopback, serving
admission and the group grant API over TLS with a CA made for the run, and the MutatingWebhookConfiguration
that sends the cluster's enabled pods to it (as the Helm chart registers it: objectSelector on the enable
label, failurePolicy Ignore, a 5 s timeout, reinvocation IfNeeded).

lockd processes reach it with `lockd_args()` (URL, bearer token file, CA file). One replica with
`--no-leader-elect`: the simulated cluster tests pacing, not failover (tests/groups_api does that).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from stagger.names import Names
from stagger.objects import Obj

__all__ = ["ControllerError", "ControllerProcess", "ControllerSpec"]

logger = logging.getLogger(__name__)

BANNER = re.compile(r"admission on https://([\d.]+):(\d+)/mutate/pods")
WEBHOOK_NAME = "pods.stagger.sim"


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


class ControllerProcess:
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
        self.log_file = folder / "controller.log"
        # The MutatingWebhookConfiguration's name: one per run, so runs on a shared API server never clash.
        self.webhook_name = f"stagger-sim-{secrets.token_hex(4)}"
        self.url = ""
        self._proc: asyncio.subprocess.Process | None = None
        self._log: asyncio.Task[None] | None = None

    def argv(self) -> list[str]:
        s = self.spec
        return [
            s.python, "-m", "webhook",
            "--listen", f"{s.host}:0", "--probe-listen", f"{s.host}:0",
            "--tls-cert", str(self.cert_file), "--tls-key", str(self.key_file),
            "--policies", str(s.policies), "--kubeconfig", str(s.kubeconfig),
            "--token-file", str(self.token_file), "--image", s.image,
            "--lockd-port", str(s.lockd_port), "--prefix", s.names.prefix,
            "--no-leader-elect", "--log-level", s.log_level,
        ]  # fmt: skip

    async def start(self, *, within: float = 30.0) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv(), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
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
        self.url = f"https://{match[1]}:{match[2]}"
        self.log_file.write_text("".join(lines))
        self._log = asyncio.create_task(self._copy_log(stderr), name="controller-log")

    async def _copy_log(self, stream: asyncio.StreamReader) -> None:
        with self.log_file.open("a") as out:
            while line := await stream.readline():
                out.write(line.decode(errors="replace"))
                out.flush()

    def lockd_args(self) -> list[str]:
        """What each lockd needs to ask this controller for group grants."""
        return [
            "--controller-url", self.url,
            "--controller-token-file", str(self.token_file),
            "--controller-ca-file", str(self.ca_file),
        ]  # fmt: skip

    def webhook_configuration(self) -> Obj:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.webhook_name},
            "webhooks": [
                {
                    "name": WEBHOOK_NAME,
                    "clientConfig": {
                        "url": f"{self.url}/mutate/pods",
                        "caBundle": base64.b64encode(self._ca.cert_pem.bytes()).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
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
            ],
        }

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "".join(self.log_file.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        except OSError:
            return ""

    async def stop(self, *, grace: float = 10.0) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            logger.warning("the controller did not stop within %gs: killed", grace)
            proc.kill()
            await proc.wait()
        if self._log is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._log
