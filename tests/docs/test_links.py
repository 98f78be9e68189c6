"""Relative links in README.md and docs/*.md resolve inside the repository.

Every Markdown link `[text](path)`, `[text](path#anchor)`, image `![alt](path)` and reference definition
`[ref]: path` in those documents must name a file (or folder) that exists in the repository, relative to
the document. A link that leaves the repository (`../shared/DESIGN.md`) fails even if the file exists on
this machine: a reader of the repository does not have it. An `#anchor` into a Markdown file must match
one of its headings, slugged as GitHub does. Links with a scheme `http`, `https` or `mailto` are not
checked; links inside code blocks and code spans are not links. Only ATX headings (`## Title`) count as
anchors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

SKIPPED_SCHEMES = ("http", "https", "mailto")

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or [text](<target>), with an optional "title"; text may hold one level of brackets.
_INLINE = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(?:<([^<>]*)>|([^\s()]+))(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class Link:
    line: int
    target: str


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with code spans blanked out."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        lines.append((number, _CODE_SPAN.sub("code", line)))
    return lines


def extract_links(text: str) -> list[Link]:
    links: list[Link] = []
    for number, line in _prose_lines(text):
        for match in _INLINE.finditer(line):
            links.append(Link(number, (match.group(1) or match.group(2) or "").strip()))
        if reference := _REFERENCE.match(line):
            links.append(Link(number, reference.group(1)))
    return links


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The heading anchors of a Markdown document; a repeated heading gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(text):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_problem(document: Path, target: str, *, root: Path) -> str | None:
    """Why `target`, linked from `document`, does not resolve inside `root`; None when it does or is skipped."""
    scheme = _SCHEME.match(target)
    if scheme is not None:
        if scheme.group(1).lower() in SKIPPED_SCHEMES:
            return None
        return f"not a relative link (scheme {scheme.group(1)}:)"
    path, _, anchor = target.partition("#")
    path = unquote(path)
    if path.startswith("/"):
        return "an absolute path; write it relative to the document"
    resolved = (document.parent / path).resolve() if path else document.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "points outside the repository"
    if not resolved.exists():
        return f"no such file in the repository ({resolved.relative_to(root.resolve())})"
    if not anchor or not resolved.is_file() or resolved.suffix != ".md":
        return None
    if unquote(anchor).lower() not in anchors(resolved.read_text(encoding="utf-8")):
        return f"no heading with anchor #{anchor} in {resolved.relative_to(root.resolve())}"
    return None


def problems_in(document: Path, *, root: Path) -> list[str]:
    found = []
    for link in extract_links(document.read_text(encoding="utf-8")):
        problem = link_problem(document, link.target, root=root)
        if problem is not None:
            found.append(f"{document.relative_to(root)}:{link.line}: ({link.target}) {problem}")
    return found


# --- the repository's documents ------------------------------------------------------------------------


def test_the_documents_are_there() -> None:
    names = {document.relative_to(ROOT).as_posix() for document in DOCUMENTS}
    assert {"README.md", "docs/contracts.md", "docs/design.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    problems = problems_in(document, root=ROOT)
    assert not problems, "links that do not resolve inside the repository:\n" + "\n".join(problems)


# --- the checker itself --------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "contracts.md").write_text(
        "# Contracts\n\n## lockd → the API server\n\n## Rules\n## Rules\n"
    )
    (root / "lockd").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("# outside\n")
    return root


def test_links_are_found_in_prose_but_not_in_code() -> None:
    text = (
        'See [the contracts](docs/contracts.md) and ![a plot](out/plot.png "title").\n'
        "[`code` in text](<docs/with space.md>) and `[not](a-link.md)`\n"
        "```sh\n[not](a/link/either.md)\n```\n"
        "~~~\n```\n[still](code.md)\n~~~\n"
        "[ref]: docs/design.md#where-things-are\n"
    )
    assert extract_links(text) == [
        Link(1, "docs/contracts.md"),
        Link(1, "out/plot.png"),
        Link(2, "docs/with space.md"),
        Link(10, "docs/design.md#where-things-are"),
    ]


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("docs/contracts.md", None),
        ("docs/contracts.md#rules", None),
        ("docs/contracts.md#rules-1", None),
        ("docs/contracts.md#lockd--the-api-server", None),
        ("lockd/", None),
        ("https://example.com/x", None),
        ("mailto:someone@example.com", None),
        ("../shared/DESIGN.md", "points outside the repository"),
        ("docs/../../shared/DESIGN.md", "points outside the repository"),
        ("docs/design.md", "no such file in the repository (docs/design.md)"),
        ("docs/contracts.md#nowhere", "no heading with anchor #nowhere in docs/contracts.md"),
        ("/docs/contracts.md", "an absolute path; write it relative to the document"),
        ("file:///etc/passwd", "not a relative link (scheme file:)"),
    ],
)
def test_link_problems(repo: Path, target: str, problem: str | None) -> None:
    assert link_problem(repo / "README.md", target, root=repo) == problem


def test_links_are_relative_to_their_document(repo: Path) -> None:
    document = repo / "docs" / "guide.md"
    document.write_text("# Guide\n")
    assert link_problem(document, "contracts.md", root=repo) is None
    assert link_problem(document, "../lockd", root=repo) is None
    assert (
        link_problem(document, "#contracts", root=repo)
        == "no heading with anchor #contracts in docs/guide.md"
    )


def test_github_slugs() -> None:
    assert (
        github_slug("Pacer semantics *(planned: not built yet)*") == "pacer-semantics-planned-not-built-yet"
    )
    assert github_slug("init client (or anyone) → lockd: start-up slots") == (
        "init-client-or-anyone--lockd-start-up-slots"
    )
    assert github_slug("The `lockd` [HTTP](x.md) contract") == "the-lockd-http-contract"
