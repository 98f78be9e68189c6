"""A loaded file's notes (keys read regardless of case, PacemakerConfigs read as node policies) are no part
of the policy (two files that differ only in them are equal), and the one policy-file watcher lockd and the
controller share logs each once per load: at start-up and at each reload of a changed good file, never at a
check of an unchanged file, never for a file that does not validate."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from stagger.policy import parse_policy_text
from stagger.policywatch import PolicyWatcher

RECASED = "NodePolicies:\n- name: a\n  MaxQueue: 3\n"
NOTES = (
    "NodePolicies: read as nodePolicies (keys match regardless of case, as Go's decoder does)",
    "NodePolicies[0].MaxQueue: read as maxQueue (keys match regardless of case, as Go's decoder does)",
)
PACEMAKER = (
    "apiVersion: woehrl.net/v1alpha\nkind: PacemakerConfig\nmetadata: {name: a}\nspec: {priority: 1}\n"
)


def test_notes_are_no_part_of_the_policy() -> None:
    recased = parse_policy_text(RECASED)
    spelt = parse_policy_text("nodePolicies:\n- name: a\n  maxQueue: 3\n")
    assert recased.notes == NOTES and spelt.notes == ()
    assert recased == spelt


def _notes_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "stagger.policywatch" and record.levelno == logging.WARNING
    ]


def test_the_watcher_logs_each_note_once_per_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stagger.policywatch")
    path = tmp_path / "policies.yaml"
    path.write_text(RECASED)

    watcher = PolicyWatcher.load(path)
    assert _notes_logged(caplog) == [f"policy file {path}: {note}" for note in NOTES]

    caplog.clear()
    assert watcher.check() == "unchanged" and watcher.check() == "unchanged"
    assert _notes_logged(caplog) == []

    path.write_text("nodePolicies: [{Name: a, maxQueue: 0}]\n")  # does not validate: no notes
    assert watcher.check() == "failed"
    assert _notes_logged(caplog) == []

    path.write_text(PACEMAKER)
    assert watcher.check() == "reloaded"
    assert _notes_logged(caplog) == [f'policy file {path}: PacemakerConfig "a": read as node policy "a"']
    assert watcher.policy_file.node_policies[0].priority == 1

    caplog.clear()
    assert watcher.check() == "unchanged"
    assert _notes_logged(caplog) == []
