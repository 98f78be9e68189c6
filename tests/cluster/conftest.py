"""Fixtures: a fresh API emulator per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest


@pytest.fixture
async def api() -> AsyncIterator[Any]:
    from sim.emulator.server import ApiServer, ApiServerSettings

    async with ApiServer(ApiServerSettings(port=0)) as server:
        yield server
