"""`kubectl stagger check-policy FILE`, run as the installed console script (`kubectl-stagger`): the
chart's policy file is valid (exit 0, one summary line), and a broken one gets exactly the messages lockd
would log for it (`stagger.policy.load_policy_file`), every one on stderr, exit 1; a valid file's notes
(keys read regardless of case, PacemakerConfigs) are on stderr as `note: ...`, and it still exits 0."""

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


def test_a_valid_file_s_notes_are_on_stderr_and_it_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        "NodePolicies:\n- name: a\n---\n"
        "apiVersion: woehrl.net/v1alpha\nkind: PacemakerConfig\nmetadata: {name: b}\nspec: {priority: 1}\n"
    )
    done = check(path)
    assert done.returncode == 0
    assert done.stdout == f"{path}: valid: 2 node policies, 0 staggering policies\n"
    assert done.stderr.splitlines() == [f"note: {note}" for note in policy.load_policy_file(path).notes]
    assert done.stderr.splitlines() == [
        "note: documents[0].NodePolicies: read as nodePolicies (keys match regardless of case, as Go's decoder does)",
        'note: documents[1] (PacemakerConfig "b"): read as node policy "b"',
    ]


def test_help_lists_the_exit_codes() -> None:
    done = subprocess.run([str(PLUGIN), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert "exit codes:" in done.stdout and "5  why: no such pod" in done.stdout
