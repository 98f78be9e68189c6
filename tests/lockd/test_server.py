"""lockd as a real process facing broken clients and restarts: a slow client is cut off at the header
timeout (counted from each answer on a kept-alive connection), malformed HTTP gets a JSON 400 and no traceback, a port in use is one line and exit 1, the
`--max-long-poll` cap, and `--state-file` keeping standalone slots across a restart."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lockd.__main__ import banner
from lockd.settings import Settings
from stagger.contracts.lock import RELEASE_TOKEN_HEADER
from tests.metrics import by_label
from tests.policies import limit_policy
from tests.processes import clean_env, free_port, get, running_lockd


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=15)
    return stderr


def test_a_slow_client_is_cut_off_at_the_header_timeout() -> None:
    port = free_port()
    with running_lockd("--header-timeout", "1s", port=port) as proc:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            closed = False
            # A slowloris sends a header line now and then and never finishes the request.
            while time.monotonic() - started < 8:
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                    if sock.recv(1024) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            assert closed, "lockd kept a connection that never sent a whole request"
            assert time.monotonic() - started < 5
        assert proc.poll() is None


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(4096)
    return head


def test_the_header_timeout_counts_from_each_answer_on_a_kept_alive_connection() -> None:
    port = free_port()
    with running_lockd("--header-timeout", "1s", port=port) as proc:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            # Asks 0.6 s apart for 2.4 s: each answer starts the timeout again, so the connection stays.
            for i in range(4):
                sock.sendall(f"GET /v1/lock?namespace=ns&name=p{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                assert _answer(sock).startswith(b"HTTP/1.1 "), f"ask {i} was not answered"
                time.sleep(0.6)
            # Then half a head: 408 and closed about a second after the last answer.
            started = time.monotonic()
            sock.sendall(b"GET /v1/lock?namespace=ns&name=late HTTP/1.1\r\n")
            data = b""
            while chunk := sock.recv(1024):
                data += chunk
            assert data.startswith(b"HTTP/1.1 408 "), "lockd kept a connection whose head never ended"
            assert time.monotonic() - started < 5
        assert proc.poll() is None


def test_malformed_http_gets_a_json_400_and_no_traceback() -> None:
    port = free_port()
    with running_lockd(port=port) as proc:
        answers = []
        for garbage in (b"GET /v1/lock HTTP/1.1\r\nHost x\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(garbage)
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
            answers.append(data.decode())
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200, "lockd keeps serving"
        stderr = _stop(proc)
    for answer in answers:
        head, _, body = answer.partition("\r\n\r\n")
        assert re.match(r"HTTP/1\.[01] 400 ", head)
        assert "application/json" in head
        assert json.loads(body)["error"].startswith("malformed HTTP request")
    assert "Traceback" not in stderr
    assert stderr.count("malformed HTTP request from") == 2


def test_a_port_in_use_is_one_line_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            env=clean_env(),
        )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if not line[:4].isdigit()]  # not log lines
    assert lines == [f"lockd: cannot listen on 127.0.0.1:{port}: address already in use"] or (
        len(lines) == 1 and lines[0].startswith(f"lockd: cannot listen on 127.0.0.1:{port}")
    )
    assert "Traceback" not in done.stderr
    assert "Try:" not in done.stderr, "the banner is printed only once lockd listens"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [pytest.param("300s", True, id="at-cap"), pytest.param("301s", False, id="over-cap")],
)
def test_max_long_poll_is_capped(value: str, accepted: bool) -> None:
    from lockd.settings import SettingsError, parse_settings

    if accepted:
        assert parse_settings(["--standalone", "--max-long-poll", value], {}).queue.max_long_poll == 300
        return
    with pytest.raises(SettingsError, match=r"--max-long-poll: must be at most 5m"):
        parse_settings(["--standalone", "--max-long-poll", value], {})


def test_the_banner_shows_a_request_that_works_in_each_mode() -> None:
    assert "&uid=" not in banner(Settings(standalone=True))
    assert "uid=<the pod's metadata.uid>" in banner(Settings(standalone=False))


def test_a_standalone_restart_with_a_state_file_keeps_the_slots(tmp_path: Path) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(limit_policy(2))
    state = tmp_path / "state.json"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ("--policies", str(policies), "--state-file", str(state))
    with running_lockd(*args, port=port) as proc:
        tokens = {}
        for name in ("a", "b"):
            with urllib.request.urlopen(f"{base}/v1/lock?namespace=default&name={name}") as response:
                tokens[name] = json.loads(response.read())["releaseToken"]
        assert get(f"{base}/v1/lock?namespace=default&name=c")[0] == 423
        _stop(proc)
    saved = state.read_text()
    assert tokens["a"] not in saved and tokens["b"] not in saved, "only token hashes are written"
    with running_lockd(*args, port=port):
        status = json.loads(get(f"{base}/status")[1])
        assert sorted(s["name"] for s in status["slots"]) == ["a", "b"]
        assert get(f"{base}/v1/lock?namespace=default&name=c")[0] == 423, "the limit holds across the restart"
        request = urllib.request.Request(
            f"{base}/v1/lock?namespace=default&name=a",
            method="DELETE",
            headers={"X-Stagger-Release-Token": tokens["a"]},
        )
        with urllib.request.urlopen(request) as response:
            assert json.loads(response.read())["released"] is True, "the token of before the restart works"
        assert get(f"{base}/v1/lock?namespace=default&name=c")[0] == 200


def test_a_state_file_is_only_for_standalone() -> None:
    from lockd.settings import SettingsError, parse_settings

    with pytest.raises(SettingsError, match="--state-file: only for --standalone"):
        parse_settings(["--state-file", "/tmp/x.json", "--node-name", "n"], {})


def _shed(port: int) -> dict[str, float]:
    """lockd's connections shed at --max-connections, by why, from its /metrics."""
    return by_label(get(f"http://127.0.0.1:{port}/metrics")[1], "stagger_lockd_connections_shed_total", "why")


