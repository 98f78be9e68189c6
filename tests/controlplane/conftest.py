"""The `controlplane` marker and one real control plane for the whole session (`control_plane`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.controlplane.launcher import ControlPlane
from tests.controlplane.support import MISSING


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "controlplane: runs a real etcd/kube-apiserver/kube-controller-manager/kube-scheduler "
        "(needs `make control-plane`; skipped without the binaries)",
    )


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Started once; its data dir (certificates, logs/) stays under pytest's temporary root."""
    if MISSING:
        pytest.skip(f"control-plane binaries missing ({', '.join(MISSING)}): run `make control-plane` first")
    plane = ControlPlane(data_dir=tmp_path_factory.mktemp("controlplane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
