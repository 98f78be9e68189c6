"""Conformance: the same HTTP requests against both API servers, expecting the same answers.

Each test takes `kube`, a `Conn` parametrized over two backends:

* `emulator`: `sim.emulator` in a background thread (one for the session), as tests/emulator starts it;
* `real`: the real etcd + kube-apiserver + kube-controller-manager + kube-scheduler of
  `sim.controlplane` (one `ControlPlane` for the session), skipped when `make control-plane` has not
  built the binaries. `CONFORMANCE_KUBECONFIG=PATH` points the real backend at a cluster that is already
  running instead (it must grant everything, as the control plane's admin.conf does).

Every test gets a fresh namespace on its backend (`kube.ns`). The expected answers are written from the
real server's code (cited per test) and checked on the real server too, so a wrong expectation fails on
`real` rather than passing on both. Where the real server is eventually consistent (its controllers),
tests wait with `kube.eventually`.
"""

from __future__ import annotations

import os
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from sim.controlplane.launcher import DEFAULT_BIN_DIR, ControlPlane, missing_binaries
from sim.emulator.server import ApiServerThread
from stagger import kubeversions
from stagger.kube import kubeconfig_config
from tests.conformance.support import Conn

MISSING = missing_binaries(DEFAULT_BIN_DIR)
EXISTING = os.environ.get("CONFORMANCE_KUBECONFIG", "")
REAL_SKIP_REASON = (
    f"control-plane binaries missing in {DEFAULT_BIN_DIR} ({', '.join(MISSING)}): run `make control-plane` "
    "first (a long build), or set CONFORMANCE_KUBECONFIG to a running cluster's admin kubeconfig"
)

BACKENDS = [
    pytest.param("emulator", marks=[pytest.mark.conformance, pytest.mark.slow], id="emulator"),
    pytest.param(
        "real",
        marks=[
            pytest.mark.conformance,
            pytest.mark.e2e,
            pytest.mark.slow,
            pytest.mark.skipif(bool(MISSING) and not EXISTING, reason=REAL_SKIP_REASON),
        ],
        id="real",
    ),
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "conformance: runs the same requests against the API emulator and the real kube-apiserver "
        "(the real one needs `make control-plane`; skipped without the binaries)",
    )


@pytest.fixture(scope="session")
def emulator_backend() -> Iterator[ApiServerThread]:
    with ApiServerThread() as server:
        yield server


@pytest.fixture(scope="session")
def real_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The admin kubeconfig of a real control plane: CONFORMANCE_KUBECONFIG's, else the session's shared
    `control_plane` when a conftest above provides one, else one started here."""
    if EXISTING:
        yield Path(EXISTING)
        return
    try:
        shared: ControlPlane = request.getfixturevalue("control_plane")
    except pytest.FixtureLookupError:
        pass
    else:
        yield shared.kubeconfig
        return
    if MISSING:
        pytest.skip(REAL_SKIP_REASON)
    plane = ControlPlane(data_dir=tmp_path_factory.mktemp("conformance-controlplane"))
    plane.start()
    try:
        yield plane.kubeconfig
    finally:
        plane.stop()


@dataclass(frozen=True)
class Target:
    backend: str
    base: str
    ssl: ssl.SSLContext | bool


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest) -> Target:
    """Where the test's backend is; resolved outside the event loop (starting a control plane runs one)."""
    if request.param == "emulator":
        server: ApiServerThread = request.getfixturevalue("emulator_backend")
        return Target("emulator", server.url, False)
    config = kubeconfig_config(request.getfixturevalue("real_backend"))
    return Target("real", config.server, config.ssl_context())


@pytest.fixture
async def kube(target: Target) -> AsyncIterator[Conn]:
    """A connection to one backend, with a fresh namespace (left in place: each backend lives for the
    session only)."""
    namespace = f"conf-{uuid.uuid4().hex[:10]}"
    async with aiohttp.ClientSession() as session:
        conn = Conn(backend=target.backend, session=session, base=target.base, ssl=target.ssl, ns=namespace)
        created = await conn.post("/api/v1/namespaces", {"metadata": {"name": namespace}})
        assert created.status == 201, created.body
        if conn.real:
            version = await conn.get("/version")
            assert version.status == 200, version.body
            minor = kubeversions.parse_version(version.body)  # "37", or "37+" from some builds
            assert minor is not None, version.body
            conn.minor = minor[1]
            # The service account controller adds `default` soon after; pods are refused until then.
            await conn.eventually(
                lambda: conn.ok(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
                what="the namespace's default service account",
            )
        yield conn