def test_a_connection_flood_leaves_the_probes_fast_and_the_waiters_in_their_places(tmp_path: Path) -> None:
    """5,000 idle connections against lockd with --max-connections 256: the oldest idle connections are
    closed for the new ones (counted), /healthz answers at once, and the pod long-polling in the queue
    keeps its place and gets the slot when the holder releases it."""
    port = free_port()
    policy = tmp_path / "policies.yaml"
    policy.write_text(limit_policy(1))
    base = f"http://127.0.0.1:{port}"
    with running_lockd("--policies", str(policy), "--max-connections", "256", port=port):
        status, granted = get(f"{base}/v1/lock?namespace=default&name=holder")
        assert status == 200
        token = json.loads(granted)["releaseToken"]
        answer: dict[str, tuple[int, str]] = {}
        waiter = threading.Thread(
            target=lambda: answer.update(
                waiter=get(f"{base}/v1/lock?namespace=default&name=waiter&wait=60", timeout=90)
            ),
            daemon=True,
        )
        waiter.start()
        deadline = time.monotonic() + 10
        while "waiter" not in get(f"{base}/status")[1] and time.monotonic() < deadline:
            time.sleep(0.05)  # a process's queue has no event to await from here
        flood: list[socket.socket] = []
        try:
            for _ in range(5_000):
                # Connected (the kernel's handshake, as lockd accepts), then never a byte sent.
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            deadline = time.monotonic() + 60
            while _shed(port).get("idleClosed", 0) < 4_700:
                assert time.monotonic() < deadline, _shed(port)
                time.sleep(0.1)
            started = time.monotonic()
            status, body = get(f"{base}/healthz", timeout=5)
            took = time.monotonic() - started
            assert status == 200 and took < 1.0, (status, body, took)  # generous: measured ~ms
            queue = json.loads(get(f"{base}/status")[1])["queue"]
            assert [(entry["name"], entry["position"]) for entry in queue] == [("waiter", 1)], queue
        finally:
            for sock in flood:
                sock.close()
        request = urllib.request.Request(
            f"{base}/v1/lock?namespace=default&name=holder",
            method="DELETE",
            headers={RELEASE_TOKEN_HEADER: token},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        waiter.join(timeout=30)
        assert answer["waiter"][0] == 200, answer
        assert "refused" not in _shed(port)
