"""`python -m sim apiserver --listen HOST:PORT --kubeconfig FILE` as a process: it announces its URL, writes
a kubeconfig the official client loads, serves, and exits 0 on SIGTERM; bad flags exit 2."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
from kubernetes import client, config


def test_command_line_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sim",
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("apiserver listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert requests.get(f"{url}/version", timeout=10).json()["major"] == "1"
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        with client.ApiClient(configuration) as api:
            core: Any = client.CoreV1Api(api)
            names = [ns.metadata.name for ns in core.list_namespace().items]
        assert "default" in names and "kube-system" in names
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_bad_listen_address_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sim", "apiserver", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "expected HOST:PORT" in result.stderr
