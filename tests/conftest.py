"""Marks every test by what it costs, so that `make test-fast` (`pytest -m "not slow and not e2e"`) runs
only the pure ones, in seconds:

* `e2e`: a whole cluster (simulated or real) or several processes working together; also `slow`.
* `slow`: starts a server (the API emulator, lockd over HTTP, a webhook) or a process.

The marks follow from where a test is and what it uses, so a new test is marked without anyone
remembering to: the folders below, the fixtures that start servers, and test modules whose code starts
processes or servers (`subprocess`, `tests.processes`, aiohttp's test server, the emulator). A module
that mixes pure and costly tests without those signs marks its costly ones itself (`pytestmark`, or
`@pytest.mark.slow` on the test).

`--control-plane {emulator,real,both}` picks the API server of the end-to-end tests that take the `backend`
fixture (tests/backends.py; the session's real control plane, a namespace per test) or `control_plane_kind`
(tests that start their own, as `python -m sim herd --control-plane real` does): the emulator (default),
the real control plane built by `make control-plane`, or each in turn. With `real`, every other test is
deselected (they test the emulator itself, or need no API server at all), except the real control
plane's own tests (those taking `control_plane`: tests/controlplane, tests/conformance) and the Helm
install tests (tests/install). docs/testbed.md
says which tests run where.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sim.cluster.backend import BACKEND_KINDS, ApiBackend
from sim.controlplane.launcher import ControlPlane, MissingBinaries, missing_binaries
from tests.backends import Backend, open_backend

TESTS = Path(__file__).parent
CHOICES = (*BACKEND_KINDS, "both")

E2E_FOLDERS = frozenset({"lockd_sim", "integration", "controlplane", "install", "nodes"})
"""Every test here runs a whole cluster or several processes."""

SLOW_FOLDERS = frozenset({"lockd_cluster", "chart"})
"""Every test here starts a server (lockd against the emulator) or a process (helm)."""

SERVER_FIXTURES = frozenset(
    {
        "server",  # tests/emulator: the API emulator in a thread
        "api",  # the API emulator (tests/cluster, tests/kube, tests/lockd_cluster, tests/lockd_sim)
        "start_lockd",  # lockd's app over HTTP
        "control_plane",  # the real kube-apiserver and friends
        "cluster_control_plane",  # another, for the simulated clusters of `backend`
        "backend",  # the emulator or the real control plane (tests/backends.py)
        "control_plane_kind",  # a test that starts its own emulator or real control plane
        "control_plane_binaries",  # tests/install: a test that starts its own real control plane
        "aiohttp_client",
        "aiohttp_server",
        "aiohttp_raw_server",
    }
)
"""A test using one of these fixtures, directly or through another fixture, is slow."""

E2E_FIXTURES = frozenset({"backend", "control_plane_kind"})
"""A test using one of these runs a whole (simulated) cluster on an API server: e2e."""

KIND_FIXTURES = ("backend_kind", "control_plane_kind")
"""Parametrized with the kinds --control-plane picks."""

REAL_FIXTURES = frozenset(
    {
        "backend",
        "control_plane_kind",
        "control_plane",
        "control_plane_binaries",
        "promtool",
        "krew",
        "release_build",
    }
)
"""With `--control-plane real`, only tests using one of these run (`promtool`, `krew`: the chart's alert tests
and the krew plugin's, which need tools built from Go like the control plane: tests/chart/test_monitoring.py,
tests/kubectl_plugin/test_krew.py; `release_build`: `make binaries`, tests/docs/test_make_targets.py)."""

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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--control-plane",
        choices=CHOICES,
        default="emulator",
        help="the API server of the end-to-end tests that take the `backend` fixture: sim's emulator "
        "(default), the real control plane from `make control-plane`, or both in turn; with `real`, "
        "the tests that run on the emulator only are skipped",
    )
    parser.addoption(
        "--real-nodes",
        action="store_true",
        help="run the tests on real nodes (tests/nodes: root, `make control-plane node-tools image`) and "
        "only those; without it they are deselected (`make test-nodes`)",
    )


def _kinds(config: pytest.Config) -> list[str]:
    chosen = str(config.getoption("--control-plane"))
    return list(BACKEND_KINDS) if chosen == "both" else [chosen]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for name in KIND_FIXTURES:
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, _kinds(metafunc.config), indirect=True)


def _runs_on_real(item: pytest.Item) -> bool:
    """Runs on the real control plane: an end-to-end test on the chosen API server, a test of the control
    plane itself (tests/controlplane), or the real half of a conformance test (tests/conformance)."""
    if not REAL_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return True
    if item.get_closest_marker("controlplane") is not None:
        return True
    callspec = getattr(item, "callspec", None)
    return (
        item.get_closest_marker("conformance") is not None
        and callspec is not None
        and callspec.params.get("target") == "real"
    )


def _on_real_nodes(item: pytest.Item) -> bool:
    return item.path.is_relative_to(TESTS / "nodes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tests/nodes run only when asked for (`make test-nodes`), and then alone: they need root and a real
    # cluster of their own, and the rest has nothing to run there.
    real_nodes = bool(config.getoption("--real-nodes"))
    kept = [item for item in items if _on_real_nodes(item) == real_nodes]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    if config.getoption("--control-plane") == "real":
        # The rest test the emulator itself, or need no API server: they have nothing to run on a real one.
        kept = [item for item in items if _runs_on_real(item)]
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item not in kept])
            items[:] = kept
    costly_modules: dict[Path, bool] = {}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder in E2E_FOLDERS or not E2E_FIXTURES.isdisjoint(fixtures):
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


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """One real control plane for the whole session (about 5 s to start); its data dir (certificates,
    logs/) stays under pytest's temporary root. Without the binaries: skipped, or failed when the run
    asked for the real control plane (`--control-plane real` or `both`)."""
    with started_control_plane(
        config=request.config, data_dir=tmp_path_factory.mktemp("controlplane")
    ) as plane:
        yield plane


@contextlib.contextmanager
def started_control_plane(*, config: pytest.Config, data_dir: Path) -> Iterator[ControlPlane]:
    """A real control plane keeping its data in `data_dir`, stopped at the end (see require_binaries)."""
    require_binaries(config)
    plane = ControlPlane(data_dir=data_dir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def require_binaries(config: pytest.Config) -> None:
    missing = missing_binaries()
    if missing:
        message = (
            f"{MissingBinaries.__name__}: {', '.join(missing)} not built: run `make control-plane` first"
        )
        if config.getoption("--control-plane") != "emulator":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture
def control_plane_kind(request: pytest.FixtureRequest) -> str:
    """`emulator` or `real` (parametrized from --control-plane), for a test that starts its own API server
    (`python -m sim herd` and `cluster`, `--control-plane real` there): a fresh emulator, or a fresh real
    control plane (needs `make control-plane`; not the session's `control_plane`)."""
    kind = str(request.param)
    if kind == "real":
        require_binaries(request.config)
    return kind


@pytest.fixture(scope="session")
def cluster_control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """The real control plane the `backend` tests run their simulated clusters on: one for the session,
    apart from `control_plane`. The tests there (tests/controlplane, tests/conformance) leave pods and
    Jobs behind that the real scheduler would bind to the next simulated cluster's nodes, and a node of
    their own that it would bind the simulated cluster's pods to; here every test cleans its namespace,
    and a simulated cluster removes its nodes when it stops."""
    data_dir = tmp_path_factory.mktemp("cluster-controlplane")
    with started_control_plane(config=request.config, data_dir=data_dir) as plane:
        yield plane


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> str:
    """`emulator` or `real` (parametrized from --control-plane); with `real`, the session's control plane
    for simulated clusters is started here, outside any event loop."""
    kind = str(request.param)
    if kind == "real":
        request.getfixturevalue("cluster_control_plane")
    return kind


@pytest.fixture
async def backend(request: pytest.FixtureRequest, backend_kind: str) -> AsyncIterator[Backend]:
    """The test's API server (see tests/backends.py) and a namespace of its own on it."""
    if backend_kind == "real":
        plane: ControlPlane = request.getfixturevalue("cluster_control_plane")
        plane.check()
        async with open_backend(ApiBackend.real(plane.kubeconfig)) as backend:
            yield backend
        return
    from sim.emulator.server import ApiServer, ApiServerSettings

    async with (
        ApiServer(ApiServerSettings(port=0)) as server,
        open_backend(ApiBackend(server.url), emulator=server) as backend,
    ):
        yield backend
