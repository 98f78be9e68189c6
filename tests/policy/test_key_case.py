"""Keys match as Go's encoding/json matches them (straggler and pod-pacemaker read their files so): exactly,
else regardless of case by Go's EqualFold (KELVIN SIGN is a k, LONG S an s; nothing else outside ASCII).
Each key read through another case is a note naming it as written, as meant and where; two spellings of one
key in a mapping are an error naming both; values keep their case; an unknown key still gets its hint. Any
re-casing of every key of a valid file gives the same policies (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagger.policy import PolicyError, parse_policy_file, parse_policy_text

NOTE = "(keys match regardless of case, as Go's decoder does)"

# Every key of stagger's format, once at least (the selectors' insides are labels: they keep their case).
EVERY_KEY: dict[str, Any] = {
    "staggeringPolicies": [
        {
            "name": "web",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "bypassLabelSelector": {"canary": "1"},
            "groupingExpression": ".spec.containers[0].image",
            "maxBlockedDuration": "10m",
            "startTimeout": "5m",
            "mode": "evict",
            "hold": "stub",
            "pacer": {"exponential": {"minInitial": 2, "multiplier": 2, "maxStagger": 8}},
        },
        {"name": "jobs", "labelSelector": {"a": "b"}, "pacer": {"linear": {"step": 1, "maxStagger": 3}}},
        {"name": "one", "labelSelector": {"a": "c"}, "pacer": {"maxConcurrent": {"value": 1}}},
    ],
    "nodePolicies": [
        {
            "name": "gpu",
            "nodeSelector": {"pool": "gpu"},
            "priority": 3,
            "throttleConfig": {
                "cpu": {"maxLoad": 80, "incrementBy": 5},
                "io": {"maxLoad": 20, "incrementBy": 1},
                "loadAvg": {"maxLoad": 2, "perCore": True, "incrementBy": 0.5},
                "maxConcurrent": {"perCore": 0.5, "value": 4},
                "rateLimit": {"burst": 2, "fillFactor": "2s"},
            },
            "holdTimeout": "2m",
            "minHold": "1s",
            "countAllStarting": True,
            "excludeNamespaces": ["kube-system"],
            "waitForDaemonSets": True,
            "maxWait": "10m",
            "unreachableWait": "1m",
            "maxQueue": 100,
            "dependencies": [{"http": "http://registry:5000/v2/", "timeout": "1s"}, {"tcp": "db:5432"}],
        }
    ],
}
LABEL_MAPS = frozenset({"labelSelector", "bypassLabelSelector", "nodeSelector"})


def recased(data: Any, spell: Any) -> tuple[Any, int]:
    """`data` with each of stagger's keys spelt by `spell(key)`, and how many came out other than written."""
    if isinstance(data, list):
        items = [recased(item, spell) for item in data]
        return [item for item, _ in items], sum(changed for _, changed in items)
    if not isinstance(data, dict):
        return data, 0
    out: dict[str, Any] = {}
    changed = 0
    for key, value in data.items():
        new_key = spell(key)
        inner, inner_changed = (value, 0) if key in LABEL_MAPS else recased(value, spell)
        out[new_key] = inner
        changed += (new_key != key) + inner_changed
    return out, changed


LINEAR = {"linear": {"step": 1, "maxStagger": 3}}


