"""`kubectl stagger convert` as a command: input that is none of the peers' formats is refused with exit 7 and
what convert reads (a stagger policy file is pointed at check-policy); `--from` naming another peer than the
file's is refused too; several peers' files make one policy file whose names stay unique, and a node policy
that another one shadows is said, and what the cluster still needs ends stderr: every peer's chart values
and one `--set` line of those always needed, then the objects to delete; `-` reads stdin; an unreadable
file is exit 1; a YAML flattened to one line (copied from a web page) is exit 7 saying where it is no YAML;
`--help` shows the command, its examples and exit code 7."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, convert_inputs
from tests.convert.plugin import PLUGIN, convert, data

pytestmark = pytest.mark.slow

UNKNOWN = "none of the formats convert reads"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("hello: world\n", id="yaml-mapping"),
        pytest.param("just some words\n", id="text"),
        pytest.param("", id="empty"),
        pytest.param(
            "kind: KubeSchedulerConfiguration\nprofiles: [{schedulerName: x}]\n", id="scheduler-without-herd"
        ),
        pytest.param("server --port 80 --timeout 5\n", id="generic-flags"),
    ],
)
def test_an_unknown_format_is_refused_with_exit_7(tmp_path: Path, text: str) -> None:
    path = tmp_path / "input"
    path.write_text(text)
    run = convert(path)
    assert (run.code, run.stdout) == (7, "")
    assert run.stderr.startswith(f"error: {path}: {UNKNOWN}: straggler's policy file")


def test_a_stagger_policy_file_is_pointed_at_check_policy() -> None:
    chart = Path("charts/stagger/configs/_policies.yaml")
    run = convert(chart)
    assert (run.code, run.stderr) == (
        7,
        f"error: {chart}: a stagger policy file already (nodePolicies): check it with `kubectl stagger check-policy`\n",
    )


def test_from_naming_another_peer_is_refused() -> None:
    run = convert("--from", "straggler", data("herd-readme-config.yaml"))
    assert (run.code, run.stdout) == (7, "")
    assert "no straggler configuration found in it (--from straggler)" in run.stderr


def test_several_peers_make_one_policy_file_read_from_stdin_too() -> None:
    herd = data("herd-readme-config.yaml").read_text()
    run = convert(
        data("straggler-readme-example.yaml"), data("startup-lock-run-locally.txt"), "-", stdin=herd
    )
    loaded = run.loaded()
    assert [each.name for each in loaded.staggering_policies] == ["image-pull"]
    assert [each.name for each in loaded.node_policies] == ["pod-startup-lock", "thundering-herd-scheduler"]
    assert run.stdout.startswith(
        "# A stagger policy file, converted by `kubectl stagger convert` from straggler "
        f"({data('straggler-readme-example.yaml')}); pod-startup-lock ({data('startup-lock-run-locally.txt')}); "
        "thundering-herd (<stdin>).\n"
    )
    # Both node policies select every node at priority 0: the first in the file wins.
    assert run.not_carried[-1] == (
        "the node policy 'thundering-herd-scheduler' never applies: 'pod-startup-lock' comes first with the same "
        "nodeSelector and priority 0 (give one a higher priority or another nodeSelector)"
    )


def test_names_stay_unique_across_peers() -> None:
    config = (
        "apiVersion: woehrl.net/v1alpha\nkind: PacemakerConfig\nmetadata: {name: pod-startup-lock}\n"
        "spec: {nodeSelector: {}, priority: 5, throttleConfig: {}}\n"
    )
    converted = convert_inputs(
        [Input(source="a.yaml", text=config), Input(source="b.txt", text="lock --locks 2\n")]
    )
    assert [each.name for each in converted.policy_file.node_policies] == [
        "pod-startup-lock",
        "pod-startup-lock-2",
    ]
    assert "pod-startup-lock: the node policy 'pod-startup-lock' is named 'pod-startup-lock-2'" in "\n".join(
        converted.notes
    )


def test_the_chart_values_of_every_peer_end_stderr_with_one_set_line() -> None:
    run = convert(
        data("straggler-readme-example.yaml"),
        data("startup-lock-run-locally.txt"),
        data("herd-readme-config.yaml"),
    )
    values = [note for note in run.notes if note.startswith("chart value")]
    assert [each.split(": ", 2)[1] for each in values[:-1]] == [
        "prefix",
        "lockd.podStartupLock.port",
        "controller.webhook.schedulerNames",
    ]
    assert values[-1] == (
        "chart values as flags of helm install or upgrade: --set prefix=v1.straggler.technicianted "
        "--set lockd.podStartupLock.port=9000 --set 'controller.webhook.schedulerNames={thundering-herd-scheduler}'"
    )
    obsolete = [note for note in run.notes if note.startswith("no longer needed: ")]
    assert len(obsolete) == 4 and run.notes[-len(obsolete) :] == obsolete


def test_a_yaml_flattened_to_one_line_says_where_it_is_no_yaml(tmp_path: Path) -> None:
    path = tmp_path / "flat.yaml"
    path.write_text('staggeringPolicies: - name: image-pull labelSelector: staggerimages: "1"\n')
    run = convert(path)
    assert (run.code, run.stdout) == (7, "")
    assert run.stderr.startswith(
        f"error: {path}: {UNKNOWN} (not YAML: sequence entries are not allowed here at line 1, column 21): "
    )
    forced = convert("--from", "straggler", path)
    assert forced.code == 7 and "(not YAML: sequence entries are not allowed here" in forced.stderr


def test_an_unreadable_file_is_exit_1(tmp_path: Path) -> None:
    run = convert(tmp_path / "nope.yaml")
    assert (run.code, run.stderr) == (
        1,
        f"error: {tmp_path / 'nope.yaml'}: cannot read it: No such file or directory\n",
    )


def test_help_shows_convert_and_its_exit_code() -> None:
    done = subprocess.run([str(PLUGIN), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert (
        "kubectl stagger convert straggler-policies.yaml pacemakerconfigs.yaml > policies.yaml" in done.stdout
    )
    assert "7  convert: the input is none of the formats it reads" in done.stdout
    sub = subprocess.run(
        [str(PLUGIN), "convert", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (
        sub.returncode == 0
        and "--from {straggler,pod-pacemaker,thundering-herd,pod-startup-lock}" in sub.stdout
    )
