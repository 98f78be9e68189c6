"""The API emulator's `GET /version` for another minor (`ApiServerSettings.kubernetes_version`, `python -m sim
apiserver --kubernetes-version 1.29`), so the controller's version check can be tried on an older or newer
cluster: it names that minor, the default stays the emulator's own, and a bad value is a usage error."""

from __future__ import annotations

import aiohttp
import pytest

from sim.cli.apiserver import parse_args
from sim.emulator.resources import KUBERNETES_VERSION
from sim.emulator.server import ApiServer, ApiServerSettings
from stagger.kubeversions import parse_version


async def _version(settings: ApiServerSettings) -> dict[str, str]:
    async with (
        ApiServer(settings) as server,
        aiohttp.ClientSession() as session,
        session.get(server.url + "/version") as response,
    ):
        assert response.status == 200
        return dict(await response.json())


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        pytest.param(None, (KUBERNETES_VERSION[0], KUBERNETES_VERSION[1]), id="default"),
        pytest.param("1.29", ("1", "29"), id="older"),
        pytest.param("1.40", ("1", "40"), id="newer"),
    ],
)
async def test_version_names_the_configured_minor(version: str | None, expected: tuple[str, str]) -> None:
    info = await _version(ApiServerSettings(kubernetes_version=version))
    assert (info["major"], info["minor"]) == expected
    assert info["gitVersion"] == f"v{expected[0]}.{expected[1]}.0-sim"
    assert parse_version(info) == (int(expected[0]), int(expected[1]))


def test_the_command_line_takes_it() -> None:
    settings, _, _ = parse_args(["--kubernetes-version", "1.29"])
    assert settings.kubernetes_version == "1.29"
    assert parse_args([])[0].kubernetes_version is None


@pytest.mark.parametrize("value", ["1", "v1.29", "1.29.3", "0.29", "1.x", ""])
def test_a_bad_version_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--kubernetes-version", value])
    assert exited.value.code == 2
    assert "expected MAJOR.MINOR such as 1.29" in capsys.readouterr().err
