"""The controller the webhook fuzz tests send to (tests/fuzz/test_webhook_admission.py and
test_webhook_grants.py): the real webhook process over TLS with an API emulator behind it, an HTTPS
session that trusts its certificate, and its log read in pieces."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from sim.emulator.server import ApiServerThread
from tests.webhook.process import BANNER, Certs, Webhook, start_webhook, tls_args


@dataclass
class RunningController:
    process: Webhook = field(repr=False)  # its repr holds the whole log
    http: requests.Session
    sentinels: int = 0
    seen: int = 0  # characters of the log already checked

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How Hypothesis shows the fixture in a failing example: not with the whole log."""
        printer.text(f"{type(self).__name__}({self.process.url})")

    def new_log(self) -> str:
        """The log written since the last call: a sentinel request whose warning is awaited first, so every
        line of the requests before it is in."""
        self.sentinels += 1
        mark = f"fuzz-sentinel-{self.sentinels}"
        self.http.post(
            self.process.url + "/mutate/pods",
            data=json.dumps({"apiVersion": mark}),
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        self.process.wait_for_line(re.escape(mark), within=10)
        log = self.process.log
        start, self.seen = self.seen, len(log)
        return log[start:]


@dataclass
class Started:
    process: Webhook
    http: requests.Session  # trusts the controller's CA
    server: ApiServerThread
    certs: Certs


@contextlib.contextmanager
def start_controller(folder: Path, *, policies: str, token: str, max_body: int) -> Iterator[Started]:
    """The controller on an API emulator of its own, with `policies` and the grant API's `token`; stopped
    at the end."""
    certs = Certs.write(folder / "tls")
    ca = folder / "ca.pem"
    certs.ca.cert_pem.write_to_path(str(ca))
    (folder / "policies.yaml").write_text(policies)
    (folder / "token").write_text(token + "\n")
    with ApiServerThread() as server:
        server.write_kubeconfig(folder / "kubeconfig")
        process = start_webhook(
            *tls_args(certs),
            "--policies", str(folder / "policies.yaml"),
            "--kubeconfig", str(folder / "kubeconfig"),
            "--token-file", str(folder / "token"),
            "--max-body", str(max_body),
            "--grant-drain", "0.2s",
            # The examples compare /status before and after: the one claim must not lapse meanwhile.
            "--claim-confirm-timeout", "60s",
        )  # fmt: skip
        try:
            match = process.wait_for_line(BANNER)
            process.url = f"{match[1]}://127.0.0.1:{match[2]}"
            with requests.Session() as http:
                http.trust_env = False  # no proxy, and no REQUESTS_CA_BUNDLE overriding `verify`
                http.verify = str(ca)
                yield Started(process=process, http=http, server=server, certs=certs)
        finally:
            process.stop()
