"""The controller as a real process for the tests: `python -m webhook` on loopback, with trustme
certificates written to files.

The process asks the system for free ports (`--listen 127.0.0.1:0`) and prints one banner line naming
them once both listeners listen: `running_webhook` waits for that line (an event, not a poll). Its stderr
is drained by a thread into `lines`, so the tests can read the log while it runs.
"""

from __future__ import annotations

import base64
import contextlib
import re
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from tests.processes import clean_env

BANNER = re.compile(
    r"admission on (https?)://127\.0\.0\.1:(\d+)/mutate/pods.*probes on http://127\.0\.0\.1:(\d+)"
)


@dataclass
class Certs:
    """A CA and the serving pair it issued for 127.0.0.1, laid out as a mounted Secret: `cert` and `key`
    are links into `..data`, itself a link to the current version's folder, so a new pair replaces
    both files at once (one rename of `..data`), as the kubelet updates a Secret volume."""

    ca: trustme.CA
    folder: Path
    version: int = 0

    @property
    def cert(self) -> Path:
        return self.folder / "tls.crt"

    @property
    def key(self) -> Path:
        return self.folder / "tls.key"

    @classmethod
    def write(cls, folder: Path) -> Certs:
        folder.mkdir(parents=True, exist_ok=True)
        certs = cls(ca=trustme.CA(), folder=folder)
        certs.issue(certs.ca)
        (folder / "tls.crt").symlink_to("..data/tls.crt")
        (folder / "tls.key").symlink_to("..data/tls.key")
        return certs

    def issue(self, ca: trustme.CA) -> None:
        """Replace the pair with one issued by `ca` (a rotation when `ca` is another CA)."""
        self.ca = ca
        pair = ca.issue_cert("127.0.0.1", "localhost")
        self.install(pair.cert_chain_pems[0].bytes(), pair.private_key_pem.bytes())

    def install(self, cert: bytes, key: bytes) -> None:
        """Both files replaced at once by these bytes (which need not be a good pair)."""
        self.version += 1
        version = self.folder / f"..v{self.version}"
        version.mkdir()
        (version / "tls.crt").write_bytes(cert)
        (version / "tls.key").write_bytes(key)
        staged = self.folder / "..data_tmp"
        staged.symlink_to(version.name)
        staged.replace(self.folder / "..data")

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


@dataclass
class Webhook:
    proc: subprocess.Popen[str]
    url: str = ""
    probe_url: str = ""
    lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def log(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # end of output: wakes waiters
            self._changed.notify_all()

    def wait_for_line(self, pattern: str | re.Pattern[str], *, within: float = 20.0) -> re.Match[str]:
        """The first log line matching `pattern`, waiting for it to be written (fails when the process
        exits first or after `within` seconds)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if match := regex.search(line):
                        return match
                seen = len(self.lines)
                if self.lines and self.lines[-1] == "":
                    raise AssertionError(f"the webhook exited without logging {regex.pattern!r}:\n{self.log}")
                if not self._changed.wait(timeout=within):
                    raise AssertionError(f"no log line {regex.pattern!r} within {within:g}s:\n{self.log}")

    def stop(self, *, timeout: float = 15.0) -> int:
        """SIGTERM, then the exit code (killed if it does not stop within `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def webhook_command(*args: str, image: str = "stagger:test") -> list[str]:
    """`python -m webhook` on free loopback ports (named in the banner line, BANNER), injecting `image`."""
    return [
        sys.executable,
        "-m",
        "webhook",
        "--listen",
        "127.0.0.1:0",
        "--probe-listen",
        "127.0.0.1:0",
        "--image",
        image,
        *args,
    ]


def start_webhook(*args: str, env: dict[str, str] | None = None) -> Webhook:
    proc = subprocess.Popen(
        webhook_command(*args),
        env=clean_env(**(env or {})),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    webhook = Webhook(proc)
    threading.Thread(target=webhook._drain, daemon=True, name="webhook-stderr").start()
    return webhook


@contextlib.contextmanager
def running_webhook(*args: str, env: dict[str, str] | None = None) -> Iterator[Webhook]:
    """The webhook, once both listeners listen; stopped (SIGTERM) at the end."""
    webhook = start_webhook(*args, env=env)
    try:
        match = webhook.wait_for_line(BANNER)
        webhook.url = f"{match[1]}://127.0.0.1:{match[2]}"
        webhook.probe_url = f"http://127.0.0.1:{match[3]}"
        yield webhook
    finally:
        webhook.stop()


def tls_args(certs: Certs) -> tuple[str, ...]:
    return ("--tls-cert", str(certs.cert), "--tls-key", str(certs.key))