@pytest.mark.parametrize(
    ("data", "exact", "note"),
    [
        pytest.param(
            {"staggeringPolicies": [{"name": "a", "labelSelector": {}, "pacer": LINEAR, "BypassLabelSelector": {"x": "1"}}]},
            {"staggeringPolicies": [{"name": "a", "labelSelector": {}, "pacer": LINEAR, "bypassLabelSelector": {"x": "1"}}]},
            f"staggeringPolicies[0].BypassLabelSelector: read as bypassLabelSelector {NOTE}",
            id="straggler-spelling",
        ),
        pytest.param(
            {"NODEPOLICIES": [{"name": "a"}]},
            {"nodePolicies": [{"name": "a"}]},
            f"NODEPOLICIES: read as nodePolicies {NOTE}",
            id="upper",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "ThrottleConfig": {"RateLimit": {"burst": 1, "fillfactor": "1s"}}}]},
            {"nodePolicies": [{"name": "a", "throttleConfig": {"rateLimit": {"burst": 1, "fillFactor": "1s"}}}]},
            f"nodePolicies[0].ThrottleConfig.RateLimit.fillfactor: read as fillFactor {NOTE}",
            id="nested-path-as-written",
        ),
        pytest.param(
            {"staggeringPolicies": [{"name": "a", "labelSelector": {}, "pacer": LINEAR, "maxBloc\u212aedDuration": "1m"}]},
            {"staggeringPolicies": [{"name": "a", "labelSelector": {}, "pacer": LINEAR, "maxBlockedDuration": "1m"}]},
            f"staggeringPolicies[0].maxBloc\u212aedDuration: read as maxBlockedDuration {NOTE}",
            id="kelvin-sign-is-k",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "wait\u017forDaemonSets": True}]},
            None,
            "",
            id="long-s-is-no-f",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "waitForDaemon\u017fet\u017f": True}]},
            {"nodePolicies": [{"name": "a", "waitForDaemonSets": True}]},
            f"nodePolicies[0].waitForDaemon\u017fet\u017f: read as waitForDaemonSets {NOTE}",
            id="long-s-is-s",
        ),
    ],
)  # fmt: skip
def test_a_key_in_another_case_is_read_with_a_note(data: dict[str, Any], exact: Any, note: str) -> None:
    if exact is None:
        with pytest.raises(PolicyError, match="unknown key; did you mean"):
            parse_policy_file(data)
        return
    loaded, spelt = parse_policy_file(data), parse_policy_file(exact)
    assert loaded == spelt
    assert note in loaded.notes
    assert not spelt.notes


