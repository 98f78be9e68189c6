"""The import contracts bite (`make layers` runs them on the tree as it is): in a copy of the tree, a pure
model module that imports aiohttp, a model module that imports the API client, and a lockd part that
imports its app each break the contract that names them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("stagger", "lockd", "initclient", "webhook", "sim", "tests")


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tree


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        pytest.param(
            "stagger/pacers.py", "import aiohttp", "stagger's pure model is functions of data", id="model-io"
        ),
        pytest.param(
            "stagger/throttles.py",
            "from stagger import kube",
            "stagger: the I/O shell on top",
            id="model-kube",
        ),
        pytest.param(
            "lockd/ledger.py", "from lockd import app", "lockd: the command, the wiring", id="lockd-up"
        ),
    ],
)
def test_an_import_against_the_layers_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    tree = _copy(tmp_path)
    path = tree / module
    text = path.read_text()
    anchor = "from __future__ import annotations\n"
    assert anchor in text
    path.write_text(text.replace(anchor, f"{anchor}\n{line}  # noqa\n", 1))
    result = _lint_imports(tree)
    assert result.returncode != 0, result.stdout
    # The report lists each contract (its name wrapped over lines) followed by KEPT or BROKEN.
    report = " ".join(result.stdout.split("Contracts\n---------")[-1].split())
    verdicts = re.findall(r"(.+?) (KEPT|BROKEN)", report)
    assert [verdict for name, verdict in verdicts if contract in name] == ["BROKEN"], result.stdout
