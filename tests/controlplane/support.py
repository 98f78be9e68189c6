"""What the control-plane tests share: the skip when the binaries are absent, the release they were built
from, and a polling wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from sim.controlplane.launcher import DEFAULT_BIN_DIR, KUBE_BUILD, missing_binaries

T = TypeVar("T")

MISSING = missing_binaries(DEFAULT_BIN_DIR)
requires_binaries = pytest.mark.skipif(
    bool(MISSING),
    reason=f"control-plane binaries missing in {DEFAULT_BIN_DIR} ({', '.join(MISSING)}): "
    "run `make control-plane` first (a long build)",
)


def built_version() -> str:
    """The k8s.io/kubernetes release the chosen build's module file pins (testbed/go.mod, or
    testbed/go.1.34.mod under `make test-real KUBE_VERSION=1.34`): what the binaries report."""
    return KUBE_BUILD.version


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
