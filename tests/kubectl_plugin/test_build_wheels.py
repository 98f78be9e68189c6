"""krew/build.py's check of the wheels it fetched before pex reads them: a wheel that is not a whole zip file
(cut short, an error page saved under a wheel's name, a member whose bytes changed) is found and named, a
whole one is not. pip saves a wheel it resolved from the index's metadata (PEP 658) without opening it, and
pex's pip once stopped on such a file with a BadZipFile that named none."""

from __future__ import annotations

import importlib.util
import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BUILD = Path(__file__).parents[2] / "krew" / "build.py"


def _build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("krew_build", BUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _build_script()


def _wheel(compression: int = zipfile.ZIP_STORED) -> bytes:
    """A small wheel-shaped zip; stored (not compressed) by default, so one changed byte changes a member."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", compression=compression) as archive:
        archive.writestr("demo/__init__.py", "".join(f"VALUE_{n} = {n * 7919 % 1000}\n" for n in range(200)))
        archive.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    return raw.getvalue()


def _member_changed(whole: bytes) -> bytes:
    at = whole.index(b"VALUE_1 ")
    return whole[:at] + b"X" + whole[at + 1 :]


def _compressed_member_changed(_: bytes) -> bytes:
    """A deflated wheel (as real ones are) with a byte of its first member's compressed data inverted: zlib,
    not zipfile, finds that one."""
    whole = bytearray(_wheel(zipfile.ZIP_DEFLATED))
    whole[60] ^= 0xFF
    return bytes(whole)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(lambda whole: whole[: len(whole) // 2], id="cut-short"),
        pytest.param(lambda whole: b"<html><body>502 Bad Gateway</body></html>\n", id="error-page"),
        pytest.param(lambda whole: b"", id="empty"),
        pytest.param(_member_changed, id="member-changed"),
        pytest.param(_compressed_member_changed, id="compressed-member-changed"),
    ],
)
def test_a_broken_wheel_is_named_and_a_whole_one_is_not(
    tmp_path: Path, content: Callable[[bytes], bytes]
) -> None:
    whole = _wheel()
    (tmp_path / "good-1.0-py3-none-any.whl").write_bytes(whole)
    (tmp_path / "bad-1.0-py3-none-any.whl").write_bytes(content(whole))
    (tmp_path / "notes.txt").write_text("not a wheel, not looked at")
    assert build.broken_wheels(tmp_path) == [tmp_path / "bad-1.0-py3-none-any.whl"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(cut=st.integers(min_value=1, max_value=len(_wheel())))
def test_every_wheel_cut_short_is_broken(tmp_path: Path, cut: int) -> None:
    whole = _wheel()
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(whole[:-cut])
    assert build.broken_wheels(tmp_path) == [wheel]
