"""`python -m webhook` as a process: it starts with trustme certificates and answers an AdmissionReview
over HTTPS (TLS 1.2 or newer; a TLS 1.1 client is refused by the server), start-up errors are one clear
message and exit 2 (a bad policy file names every bad field), a port in use is exit 1, and SIGTERM
exits 0 within the shutdown timeout even with a request in flight."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import aiohttp
import pytest

from tests.processes import clean_env
from tests.webhook.process import Certs, running_webhook, start_webhook, tls_args
from tests.webhook.reviews import NAMES, enabled, image_policy, patch_of, pod, review

pytestmark = pytest.mark.slow


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(**(env or {})),
    )


async def test_answers_an_admission_review_over_https(certs: Certs, tmp_path: Path) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(image_policy("gate"))
    with running_webhook(*tls_args(certs), "--policies", str(policies), "--lockd-port", "9555") as hook:
        obj = pod(labels=enabled(staggerimages="1"), init=[{"name": "setup", "image": "busybox"}])
        sent = review(obj)
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{hook.url}/mutate/pods", json=sent, ssl=certs.client_context()) as response,
        ):
            assert response.status == 200
            assert float(response.headers["X-Stagger-Admission-Ms"]) >= 0
            answer = await response.json()
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == sent["request"]["uid"]
        assert answer["response"]["allowed"] is True and answer["response"]["patchType"] == "JSONPatch"
        ops = patch_of(answer)
        assert ops[0]["op"] == "add" and ops[0]["path"] == "/spec/initContainers/0"  # first, before "setup"
        container = ops[0]["value"]
        assert container["name"] == "stagger-wait" and container["image"] == "stagger:test"
        assert {"name": "STAGGER_LOCKD_URL", "value": "http://$(HOST_IP):9555"} in container["env"]
        paths = {op["path"] for op in ops}
        assert f"/metadata/labels/{NAMES.staggered_label.replace('/', '~1')}" in paths
        assert {
            "op": "add",
            "path": "/spec/schedulingGates",
            "value": [{"name": NAMES.scheduling_gate}],
        } in ops
        assert "X-Stagger-Admission-Ms" in (await _post_raw(hook.url, certs, b"{}"))[1]


async def _post_raw(url: str, certs: Certs, body: bytes) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/mutate/pods", data=body, ssl=certs.client_context()) as response,
    ):
        return response.status, str(dict(response.headers))


def _handshake(port: int, context: ssl.SSLContext) -> str:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return str(tls.version())


def _permissive_server_handshake(certs: Certs, client: ssl.SSLContext) -> str:
    """A handshake of `client` with a server (the same certificate) that allows TLS 1.0 and newer."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.minimum_version = ssl.TLSVersion.TLSv1
    server.load_cert_chain(certs.cert, certs.key)
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def accept() -> None:
            conn, _ = listener.accept()
            with contextlib.suppress(OSError), server.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        version = _handshake(listener.getsockname()[1], client)
        thread.join(timeout=10)
    return version


def test_tls_1_2_is_the_minimum(certs: Certs) -> None:
    with running_webhook(*tls_args(certs)) as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        assert _handshake(port, certs.client_context()) == "TLSv1.3"
        tls12 = certs.client_context()
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        assert _handshake(port, tls12) == "TLSv1.2"
        # A client that speaks TLS 1.0/1.1 only (allowed by its own OpenSSL at security level 0) ...
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = certs.client_context()
            old.set_ciphers("DEFAULT:@SECLEVEL=0")
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        # ... that completes a TLS 1.1 handshake with a server allowing it ...
        assert _permissive_server_handshake(certs, old) == "TLSv1.1"
        # ... is refused by the webhook.
        with pytest.raises(ssl.SSLError):
            _handshake(port, old)
        # Still serving after refusing it.
        assert _handshake(port, certs.client_context()) == "TLSv1.3"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        pytest.param(["--insecure-http"], {}, "webhook: --image: required", id="no-image"),
        pytest.param(
            ["--image", "x"], {}, "webhook: --tls-cert and --tls-key: required to serve TLS", id="no-tls"
        ),
        pytest.param(
            ["--image", "x", "--insecure-http", "--listen", "nowhere"],
            {},
            "webhook: --listen: expected HOST:PORT",
            id="listen",
        ),
        pytest.param(
            ["--image", "x", "--insecure-http"],
            {"STAGGER_RELOAD_INTERVAL": "often"},
            "webhook: STAGGER_RELOAD_INTERVAL:",
            id="env",
        ),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(args: list[str], env: dict[str, str], message: str) -> None:
    done = _run(*args, env=env)
    assert done.returncode == 2
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


