"""Running `kubectl stagger convert` as kubectl runs it: the venv's `kubectl-stagger` console script, a real
process; its stdout loaded by stagger's own loader (`stagger.policy.parse_policy_text`), its stderr split into
the lines it says it could not carry over and its notes. The peers' own example texts are in data/, each
with a first comment line naming its repository, path and commit."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from stagger import policy

ROOT = Path(__file__).parents[2]
PLUGIN = Path(sys.executable).with_name("kubectl-stagger")
DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def not_carried(self) -> list[str]:
        prefix = "not carried over: "
        return [line.removeprefix(prefix) for line in self.stderr.splitlines() if line.startswith(prefix)]

    @property
    def notes(self) -> list[str]:
        return [line.removeprefix("note: ") for line in self.stderr.splitlines() if line.startswith("note: ")]

    def loaded(self) -> policy.PolicyFile:
        """stdout as lockd and the controller would load it."""
        assert self.code == 0, self.stderr
        return policy.parse_policy_text(self.stdout, source="<convert's stdout>")


def convert(*args: str | Path, stdin: str | None = None) -> Run:
    done = subprocess.run(
        [str(PLUGIN), "convert", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    return Run(code=done.returncode, stdout=done.stdout, stderr=done.stderr)


def data(name: str) -> Path:
    return DATA / name


def verbatim(name: str) -> str:
    """A data file's peer text: the file without its first line (the comment citing where it is from)."""
    comment, _, text = data(name).read_text().partition("\n")
    assert comment.startswith("# ") and " at commit " in comment
    return text
