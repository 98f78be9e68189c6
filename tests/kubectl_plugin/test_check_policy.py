"""`kubectl stagger check-policy FILE`, run as the installed console script (`kubectl-stagger`): the
chart's policy file is valid (exit 0, one summary line), and a broken one gets exactly the messages lockd
would log for it (`stagger.policy.load_policy_file`), every one on stderr, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stagger import policy

ROOT = Path(__file__).parents[2]
PLUGIN = Path(sys.executable).with_name("kubectl-stagger")
CHART_POLICIES = ROOT / "charts" / "stagger" / "configs" / "_policies.yaml"


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), "check-policy", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def lockd_says(path: Path) -> list[str]:
    try:
        policy.load_policy_file(path)
    except policy.PolicyError as err:
        return list(err.errors)
    return []


def test_the_charts_policy_file_is_valid() -> None:
    done = check(CHART_POLICIES)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{CHART_POLICIES}: valid: 1 node policy, 0 staggering policies\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "nodePolicies:\n- name: a\n  throttleConfig:\n    maxConcurent: {value: 2}\n",
            ["nodePolicies[0].throttleConfig.maxConcurent: unknown key; did you mean 'maxConcurrent'?"],
            id="typo-maxConcurrent",
        ),
        pytest.param(
            "nodePolicies:\n- name: a\n  holdTimout: 2m\n  maxWiat: 1m\n",
            [
                "nodePolicies[0].holdTimout: unknown key; did you mean 'holdTimeout'?",
                "nodePolicies[0].maxWiat: unknown key; did you mean 'maxWait'?",
            ],
            id="every-error-listed",
        ),
        pytest.param("nodePolicies: [\n", None, id="bad-yaml"),
        pytest.param("a: 1\na: 2\n", None, id="duplicate-key"),
    ],
)
def test_a_broken_file_gets_lockds_messages_on_stderr(
    tmp_path: Path, text: str, expected: list[str] | None
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(text)
    done = check(path)
    assert (done.returncode, done.stdout) == (1, "")
    said = lockd_says(path)
    assert said and done.stderr.splitlines() == said
    if expected is not None:
        assert sorted(said) == sorted(expected)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    done = check(tmp_path / "nope.yaml")
    assert done.returncode == 1
    assert (
        done.stderr == f"{tmp_path / 'nope.yaml'}: cannot read the policy file: No such file or directory\n"
    )


def test_help_lists_the_exit_codes() -> None:
    done = subprocess.run([str(PLUGIN), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert "exit codes:" in done.stdout and "5  why: no such pod" in done.stdout
