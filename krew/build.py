"""Build `kubectl stagger`'s krew archive and render its manifest: `make plugin` runs this.

    python krew/build.py --out dist [--url URL]

writes
- dist/kubectl-stagger: the plugin as one executable PEX (https://docs.pex-tool.org) holding stagger and
  every dependency, the official kubernetes client included (kubeconfigs with exec plugins, as EKS and GKE
  write them, need it);
- dist/kubectl-stagger.tar.gz: that and LICENSE, the archive krew installs;
- dist/stagger.yaml: krew/stagger.yaml rendered with the version tag, the URL where the archive will be
  published (--url; without it the archive's own file:// URL, which `kubectl krew install --archive` accepts
  but a krew index does not) and the archive's sha256.

The PEX holds only pure-Python wheels (`pip download --platform any`: aiohttp, multidict, yarl, frozenlist
and propcache publish them), so one archive serves Linux and macOS on any CPU and any Python >= 3.11.
PyYAML publishes none: it is built from its sdist without its C extension (PYYAML_FORCE_LIBYAML=0), which
PyYAML supports (it falls back to its pure-Python parser), at the version this venv runs. The rest are the
newest versions within pyproject's ranges that have pure wheels (the kubernetes client from 37 on needs
pydantic-core, which has none, so pip picks the newest one before it). The archive's bytes depend only on
its files: the same wheels give the same sha256.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "krew" / "stagger.yaml"
PEX_VERSION = "2.105.2"
# The oldest Python the plugin supports (pyproject's requires-python); pip resolves pure wheels for it.
PYTHON_FLOOR = "3.11"
ARCHIVE = "kubectl-stagger.tar.gz"
# How many times the wheels are fetched before a broken one (not a whole zip file) stops the build.
FETCHES = 3


def render_manifest(template: str, *, tag: str, uri: str, sha256: str) -> str:
    """The template's three fields filled in; a field left unfilled is an error, not a broken manifest."""
    text = template
    for field, value in ((".TagName", tag), (".URI", uri), (".Sha256", sha256)):
        text = text.replace("{{ " + field + " }}", value)
    if "{{" in text:
        raise ValueError(
            f"{TEMPLATE.name}: a field this script does not fill: {text[text.index('{{') :][:40]!r}"
        )
    return text


def _run(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(args, check=True, env={**os.environ, **(env or {})})


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    _run(sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args, env=env)


# What stagger's own wheel is built from (pyproject's packages, readme and license).
SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "stagger",
    "lockd",
    "initclient",
    "webhook",
    "sim",
    "kubectl_stagger",
)


def _source_copy(into: Path) -> Path:
    """The project's sources copied to ``into``: pip builds a local directory in place, in its ``build/``,
    so two builds at once (the tests' workers each building the plugin) wrote over each other's files there
    and one read a broken wheel (BadZipFile)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    into.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=skip)
        else:
            shutil.copy2(source, into / name)
    return into


def _fetch(into: Path, *, source: Path, cache: bool) -> None:
    """Build stagger's wheel (from ``source``) and PyYAML's and download the rest into ``into``; ``cache=False``
    asks pip not to reuse what it cached."""
    caching = () if cache else ("--no-cache-dir",)
    _pip("wheel", *caching, "--no-deps", "-w", str(into), str(source))
    pyyaml = metadata.version("PyYAML")
    _pip(
        "wheel",
        *caching,
        "--no-deps",
        "--no-binary=pyyaml",
        "-w",
        str(into),
        f"pyyaml=={pyyaml}",
        env={"PYYAML_FORCE_LIBYAML": "0"},
    )
    _pip(
        "download",
        *caching,
        "-d",
        str(into),
        "--find-links",
        str(into),
        "--only-binary=:all:",
        "--platform=any",
        "--implementation=py",
        "--abi=none",
        f"--python-version={PYTHON_FLOOR}",
        "stagger[kubeconfig]",
    )


def broken_wheels(wheels: Path) -> list[Path]:
    """The wheels in ``wheels`` that are not whole zip files. pip saves a wheel it downloads after reading its
    metadata from the index (PEP 658) without opening it, so a download cut short was kept as it came and pex's
    pip later stopped on it with a bare BadZipFile that named no file (CI, once)."""
    broken = []
    for wheel in sorted(wheels.glob("*.whl")):
        try:
            with zipfile.ZipFile(wheel) as archive:
                whole = archive.testzip() is None
        # A changed byte in a compressed member fails in zlib while testzip reads it, not as BadZipFile.
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError):
            whole = False
        if not whole:
            broken.append(wheel)
    return broken


def _wheels(into: Path) -> None:
    """Every wheel the plugin needs, pure Python only, each a whole zip file: one found broken is removed and
    fetched again, past pip's cache, up to FETCHES times in all."""
    source = _source_copy(into.parent / "source")
    for fetch in range(1, FETCHES + 1):
        _fetch(into, source=source, cache=fetch == 1)
        broken = broken_wheels(into)
        if not broken:
            break
        names = ", ".join(wheel.name for wheel in broken)
        if fetch == FETCHES:
            raise SystemExit(f"build.py: not whole zip files after {FETCHES} fetches: {names}")
        print(f"build.py: not whole zip files, removed and fetched again: {names}", file=sys.stderr)
        for wheel in broken:
            wheel.unlink()
    binary = [wheel.name for wheel in into.glob("*.whl") if not wheel.name.endswith("-none-any.whl")]
    if binary:
        raise SystemExit(f"build.py: not pure-Python wheels, the archive would serve one platform: {binary}")


def _pex(wheels: Path, out: Path) -> None:
    _pip("install", f"pex=={PEX_VERSION}")
    _run(
        sys.executable,
        "-m",
        "pex",
        "--no-pypi",
        "--find-links",
        str(wheels),
        "stagger[kubeconfig]",
        "--console-script",
        "kubectl-stagger",
        # pex finds a python on the PATH that meets the constraint (python3.12, ...) when python3 does not.
        "--python-shebang",
        "/usr/bin/env python3",
        "--interpreter-constraint",
        f"CPython>={PYTHON_FLOOR}",
        "--output-file",
        str(out),
    )


def _archive(pex: Path, out: Path) -> bytes:
    """A tar.gz whose bytes depend only on its files: no times, owners or gzip name."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode in ((pex, 0o755), (ROOT / "LICENSE", 0o644)):
            info = tarfile.TarInfo(path.name)
            info.size = path.stat().st_size
            info.mode = mode
            with path.open("rb") as data:
                tar.addfile(info, data)
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    out.write_bytes(packed.getvalue())
    return packed.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "dist", help="where the three files go (default: dist)"
    )
    parser.add_argument("--url", help="where the archive will be published (default: its file:// URL here)")
    args = parser.parse_args(argv)
    tag = "v" + metadata.version("stagger")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stagger-krew-") as scratch:
        wheels = Path(scratch) / "wheels"
        wheels.mkdir()
        _wheels(wheels)
        pex = args.out / "kubectl-stagger"
        _pex(wheels, pex)
    archive = _archive(pex, args.out / ARCHIVE)
    sha256 = hashlib.sha256(archive).hexdigest()
    uri = args.url or (args.out / ARCHIVE).resolve().as_uri()
    manifest = render_manifest(TEMPLATE.read_text(), tag=tag, uri=uri, sha256=sha256)
    (args.out / "stagger.yaml").write_text(manifest)
    print(
        f"build.py: {args.out / ARCHIVE} ({len(archive) / 2**20:.1f} MiB, sha256 {sha256}) and {args.out / 'stagger.yaml'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
