"""Fixtures of this folder: the serving certificates of the controller process (tests/webhook/process.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.webhook.process import Certs


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    """A CA and the pair it issued for 127.0.0.1, laid out as a mounted Secret under tmp_path/tls."""
    return Certs.write(tmp_path / "tls")
