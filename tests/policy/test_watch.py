"""The one policy-file watcher (`stagger.policywatch`) that lockd and the controller share: a changed good
file replaces the policy and reaches every subscriber at once, in order; a bad, emptied or unreadable file
is reported once per distinct problem and keeps the last good policy; an unchanged or already-refused
text is neither parsed nor reported again; the report clears when the file reads well again. And the
controller's subscribers: admission and the group pacers have the new policy as soon as a check read it,
with no polling between them."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagger import policy
from stagger.policywatch import PolicyWatcher
from webhook.app import ADMISSION, POLICY
from webhook.controller import make_app
from webhook.groups import GROUPS
from webhook.settings import parse_settings

ONE = """
staggeringPolicies:
  - name: first
    labelSelector: {matchLabels: {app: web}}
    pacer: {maxConcurrent: {value: 2}}
"""
TWO = ONE.replace("name: first", "name: second")


def test_a_new_good_file_reaches_every_subscriber_in_order(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(ONE)
    watcher = PolicyWatcher.load(path)
    heard: list[tuple[str, str]] = []
    watcher.subscribe(lambda new: heard.append(("a", new.staggering_policies[0].name)))
    watcher.subscribe(lambda new: heard.append(("b", new.staggering_policies[0].name)))

    assert watcher.check() == "unchanged" and heard == []
    path.write_text(TWO)
    assert watcher.check() == "reloaded"
    assert heard == [("a", "second"), ("b", "second")]
    assert watcher.policy_file.staggering_policies[0].name == "second"
    assert watcher.check() == "unchanged" and len(heard) == 2


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("staggeringPolicies: [{name: x, labelSelector: {}, pacer: {nope: {}}}]", id="invalid"),
        pytest.param("", id="emptied"),
        pytest.param(None, id="removed"),
    ],
)
def test_a_bad_file_is_reported_once_and_the_last_good_policy_stays(tmp_path: Path, bad: str | None) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(ONE)
    watcher = PolicyWatcher.load(path)
    heard: list[policy.PolicyFile] = []
    watcher.subscribe(heard.append)
    if bad is None:
        path.unlink()
    else:
        path.write_text(bad)

    assert watcher.check() == "failed"
    assert watcher.last_error
    assert watcher.check() == "unchanged"  # the same problem is not reported again
    assert heard == [] and watcher.policy_file.staggering_policies[0].name == "first"

    path.write_text(ONE)
    assert watcher.check() == "unchanged" and watcher.last_error == ""  # reads well again: report cleared
    path.write_text(TWO)
    assert watcher.check() == "reloaded" and [f.staggering_policies[0].name for f in heard] == ["second"]


def test_no_file_is_an_empty_policy_that_never_changes() -> None:
    watcher = PolicyWatcher.load(None, absent="built-in")
    assert watcher.source == "built-in" and watcher.policy_file == policy.PolicyFile()
    assert watcher.check() == "unchanged"


def test_a_bad_file_at_start_is_an_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text("staggeringPolicies: [{name: x, labelSelector: {}, pacer: {nope: {}}}]")
    with pytest.raises(policy.PolicyError, match=r"staggeringPolicies\[0\]\.pacer"):
        PolicyWatcher.load(path)


def test_the_controllers_admission_and_pacers_have_a_new_policy_after_one_check(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(ONE)
    settings = parse_settings(["--insecure-http", "--image", "stagger:test", "--policies", str(path)], {})
    app = make_app(settings)
    assert [p.name for p in app[ADMISSION].policies] == ["first"]
    assert list(app[GROUPS].pacing.policies) == ["first"]

    path.write_text(TWO)
    assert app[POLICY].check() == "reloaded"
    assert [p.name for p in app[ADMISSION].policies] == ["second"]
    assert list(app[GROUPS].pacing.policies) == ["second"]
