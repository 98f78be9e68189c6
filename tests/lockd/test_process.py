"""lockd as a process: startup errors name the bad policy field, and SIGTERM stops it within 5 s even
with long polls in flight."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import clean_env, free_port, get, wait_until_up


def test_bad_policy_file_is_a_startup_error_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "nodePolicies:\n- name: x\n  throttleConfig:\n    maxConcurrent: {perCore: -1}\n"
        "staggeringPolicies:\n- name: y\n  labelSelector: {a: b}\n  pacer: {exponential: {minInitial: 4, multiplier: 0.5, maxStagger: 16}}\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockd",
            "--standalone",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--policies",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(),
    )
    assert done.returncode == 2
    assert "nodePolicies[0].throttleConfig.maxConcurrent.perCore" in done.stderr
    assert (
        "staggeringPolicies[0].pacer.exponential.multiplier: must be greater than 1 (got 0.5)" in done.stderr
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        pytest.param(
            ["--standalone", "--listen", "nowhere"], {}, "--listen: expected HOST:PORT", id="listen"
        ),
        pytest.param(["--standalone", "--sample-interval", "often"], {}, "--sample-interval", id="duration"),
        pytest.param([], {"STAGGER_STANDALONE": "maybe"}, "STAGGER_STANDALONE", id="env-bool"),
        pytest.param([], {"KUBERNETES_SERVICE_HOST": ""}, "cannot reach the cluster", id="no-cluster"),
    ],
)
def test_bad_settings_are_one_clear_line(args: list[str], env: dict[str, str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lockd", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(**env),
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_sigterm_stops_within_five_seconds_with_long_polls_in_flight(tmp_path: Path) -> None:
    port = free_port()
    policies = tmp_path / "p.yaml"
    policies.write_text("nodePolicies:\n- name: one\n  throttleConfig: {maxConcurrent: {value: 1}}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockd", "--listen", f"127.0.0.1:{port}", "--policies", str(policies)],
        env=clean_env(STAGGER_STANDALONE="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_up(f"{base}/healthz", proc)
        assert get(f"{base}/v1/lock?namespace=default&name=holder")[0] == 200
        waiters = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import urllib.request as u\ntry: u.urlopen('{base}/v1/lock?namespace=default&name=w{i}&wait=60', timeout=90)\nexcept Exception: pass",
                ]
            )
            for i in range(3)
        ]
        deadline = time.monotonic() + 20
        while len(json.loads(get(f"{base}/status")[1])["queue"]) < 3:
            assert time.monotonic() < deadline, "waiters did not queue"
            time.sleep(0.05)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - started < 5.0
        for waiter in waiters:
            waiter.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
