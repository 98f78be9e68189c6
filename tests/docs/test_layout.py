"""docs/design.md's "Where things are" is a tree of the repository, one line a module, and it matches the
code: every package and module of the product (`stagger`, `lockd`, `initclient`, `webhook`,
`kubectl_stagger`) and every top-level package and module of the test bed (`sim`) is in it, at its place,
and everything it names exists. A failure names each path missing from the tree and each path named in
the tree that is not on disk, so the tree can be fixed from the message alone.

The tree is the first fenced block of that section: an entry is a line's first word, indented two spaces
a level under the folder (a word ending in `/`) it is in; what follows two or more spaces is what it holds.
`__init__.py` files are not listed (their package is), and nor is anything under `__pycache__`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
SECTION = "## Where things are"
# Listed whole: every package and module, at every depth.
PRODUCT = ("stagger", "lockd", "initclient", "webhook", "kubectl_stagger")
# Listed at their top level: the packages and modules directly in them.
TOP_LEVEL = ("sim",)
INDENT = 2

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


class TreeError(ValueError):
    """The tree's text is not a tree (an indent that is not a level under a folder)."""


def tree_block(markdown: str) -> list[str]:
    """The lines of the first fenced block after the section's heading."""
    lines = markdown.splitlines()
    try:
        start = lines.index(SECTION)
    except ValueError:
        raise TreeError(f"design.md has no {SECTION!r} section") from None
    block: list[str] | None = None
    for line in lines[start + 1 :]:
        if block is None:
            if line.startswith("## "):
                break
            if _FENCE.match(line):
                block = []
            continue
        if _FENCE.match(line):
            return block
        block.append(line)
    raise TreeError(f"no fenced tree block under {SECTION!r}")


def tree_paths(lines: Iterable[str]) -> list[str]:
    """Each entry's path from the root ("lockd/", "lockd/app.py"), in the order written."""
    folders: list[str] = []  # the folders the current line is in, outermost first
    paths: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent % INDENT or indent // INDENT > len(folders):
            raise TreeError(f"tree line {number}: indent {indent} is not a level under a folder: {line!r}")
        del folders[indent // INDENT :]
        name = line.split()[0]
        path = "".join(folders) + name
        paths.append(path)
        if name.endswith("/"):
            folders.append(name)
    return paths


def _package_entries(folder: Path, *, whole: bool) -> set[str]:
    entries: set[str] = set()
    for path in sorted(folder.iterdir()):
        if path.name == "__pycache__" or path.name.startswith("."):
            continue
        if path.is_dir() and any(path.rglob("*.py")):
            entries.add(path.relative_to(ROOT).as_posix() + "/")
            if whole:
                entries |= _package_entries(path, whole=True)
        elif path.suffix == ".py" and path.name != "__init__.py":
            entries.add(path.relative_to(ROOT).as_posix())
    return entries


def modules_on_disk() -> set[str]:
    """What the tree must list: the product's packages and modules, and the test bed's top level."""
    entries = {f"{root}/" for root in (*PRODUCT, *TOP_LEVEL)}
    for root in PRODUCT:
        entries |= _package_entries(ROOT / root, whole=True)
    for root in TOP_LEVEL:
        entries |= _package_entries(ROOT / root, whole=False)
    return entries


def differences(*, listed: Iterable[str], required: set[str], exists: set[str]) -> list[str]:
    """Each problem as one line: a required path not listed, a listed path not on disk, a path listed twice."""
    listed = list(listed)
    problems = [f"missing from the tree: {path}" for path in sorted(required - set(listed))]
    problems += [f"in the tree, not on disk: {path}" for path in listed if path not in exists]
    seen: set[str] = set()
    for path in listed:
        if path in seen:
            problems.append(f"listed twice: {path}")
        seen.add(path)
    return problems


def _exists(paths: Iterable[str]) -> set[str]:
    return {path for path in paths if (ROOT / path.rstrip("/")).exists() and "__pycache__" not in path}


def test_the_tree_matches_the_code() -> None:
    listed = tree_paths(tree_block(DESIGN.read_text()))
    problems = differences(listed=listed, required=modules_on_disk(), exists=_exists(listed))
    assert not problems, "docs/design.md's tree and the code differ:\n" + "\n".join(problems)


TREE = """\
lockd/          the node lock daemon
  app.py        its HTTP handlers
  gone.py       a module that is not there
sim/            the test bed
"""


@pytest.mark.parametrize(
    ("text", "required", "exists", "problems"),
    [
        pytest.param(
            TREE,
            {"lockd/", "lockd/app.py", "sim/"},
            {"lockd/", "lockd/app.py", "lockd/gone.py", "sim/"},
            [],
            id="matches",
        ),
        pytest.param(
            TREE,
            {"lockd/", "lockd/app.py", "lockd/ledger.py", "sim/"},
            {"lockd/", "lockd/app.py", "lockd/gone.py", "sim/"},
            ["missing from the tree: lockd/ledger.py"],
            id="a-module-missing",
        ),
        pytest.param(
            TREE,
            {"lockd/", "lockd/app.py", "sim/"},
            {"lockd/", "lockd/app.py", "sim/"},
            ["in the tree, not on disk: lockd/gone.py"],
            id="a-module-gone",
        ),
        pytest.param(
            TREE.replace("sim/", "  app.py"),
            {"lockd/", "lockd/app.py"},
            {"lockd/", "lockd/app.py", "lockd/gone.py"},
            ["listed twice: lockd/app.py"],
            id="listed-twice",
        ),
    ],
)
def test_differences_name_each_path(
    text: str, required: set[str], exists: set[str], problems: list[str]
) -> None:
    assert differences(listed=tree_paths(text.splitlines()), required=required, exists=exists) == problems


def test_a_module_at_the_wrong_depth_is_missing_where_it_belongs() -> None:
    # app.py written at the root's level is "app.py", not lockd's module.
    listed = tree_paths(["lockd/", "app.py"])
    assert differences(listed=listed, required={"lockd/", "lockd/app.py"}, exists={"lockd/", "app.py"}) == [
        "missing from the tree: lockd/app.py"
    ]


def test_an_indent_under_a_module_is_refused() -> None:
    with pytest.raises(TreeError, match="line 3"):
        tree_paths(["lockd/", "  app.py", "    ledger.py"])


def test_the_tree_is_the_sections_first_block() -> None:
    text = f"# doc\n\n{SECTION}\n\nwords\n\n```text\nlockd/  the daemon\n```\n\n```\nnot this\n```\n"
    assert tree_block(text) == ["lockd/  the daemon"]
