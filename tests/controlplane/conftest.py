"""The `controlplane` marker. The session's real control plane (`control_plane`) is in tests/conftest.py,
shared with the end-to-end tests that run on it (`--control-plane real`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "controlplane: runs a real etcd/kube-apiserver/kube-controller-manager/kube-scheduler "
        "(needs `make control-plane`; skipped without the binaries)",
    )
