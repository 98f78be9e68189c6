"""The command line without running anything: `python -m sim` and every command explain themselves
(description and examples), the cluster command's options override the scenario, bad options are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim import cli
from sim.cli.cluster import parse_cli
from sim.cluster.scenario import ScenarioError


@pytest.mark.parametrize("argv", [["--help"], *([command, "--help"] for command in cli.COMMANDS)])
def test_every_help_says_what_it_does_and_shows_an_example(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m sim")
    assert "examples:\n  python -m sim " + (argv[0] if argv[0] in cli.COMMANDS else "") in out


def test_no_or_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["nonsense"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(argv)
        assert exit_info.value.code == 2
    assert "apiserver, controlplane, cluster, herd" in capsys.readouterr().err


def test_cli_settings_override_the_scenario(tmp_path: Path) -> None:
    policies = tmp_path / "p.yaml"
    policies.write_text("nodePolicies: []\n")
    settings, level = parse_cli(
        [
            "--nodes",
            "3",
            "--cores",
            "8",
            "--stagger",
            "--policies",
            str(policies),
            "--host-port",
            "0",
            "--time-scale",
            "5",
            "--log-level",
            "debug",
        ]
    )
    c = settings.cluster
    assert (c.nodes.count, c.nodes.cores, c.time_scale, level) == (3, 8.0, 5.0, "debug")
    assert (c.stagger.enabled, c.stagger.host_port, c.stagger.policies) == (True, 0, "nodePolicies: []\n")
    assert settings.scenario is None
    herd, _ = parse_cli(
        ["--scenario", str(Path(__file__).parents[2] / "sim" / "cluster" / "scenarios" / "herd.yaml")]
    )
    assert herd.scenario is not None and herd.cluster.nodes.count == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--nodes", "0"], "--nodes", id="nodes"),
        pytest.param(["--cores", "-1"], "--cores", id="cores"),
        pytest.param(["--time-scale", "0"], "--time-scale", id="scale"),
        pytest.param(["--host-port", "99999"], "--host-port", id="port"),
        pytest.param(["--policies", "/nonexistent/p.yaml"], "--policies", id="policies"),
        pytest.param(["--duration", "0"], "--duration", id="duration"),
    ],
)
def test_bad_cli_input_is_named(argv: list[str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_cli(argv)


@pytest.mark.parametrize("command", [pytest.param(command, id=command) for command in cli.COMMANDS])
def test_a_run_only_venv_is_told_to_install_the_test_extras(command: str) -> None:
    """`make run` installs only what lockd needs; `python -m sim herd --help` there ended in a traceback. A
    process in which the test extras' cryptography cannot be imported stands for that venv: each command
    either still works or says to run `make venv`."""
    blocker = (
        "import runpy, sys; sys.modules['cryptography'] = None;"
        f" sys.argv = ['sim', {command!r}, '--help']; runpy.run_module('sim', run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode != 0:
        assert done.returncode == 2, done.stderr
        assert "'cryptography' is not installed" in done.stderr and "make venv" in done.stderr