def test_a_note_says_where_and_is_no_part_of_the_policy() -> None:
    loaded = parse_policy_text("NodePolicies:\n- Name: a\n  MaxQueue: 3\n")
    assert loaded.notes == (
        f"NodePolicies: read as nodePolicies {NOTE}",
        f"NodePolicies[0].Name: read as name {NOTE}",
        f"NodePolicies[0].MaxQueue: read as maxQueue {NOTE}",
    )
    assert loaded == parse_policy_text("nodePolicies:\n- name: a\n  maxQueue: 3\n")
    assert loaded.node_policies[0].max_queue == 3


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        pytest.param(
            {"nodePolicies": [{"name": "a", "Name": "b"}]},
            ["nodePolicies[0].Name: the same key as 'name' (keys match regardless of case); write it once"],
            id="exact-then-other",
        ),
        pytest.param(
            {"nodePolicies": [{"NAME": "b", "name": "a"}]},
            ["nodePolicies[0].name: the same key as 'NAME' (keys match regardless of case); write it once"],
            id="other-then-exact",
        ),
        pytest.param(
            {"nodePolicies": [], "NodePolicies": []},
            ["NodePolicies: the same key as 'nodePolicies' (keys match regardless of case); write it once"],
            id="top-level",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "throttleConfig": {"cpu": {"maxLoad": 1, "MaxLoad": 2, "maxload": 3}}}]},
            [
                "nodePolicies[0].throttleConfig.cpu.MaxLoad: the same key as 'maxLoad' (keys match regardless of "
                "case); write it once",
                "nodePolicies[0].throttleConfig.cpu.maxload: the same key as 'maxLoad' (keys match regardless of "
                "case); write it once",
            ],
            id="three-spellings",
        ),
        pytest.param(
            {"staggeringPolicies": [{"Name": "x", "labelSelector": {}, "pacer": {"Linear": {"step": 0}}}]},
            [
                "staggeringPolicies[0].pacer.Linear.step: must be at least 1 (got 0)",
                "staggeringPolicies[0].pacer.Linear.maxStagger: is required",
            ],
            id="errors-name-the-key-as-written",
        ),
        pytest.param(
            {"staggeringPolicies": [{"name": "x", "labelSelector": {}, "pacer": {"linear": {"step": 1}}, "Mode": "Lock"}]},
            [
                "staggeringPolicies[0].Mode: must be one of lock, evict, gate (got 'Lock')",
                "staggeringPolicies[0].pacer.linear.maxStagger: is required",
            ],
            id="values-keep-their-case",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "\u0131gnored": 1, "maxQueue": 1}]},
            ["nodePolicies[0].\u0131gnored: unknown key; expected one of name, nodeSelector, priority, "
             "throttleConfig, holdTimeout, minHold, countAllStarting, excludeNamespaces, waitForDaemonSets, "
             "daemonSets, countDaemonSets, maxWait, unreachableWait, maxQueue, dependencies, probeReadiness, probePeriod"],
            id="dotless-i-is-no-i",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "ThrottleConfig": {"MaxConcurent": {"value": 2}}}]},
            ["nodePolicies[0].ThrottleConfig.MaxConcurent: unknown key; did you mean 'maxConcurrent'?"],
            id="hint-for-a-typo-in-another-case",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a", "HOLDTIMOUT": "1m"}]},
            ["nodePolicies[0].HOLDTIMOUT: unknown key; did you mean 'holdTimeout'?"],
            id="hint-in-upper-case",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "a"}, {"Name": "a"}]},
            ["nodePolicies[1].name: duplicate name; nodePolicies[0] has it already (got 'a')"],
            id="unique-names-in-any-case",
        ),
    ],
)  # fmt: skip
def test_errors(data: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_file(data)
    assert list(caught.value.errors) == errors


def test_a_selector_keeps_its_case() -> None:
    """A selector's keys are labels (case matters) or Kubernetes's LabelSelector, which the API server reads
    exactly: `MatchLabels` is a label key there, and a map is no label value."""
    loaded = parse_policy_file({"nodePolicies": [{"name": "a", "nodeSelector": {"Pool": "GPU"}}]})
    assert loaded.node_policies[0].node_selector.matches({"Pool": "GPU"})
    assert not loaded.node_policies[0].node_selector.matches({"pool": "GPU"})
    with pytest.raises(PolicyError, match="label value must be a string"):
        parse_policy_file({"nodePolicies": [{"name": "a", "nodeSelector": {"MatchLabels": {"a": "b"}}}]})


# One spelling a key may have in Go's eyes: each letter in either case, k also KELVIN SIGN, s also LONG S.
_SPELLINGS = {"k": "kK\u212a", "s": "sS\u017f"}


@st.composite
def spellers(draw: st.DrawFn) -> Any:
    table: dict[str, str] = {}
    for key in sorted(_all_keys(EVERY_KEY)):
        letters = [
            draw(st.sampled_from(_SPELLINGS.get(c.lower(), c.lower() + c.upper()))) if c.isalpha() else c
            for c in key
        ]
        table[key] = "".join(letters)
    return table


def _all_keys(data: Any) -> set[str]:
    if isinstance(data, list):
        return set().union(*(_all_keys(item) for item in data)) if data else set()
    if not isinstance(data, dict):
        return set()
    keys = set(data)
    for key, value in data.items():
        if key not in LABEL_MAPS:
            keys |= _all_keys(value)
    return keys


EVERY_KEY_LOADED = parse_policy_file(EVERY_KEY)


# Each example compiles a JSONPath (about 40 ms): enough examples to spell each key several ways.
@settings(max_examples=75, deadline=None)
@given(table=spellers())
def test_any_re_casing_of_every_key_gives_the_same_policies(table: dict[str, str]) -> None:
    data, changed = recased(EVERY_KEY, table.__getitem__)
    loaded = parse_policy_file(data)
    assert loaded == EVERY_KEY_LOADED
    assert len(loaded.notes) == changed
    assert all(note.endswith(NOTE) for note in loaded.notes)
