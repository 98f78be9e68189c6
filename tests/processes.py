"""Helpers for tests that run stagger's parts as real processes on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without stagger's own variables (they would reconfigure the process under test)."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("STAGGER_", "POD_", "KUBECONFIG"))}
    return {**kept, **extra}


def get(url: str, *, timeout: float = 30.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_until_up(url: str, proc: subprocess.Popen[str], *, within: float = 20.0) -> None:
    """Polls `url` until it answers 200 (a started process has no event to await); fails if the process exits."""
    deadline = time.monotonic() + within
    while True:
        try:
            if get(url, timeout=1)[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            output = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"process exited {proc.returncode} before {url} answered: {output}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {within:g}s")
        time.sleep(0.05)


@contextlib.contextmanager
def running_lockd(*args: str, port: int) -> Iterator[subprocess.Popen[str]]:
    """A standalone `python -m lockd` on 127.0.0.1:`port` with `args`, once it answers /healthz; stopped
    with SIGTERM (killed after 15 s) at the end. Its stderr is the caller's to read."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}", *args],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}/healthz", proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