def test_a_bad_policy_file_names_every_error_and_exits_2(certs: Certs, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "staggeringPolicies:\n"
        "- name: y\n  labelSelector: {a: b}\n"
        "  pacer: {exponential: {minInitial: 4, multiplier: 0.5, maxStagger: 16}}\n"
        "- name: z\n  labelSelector: {matchLabels: {a: b}}\n  pacer: {linear: {step: 0, maxStagger: 3}}\n"
        "  mode: sideways\n"
    )
    done = _run("--image", "x", *tls_args(certs), "--policies", str(bad))
    assert done.returncode == 2
    assert "webhook: the policy file is not valid, nothing started" in done.stderr
    assert (
        "staggeringPolicies[0].pacer.exponential.multiplier: must be greater than 1 (got 0.5)" in done.stderr
    )
    assert "staggeringPolicies[1].pacer.linear.step" in done.stderr
    assert "staggeringPolicies[1].mode" in done.stderr


def test_unusable_certificate_or_token_files_exit_2(certs: Certs, tmp_path: Path) -> None:
    missing = _run("--image", "x", "--tls-cert", str(tmp_path / "none.crt"), "--tls-key", str(certs.key))
    assert missing.returncode == 2
    assert missing.stderr.startswith(
        f"webhook: --tls-cert/--tls-key: certificate {tmp_path / 'none.crt'}: cannot read"
    )
    other = Certs.write(tmp_path / "other")
    mismatched = _run("--image", "x", "--tls-cert", str(certs.cert), "--tls-key", str(other.key))
    assert mismatched.returncode == 2
    assert "not a usable pair (KEY_VALUES_MISMATCH)" in mismatched.stderr
    empty = tmp_path / "token"
    empty.write_text("\n")
    no_token = _run("--image", "x", *tls_args(certs), "--token-file", str(empty))
    assert no_token.returncode == 2
    assert no_token.stderr == f"webhook: --token-file: token file {empty}: empty\n"


def test_a_port_in_use_is_one_line_and_exit_1(certs: Certs) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _run(
            "--image", "x", *tls_args(certs), "--listen", f"127.0.0.1:{port}", "--probe-listen", "127.0.0.1:0"
        )
    assert done.returncode == 1
    assert f"webhook: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def _read_response(sock: ssl.SSLSocket) -> tuple[bytes, bytes]:
    """(status line and headers, body) of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")).split(b":")[1]
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return head, body


def _start_request(port: int, certs: Certs, body: bytes) -> ssl.SSLSocket:
    """A POST /mutate/pods whose handler is running, waiting for the body: `Expect: 100-continue`, and
    the server's `100 Continue` (sent as the handler is called) received."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = certs.client_context().wrap_socket(raw, server_hostname="127.0.0.1")
    sock.sendall(
        b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
    return sock


def test_sigterm_lets_a_request_in_flight_finish_then_exits_0(certs: Certs) -> None:
    with running_webhook(*tls_args(certs), "--shutdown-timeout", "5s") as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        sent = review(pod(labels=enabled()))
        body = json.dumps(sent).encode()
        in_flight = _start_request(port, certs, body)
        # The whole body is on its way before the signal: once the server starts closing, aiohttp reads no
        # more bytes from open connections, so a body sent after SIGTERM would never arrive.
        in_flight.sendall(body)
        started = time.monotonic()
        hook.proc.send_signal(signal.SIGTERM)
        head, answer = _read_response(in_flight)
        assert head.startswith(b"HTTP/1.1 200")
        assert json.loads(answer)["response"]["uid"] == sent["request"]["uid"]
        assert hook.proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 5.0
        in_flight.close()


def test_sigterm_exits_0_at_the_shutdown_timeout_when_a_request_never_finishes(certs: Certs) -> None:
    with running_webhook(*tls_args(certs), "--shutdown-timeout", "1s") as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        stuck = _start_request(port, certs, b"{}")  # the body never comes
        started = time.monotonic()
        assert hook.stop() == 0
        took = time.monotonic() - started
        stuck.close()
    assert 0.9 < took < 1.0 + 1.5, f"took {took:.2f}s to stop"


def test_sigterm_when_idle_exits_0_at_once(certs: Certs) -> None:
    hook = start_webhook(*tls_args(certs))
    hook.wait_for_line("admission on https://")
    started = time.monotonic()
    assert hook.stop() == 0
    assert time.monotonic() - started < 1.5
