"""The real init client against a real lockd, both as processes: 20 clients on a node limited to 3 never
see more than 3 holders at once and all exit 0; with no lockd at all the client exits 0 after maxWait."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import clean_env, free_port, wait_until_up


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def lockd_url(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    port = free_port()
    policies = tmp_path / "policies.yaml"
    # Slots end by holdTimeout here unless released: standalone lockd does not see pods become Ready.
    hold = getattr(request, "param", "400ms")
    policies.write_text(
        f"nodePolicies:\n- name: three\n  holdTimeout: {hold}\n  throttleConfig: {{maxConcurrent: {{value: 3}}}}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockd",
            "--standalone",
            "--listen",
            f"127.0.0.1:{port}",
            "--policies",
            str(policies),
        ],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_up(f"{url}/healthz", proc)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_twenty_clients_never_more_than_three_holders(lockd_url: str) -> None:
    clients = [
        subprocess.Popen(
            [sys.executable, "-m", "initclient"],
            env=clean_env(
                STAGGER_LOCKD_URL=lockd_url,
                POD_NAMESPACE="herd",
                POD_NAME=f"pod-{i}",
                POD_UID=f"uid-{i}",
                STAGGER_MAX_WAIT="60s",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    most_holders = 0
    deadline = time.monotonic() + 90
    while any(client.poll() is None for client in clients):
        status = get_json(f"{lockd_url}/status")
        most_holders = max(most_holders, len(status["slots"]))
        assert len(status["slots"]) <= 3, status["slots"]
        assert time.monotonic() < deadline, "clients did not finish"
        time.sleep(0.05)
    results = [(client.returncode, client.communicate()[1]) for client in clients]
    assert all(code == 0 for code, _ in results), results
    assert all("granted start-up slot" in err for _, err in results), results
    assert most_holders >= 2  # the limit was actually exercised, not trivially met
    assert get_json(f"{lockd_url}/status")["counters"]["granted"] == 20


def test_client_without_lockd_fails_open_after_max_wait() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "initclient"],
        env=clean_env(
            STAGGER_LOCKD_URL=f"http://127.0.0.1:{free_port()}",
            POD_NAMESPACE="herd",
            POD_NAME="lonely",
            STAGGER_MAX_WAIT="2s",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "proceeding without a start-up slot" in done.stderr
    assert 1.5 <= time.monotonic() - started < 30


@pytest.mark.parametrize("lockd_url", ["5m"], indirect=True)
def test_the_release_token_file_lets_the_pod_give_its_slot_back(lockd_url: str, tmp_path: Path) -> None:
    token_file = tmp_path / "shared" / "release-token"
    token_file.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "initclient"],
        env=clean_env(
            STAGGER_LOCKD_URL=lockd_url,
            POD_NAMESPACE="default",
            POD_NAME="app-0",
            STAGGER_RELEASE_TOKEN_FILE=str(token_file),
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    token = token_file.read_text()
    assert len(token) == 32 and token not in done.stderr, "the token is written, never logged"
    assert token_file.stat().st_mode & 0o777 == 0o600
    request = urllib.request.Request(
        f"{lockd_url}/v1/lock?namespace=default&name=app-0",
        method="DELETE",
        headers={"X-Stagger-Release-Token": token},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["released"] is True
