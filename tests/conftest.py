"""Marks every test by what it costs, so that `make test-fast` (`pytest -m "not slow and not e2e"`) runs
only the pure ones, in seconds:

* `e2e`: a whole cluster (simulated or real) or several processes working together; also `slow`.
* `slow`: starts a server (the API emulator, lockd over HTTP, a webhook) or a process.

The marks follow from where a test is and what it uses, so a new test is marked without anyone
remembering to: the folders below, the fixtures that start servers, and test modules whose code starts
processes or servers (`subprocess`, `tests.processes`, aiohttp's test server, the emulator). A module
that mixes pure and costly tests without those signs marks its costly ones itself (`pytestmark`, or
`@pytest.mark.slow` on the test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent

E2E_FOLDERS = frozenset({"lockd_sim", "integration", "controlplane"})
"""Every test here runs a whole cluster or several processes."""

SLOW_FOLDERS = frozenset({"lockd_cluster", "chart"})
"""Every test here starts a server (lockd against the emulator) or a process (helm)."""

SERVER_FIXTURES = frozenset(
    {
        "server",  # tests/emulator: the API emulator in a thread
        "api",  # the API emulator (tests/cluster, tests/kube, tests/lockd_cluster, tests/lockd_sim)
        "start_lockd",  # lockd's app over HTTP
        "control_plane",  # the real kube-apiserver and friends
        "aiohttp_client",
        "aiohttp_server",
        "aiohttp_raw_server",
    }
)
"""A test using one of these fixtures, directly or through another fixture, is slow."""

COSTLY_CODE = (
    "import subprocess",
    "create_subprocess_exec",
    "from tests.processes import",
    "from tests.tools import",
    "from aiohttp.test_utils import",
    "from sim.emulator.server import",
    "from sim.controlplane",
)
"""A test module whose code has one of these runs processes or servers: its tests are slow."""


def _costly(path: Path) -> bool:
    try:
        code = path.read_text()
    except OSError:
        return False
    return any(needle in code for needle in COSTLY_CODE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    costly_modules: dict[Path, bool] = {}
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder in E2E_FOLDERS:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.slow)
            continue
        if item.path not in costly_modules:
            costly_modules[item.path] = _costly(item.path)
        if (
            folder in SLOW_FOLDERS
            or costly_modules[item.path]
            or not SERVER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.slow)
