"""The TLS listener's certificate: read from two PEM files, re-read when they change, never broken by a
bad new pair.

The listener is given one `front` context for its whole life (TLS 1.2 at least, HTTP/1.1). Each
certificate pair is loaded into a context of its own, and the front context's server-name callback
(OpenSSL calls it on every handshake, with or without SNI) hands the handshake to the newest good pair's
context. A new pair is loaded and tried (a whole handshake in memory) before it is switched to, so new
connections see a new certificate without a restart, a half-written or mismatched pair never replaces a
working one, and connections already open keep theirs.

Secrets mounted from Kubernetes change by a symlink swap: the files are compared by their stamps
(`webhook.filestamp`), every reload interval.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from webhook import filestamp

__all__ = ["CertificateError", "ServingCertificate", "handshake", "new_context"]

logger = logging.getLogger(__name__)


class CertificateError(ValueError):
    """A certificate/key pair that cannot be served; the message names the files and why."""


def new_context() -> ssl.SSLContext:
    """A server context as the listener uses it: TLS 1.2 or newer, HTTP/1.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


def handshake(server: ssl.SSLContext) -> bytes:
    """One complete TLS handshake against `server` in memory (no socket); the DER certificate it served.
    Raises ssl.SSLError when the context cannot complete one."""
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE  # only whether the pair works is tried here
    to_client, to_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_out, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, client_out)
    serving = server.wrap_bio(to_server, server_out, server_side=True)
    client_done = server_done = False
    for _ in range(10):  # TLS 1.2 and 1.3 need at most a few flights
        client_done = client_done or _handshake_step(client)
        to_server.write(client_out.read())
        server_done = server_done or _handshake_step(serving)
        to_client.write(server_out.read())
        if client_done and server_done:
            served = client.getpeercert(binary_form=True)
            if not served:
                raise ssl.SSLError("the handshake completed without a certificate")
            return served
    raise ssl.SSLError("the handshake did not complete")


def _handshake_step(side: ssl.SSLObject) -> bool:
    """Whether `side`'s handshake is complete after its next flight (False: it waits for the other's)."""
    try:
        side.do_handshake()
    except ssl.SSLWantReadError:
        return False
    return True


def _check_file(path: Path, *, what: str, marker: bytes) -> None:
    """A clear reason for the common mistakes, before OpenSSL's terse ones."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CertificateError(f"{what} {path}: cannot read it: {err.strerror or err}") from err
    if marker not in data:
        raise CertificateError(f"{what} {path}: no PEM {marker.decode().strip('-')} in it")


def _load_pair(cert: Path, key: Path) -> tuple[ssl.SSLContext, str]:
    """A context serving the pair, and the SHA-256 fingerprint of the certificate it serves."""
    _check_file(cert, what="certificate", marker=b"-----BEGIN CERTIFICATE-----")
    _check_file(key, what="private key", marker=b"PRIVATE KEY-----")
    context = new_context()
    try:
        context.load_cert_chain(cert, key)
    except OSError as err:  # ssl.SSLError is an OSError too
        reason = err.reason if isinstance(err, ssl.SSLError) and err.reason else str(err)
        raise CertificateError(
            f"certificate {cert} and private key {key}: not a usable pair ({reason})"
        ) from err
    try:
        served = handshake(context)
    except ssl.SSLError as err:
        raise CertificateError(
            f"certificate {cert} and private key {key}: a TLS handshake with them fails: {err}"
        ) from err
    return context, hashlib.sha256(served).hexdigest()


@dataclass
class ServingCertificate:
    """The certificate pair in force and the listener's front context. `load` raises CertificateError."""

    cert: Path
    key: Path
    context: ssl.SSLContext = field(init=False, repr=False)
    sha256: str = ""
    loaded_at: float = 0.0  # wall clock
    last_error: str = ""
    reloads: int = 0
    problem: str | None = None  # the last `self_test`'s finding (None: the listener's context works)
    _current: ssl.SSLContext = field(init=False, repr=False)
    _tried: tuple[filestamp.FileStamp, filestamp.FileStamp] = (None, None)

    @classmethod
    def load(cls, cert: Path, key: Path) -> ServingCertificate:
        serving = cls(cert=cert, key=key)
        stamps = (filestamp.stamp(cert), filestamp.stamp(key))
        serving._current, serving.sha256 = _load_pair(cert, key)
        serving._tried, serving.loaded_at = stamps, time.time()
        # The front context: the listener keeps it; it hands every handshake to the pair in force.
        serving.context = new_context()
        serving.context.sni_callback = serving._choose
        serving.self_test()
        return serving

    def _choose(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        connection.context = self._current

    def self_test(self) -> str | None:
        """A handshake through the listener's context, as a client's would go: None when it completes with
        the certificate in force, else why not. Kept in `problem` (readiness reads it there)."""
        try:
            served = handshake(self.context)
        except ssl.SSLError as err:
            self.problem = f"a TLS handshake with the listener's context fails: {err}"
        else:
            same = hashlib.sha256(served).hexdigest() == self.sha256
            self.problem = None if same else "the listener serves another certificate than the one in force"
        return self.problem

    def reload_if_changed(self) -> Literal["unchanged", "reloaded", "failed"]:
        """Load the pair again if either file changed since last tried (`reloaded`: the new pair is now in
        force). A pair that does not load or cannot complete a handshake is reported (log, `last_error`)
        and the one in force stays; it is tried again when either file changes again."""
        stamps = (filestamp.stamp(self.cert), filestamp.stamp(self.key))
        if stamps == self._tried:
            return "unchanged"
        self._tried = stamps
        try:
            context, sha256 = _load_pair(self.cert, self.key)
        except CertificateError as err:
            self.last_error = str(err)
            logger.error("serving certificate not reloaded, keeping the one in force: %s", err)
            return "failed"
        self._current, self.last_error, self.loaded_at, self.reloads = (
            context,
            "",
            time.time(),
            self.reloads + 1,
        )
        if sha256 != self.sha256:
            logger.info("serving certificate reloaded from %s (sha256 %s)", self.cert, sha256[:16])
        self.sha256 = sha256
        return "reloaded"
