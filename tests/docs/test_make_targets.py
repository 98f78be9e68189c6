"""The make targets README's Development table lists exist and are phony, and the seeds' release targets
(issue 25) do what it says, checked by running make as a process: `docker-push` without REGISTRY fails at
once, even under `make -n`, with the message saying what to set, and builds nothing; with REGISTRY it builds
the image (buildah's `make image`, or Docker's build) and pushes it as REGISTRY/name:tag; `binaries` builds the
wheel, the sdist and the krew plugin into DIST (a real build: about 30 s, pip reaching PyPI, so `make test-real`
runs it and `make test` skips it: tests/conftest.py selects it by its `release_build` fixture)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from stagger.version import VERSION

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent

pytestmark = pytest.mark.slow


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # `-o VENV/.installed`: this venv runs the test, so it is installed; make must not reinstall it here.
    return subprocess.run(
        ["make", "--no-print-directory", f"VENV={VENV}", "-o", f"{VENV}/.installed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_target_in_the_readmes_table_is_a_phony_target() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Development") :]
    listed = set(re.findall(r"`make ([a-z][-a-z]*)", table))
    makefile = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.*)$", makefile, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    assert {"binaries", "docker-build", "docker-push"} <= listed
    assert listed <= phony
    for target in listed:
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), target


def test_docker_push_without_registry_fails_at_once_saying_what_to_set() -> None:
    for args in (["-n", "docker-push"], ["docker-push", "IMAGE=localhost/stagger:0.1.0"]):
        done = make(*args)
        assert done.returncode == 2 and done.stdout == ""
        assert "docker-push: REGISTRY is not set: say where to push" in done.stderr
        assert "make docker-push REGISTRY=registry.example.com/team" in done.stderr


def test_docker_push_builds_then_pushes_as_registry_name_tag() -> None:
    buildah = make("-n", "docker-push", "REGISTRY=registry.example.com/team", "CONTAINER_TOOL=buildah")
    assert buildah.returncode == 0, buildah.stderr
    assert buildah.stdout.splitlines()[-2:] == [
        "IMAGE=localhost/stagger:dev bash docker/build.sh image",  # `make image`'s own recipe
        "buildah push localhost/stagger:dev docker://registry.example.com/team/stagger:dev",
    ]
    docker = make(
        "-n", "docker-push", "REGISTRY=r.example", "CONTAINER_TOOL=docker", "IMAGE=localhost/stagger:1.2"
    )
    assert docker.returncode == 0, docker.stderr
    assert docker.stdout.splitlines()[-2:] == [
        "docker build -f docker/Dockerfile -t localhost/stagger:1.2 .",
        "docker tag localhost/stagger:1.2 r.example/stagger:1.2 && docker push r.example/stagger:1.2",
    ]


def test_docker_build_uses_buildah_where_no_docker_engine_answers() -> None:
    engine = (
        subprocess.run(["docker", "info"], capture_output=True, check=False)
        if shutil.which("docker")
        else None
    )
    done = make("-n", "docker-build")
    assert done.returncode == 0, done.stderr
    expected = (
        "docker build" if engine is not None and engine.returncode == 0 else "bash docker/build.sh image"
    )
    assert expected in done.stdout


@pytest.fixture
def release_build(request: pytest.FixtureRequest) -> None:
    """A release build: half a minute of pip and PyPI, and it installs pex and build into the venv, which must
    not happen under `make test`'s parallel workers; `make test-real` runs it, one test at a time."""
    if request.config.getoption("--control-plane") != "real":
        pytest.skip("a release build (pip, PyPI, about 30 s): `make test-real` runs it")


@pytest.mark.usefixtures("release_build")
def test_binaries_builds_the_wheel_the_sdist_and_the_krew_plugin(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    done = make("binaries", f"DIST={dist}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    built = sorted(path.name for path in dist.iterdir())
    assert built == sorted(
        [
            f"stagger-{VERSION}-py3-none-any.whl",
            f"stagger-{VERSION}.tar.gz",
            "kubectl-stagger",
            "kubectl-stagger.tar.gz",
            "stagger.yaml",
        ]
    )
    with zipfile.ZipFile(dist / f"stagger-{VERSION}-py3-none-any.whl") as wheel:
        entry_points = wheel.read(f"stagger-{VERSION}.dist-info/entry_points.txt").decode()
        assert "kubectl-stagger = kubectl_stagger.__main__:run" in entry_points
        assert "kubectl_stagger/convert/run.py" in wheel.namelist()
    with tarfile.open(dist / f"stagger-{VERSION}.tar.gz") as sdist:
        assert f"stagger-{VERSION}/pyproject.toml" in sdist.getnames()
    version = subprocess.run(
        [str(dist / "kubectl-stagger"), "--help"], capture_output=True, text=True, check=False
    )
    assert version.returncode == 0 and "convert" in version.stdout
