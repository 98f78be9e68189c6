"""What the control-plane tests share: the skip when the binaries are absent, the release they were built
from, and a polling wait."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from sim.controlplane.launcher import DEFAULT_BIN_DIR, REPO_ROOT, missing_binaries

T = TypeVar("T")

MISSING = missing_binaries(DEFAULT_BIN_DIR)
requires_binaries = pytest.mark.skipif(
    bool(MISSING),
    reason=f"control-plane binaries missing in {DEFAULT_BIN_DIR} ({', '.join(MISSING)}): "
    "run `make control-plane` first (a long build)",
)


def built_version() -> str:
    """The k8s.io/kubernetes release testbed/go.mod pins (what the binaries report)."""
    text = (REPO_ROOT / "testbed" / "go.mod").read_text()
    found = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", text, re.MULTILINE)
    assert found, "testbed/go.mod requires no k8s.io/kubernetes"
    return found.group(1)


def wait_for(probe: Callable[[], T | None], *, within: float, what: str, poll: float = 0.25) -> T:
    """Polls `probe` until it returns something true (state that the real controllers bring about in
    their own time), and returns it."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        time.sleep(poll)
