"""`kubectl stagger` as a krew plugin (issue 24): `make plugin`'s script (krew/build.py) builds the archive
and renders krew/stagger.yaml for it; krew's own `validate-krew-manifest` (the check krew-index runs)
accepts the manifest and installs the plugin from its URI, here a loopback HTTP server, checking the
archive's sha256 and its LICENSE; and the plugin krew installed runs with nothing of this venv: it checks
a policy file as lockd does and talks to an API server (the emulator over HTTP) through its own aiohttp.
krew and validate-krew-manifest come from `make tools` (sim/gotools.sh), so `make test-real` runs these."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sim.emulator.server import ApiServerSettings, ApiServerThread
from stagger.version import VERSION
from tests.tools import go_tool

ROOT = Path(__file__).parents[2]
CHART_POLICIES = ROOT / "charts" / "stagger" / "configs" / "_policies.yaml"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Built:
    out: Path
    url: str

    @property
    def manifest(self) -> Path:
        return self.out / "stagger.yaml"

    @property
    def archive(self) -> Path:
        return self.out / "kubectl-stagger.tar.gz"


@pytest.fixture
def krew(request: pytest.FixtureRequest) -> Path:
    """krew and validate-krew-manifest (and kubectl, which runs `kubectl krew`), all in .tools/bin."""
    go_tool("validate-krew-manifest", request)
    return go_tool("krew", request).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The archive and manifest, built once, served the way a release would serve them: over HTTP."""
    out = tmp_path_factory.mktemp("dist")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/kubectl-stagger.tar.gz"
        subprocess.run(
            [sys.executable, str(ROOT / "krew" / "build.py"), "--out", str(out), "--url", url],
            check=True,
            timeout=600,
        )
        yield Built(out=out, url=url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def krew_env(krew: Path, root: Path) -> dict[str, str]:
    # Nothing of this venv on the PATH: the installed plugin must bring all it needs but python3.
    path = os.pathsep.join([str(root / "bin"), str(krew), "/usr/local/bin", "/usr/bin", "/bin"])
    return {"PATH": path, "HOME": str(root), "KREW_ROOT": str(root)}


def test_the_manifest_names_the_archive_it_was_built_with(krew: Path, built: Built) -> None:
    [platform] = yaml.safe_load(built.manifest.read_text())["spec"]["platforms"]
    assert platform["uri"] == built.url
    assert platform["sha256"] == hashlib.sha256(built.archive.read_bytes()).hexdigest()
    assert yaml.safe_load(built.manifest.read_text())["spec"]["version"] == f"v{VERSION}"


def test_krews_own_check_accepts_the_manifest_and_installs_it(
    krew: Path, built: Built, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(krew / "validate-krew-manifest"), "-manifest", str(built.manifest)],
        env=krew_env(krew, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "all 1 spec.platforms installed fine" in done.stderr


def test_a_changed_archive_is_refused(krew: Path, built: Built, tmp_path: Path) -> None:
    # The sha256 is what stands between a user and a swapped archive: krew must refuse one that differs.
    swapped = tmp_path / "swapped.tar.gz"
    swapped.write_bytes(built.archive.read_bytes() + b"\0")
    done = subprocess.run(
        ["kubectl", "krew", "install", f"--manifest={built.manifest}", f"--archive={swapped}"],
        env=krew_env(krew, tmp_path / "krew"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0
    assert "checksum does not match" in done.stderr, done.stderr


def test_the_installed_plugin_runs_without_this_venv(krew: Path, built: Built, tmp_path: Path) -> None:
    env = krew_env(krew, tmp_path / "krew")
    install = ["kubectl", "krew", "install", f"--manifest={built.manifest}", f"--archive={built.archive}"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr

    def kubectl_stagger(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "stagger", *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    done = kubectl_stagger("check-policy", str(CHART_POLICIES))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text("nodePolicies:\n- name: a\n  throttleConfig:\n    maxConcurent: {value: 2}\n")
    done = kubectl_stagger("check-policy", str(typo))
    assert done.returncode == 1
    assert "maxConcurent: unknown key; did you mean 'maxConcurrent'?" in done.stderr

    with ApiServerThread(ApiServerSettings(port=0)) as api:
        kubeconfig = tmp_path / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        done = kubectl_stagger("status", "--kubeconfig", str(kubeconfig))
    # An API server with no stagger on it: the plugin reached it and listed pods (exit 4, not 3).
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("error: no stagger controller or lockd pods in namespace"), done.stderr
