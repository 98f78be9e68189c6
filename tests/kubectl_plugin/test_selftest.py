"""`kubectl stagger selftest` (what the chart's `helm test` runs), as the real console script against a real
controller over TLS and a real lockd: ok when both answer as their callers reach them; exit 6 and a FAILED
line naming the part when the webhook's certificate is not from the CA given, or nothing listens where
lockd should; a usage error when there is nothing to check."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.processes import clean_env, free_port, running_lockd
from tests.webhook.process import Certs, running_webhook, tls_args

pytestmark = pytest.mark.slow

SCRIPT = shutil.which("kubectl-stagger", path=str(Path(sys.executable).parent))


@pytest.fixture
def lockd_url() -> Iterator[str]:
    port = free_port()
    with running_lockd(port=port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs.write(tmp_path / "tls")


def selftest(*args: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "kubectl-stagger is not installed in this venv (pip install -e .)"
    return subprocess.run(
        [SCRIPT, "selftest", *args], capture_output=True, text=True, timeout=60, env=clean_env()
    )


def test_both_answer(certs: Certs, lockd_url: str, tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.crt"
    certs.ca.cert_pem.write_to_path(str(ca_file))
    with running_webhook(*tls_args(certs)) as hook:
        done = selftest("--webhook-url", hook.url, "--ca-file", str(ca_file), "--lockd-url", lockd_url)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("ok  ") for line in lines), lines
    assert "allowed a pod without the enable label" in lines[0]
    assert "/healthz 200, /readyz 200" in lines[1]


def test_a_webhook_certificate_from_another_ca_fails(certs: Certs, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    trustme.CA().cert_pem.write_to_path(str(other))
    with running_webhook(*tls_args(certs)) as hook:
        done = selftest("--webhook-url", hook.url, "--ca-file", str(other))
    assert done.returncode == 6, done.stdout + done.stderr
    assert done.stdout.startswith(f"FAILED  webhook {hook.url}: no answer:"), done.stdout
    assert "certificate" in done.stdout.lower()


def test_no_lockd_where_it_should_be_fails() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = selftest("--lockd-url", url, "--request-timeout", "5")
    assert done.returncode == 6
    assert done.stdout.startswith(f"FAILED  lockd {url}: /healthz: no answer"), done.stdout


def test_nothing_to_check_is_a_usage_error() -> None:
    done = selftest()
    assert done.returncode == 2
    assert "give --webhook-url, --lockd-url or both" in done.stderr and "Traceback" not in done.stderr
