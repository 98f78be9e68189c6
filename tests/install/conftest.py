"""The install tests run Helm against the real control plane (`make control-plane`); without the binaries
they skip, or fail when the run asked for the real control plane (`make test-real`)."""

from __future__ import annotations

import pytest

from tests.conftest import require_binaries


@pytest.fixture
def control_plane_binaries(request: pytest.FixtureRequest) -> None:
    """For a test that starts a control plane of its own (the wiring test: its apiserver has an egress
    proxy to reach the Services Helm installs)."""
    require_binaries(request.config)
