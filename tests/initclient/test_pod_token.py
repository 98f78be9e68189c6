"""The pod's service-account token on the real `python -m initclient`: sent to lockd as `Authorization:
Bearer` on every ask, read anew each time (the kubelet replaces it before it expires); an unreadable token
file costs one warning and the asks go without it; no token file, no header."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.initclient.process import GRANTED, FakeLockd, environment, locked, run

pytestmark = pytest.mark.slow


async def test_the_token_goes_with_every_ask(lockd: FakeLockd, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("eyJ.first.token\n")
    lockd.script = [locked(retry_after="0"), GRANTED]
    result = await run(environment(lockd.url, STAGGER_POD_TOKEN_FILE=str(token)))
    assert result.code == 0
    assert lockd.authorizations == ["Bearer eyJ.first.token", "Bearer eyJ.first.token"]


async def test_an_unreadable_token_is_left_out_with_one_warning(lockd: FakeLockd, tmp_path: Path) -> None:
    lockd.script = [locked(retry_after="0"), GRANTED]
    result = await run(environment(lockd.url, STAGGER_POD_TOKEN_FILE=str(tmp_path / "missing")))
    assert result.code == 0
    assert lockd.authorizations == [None, None]
    assert sum("cannot read the pod's token" in line for line in result.lines) == 1


async def test_no_token_file_no_header(lockd: FakeLockd) -> None:
    result = await run(environment(lockd.url))
    assert result.code == 0
    assert lockd.authorizations == [None]
