"""Fuzzing policy files (hypothesis), the file every lockd (and the controller) reads: a valid file with
one field replaced by a wrong type, a bad duration or selector, a huge number, an unknown key, or a key
removed; the file's text mangled character by character; YAML that only a hostile hand writes (tags,
anchors, complex keys, deep nesting, numbers past any float).

What must hold (docs/design.md, "Validation"): loading gives a policy file or a `PolicyError`, never another
exception; the error names the field that is wrong by its path (`nodePolicies[0].throttleConfig...`), and
nothing outside the mapping that holds it; a policy that loads can be applied by lockd; and lockd's reload of a bad
file keeps the last good policy, says why in `/status`'s `lastReloadError`, and takes the next good one.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lockd import app as lockd_app
from lockd import daemon
from lockd.metrics import Metrics
from lockd.nodepolicy import choose_node_policy
from lockd.service import LockService
from lockd.settings import Settings
from stagger import policy, throttles
from stagger.options import grouped, regrouped
from stagger.policy import PolicyError, PolicyFile

logger = logging.getLogger(__name__)

FUZZ_SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)

# Every field of both kinds of policy, each with a valid value.
VALID: dict[str, Any] = {
    "staggeringPolicies": [
        {
            "name": "image-pull",
            "labelSelector": {
                "matchLabels": {"staggerimages": "1"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}],
            },
            "bypassLabelSelector": {"stagger-bypass": "1"},
            "groupingExpression": ".spec.containers[0].image",
            "maxBlockedDuration": "10m",
            "startTimeout": "5m",
            "mode": "lock",
            "hold": "nodeSelector",
            "pacer": {"exponential": {"minInitial": 4, "multiplier": 4, "maxStagger": 16}},
        }
    ],
    "nodePolicies": [
        {
            "name": "default",
            "nodeSelector": {"matchExpressions": [{"key": "node-role", "operator": "DoesNotExist"}]},
            "priority": 1,
            "throttleConfig": {
                "cpu": {"maxLoad": 80},
                "io": {"maxLoad": 20.5},
                "maxConcurrent": {"perCore": 0.5, "value": 4},
                "rateLimit": {"burst": 2, "fillFactor": "2s"},
            },
            "holdTimeout": "5m",
            "minHold": "500ms",
            "countAllStarting": False,
            "excludeNamespaces": ["kube-system", "monitoring"],
            "waitForDaemonSets": True,
            "maxWait": "10m",
            "maxQueue": 100,
        }
    ],
}
VALID_TEXT = yaml.safe_dump(VALID, sort_keys=False)


def paths(data: object, path: str = "") -> Iterator[tuple[str, tuple[object, ...]]]:
    """Every field below the top: its path as policy errors write it, and the keys that lead to it."""

    def walk(node: object, path: str, keys: tuple[object, ...]) -> Iterator[tuple[str, tuple[object, ...]]]:
        if isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}" if path else str(key)
                yield child, (*keys, key)
                yield from walk(value, child, (*keys, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                child = f"{path}[{index}]"
                yield child, (*keys, index)
                yield from walk(value, child, (*keys, index))

    return walk(data, path, ())


FIELDS = list(paths(VALID))


def _get(data: Any, keys: tuple[object, ...]) -> Any:
    for key in keys:
        data = data[key]
    return data


# Where an unknown key can be added: the top and every mapping.
MAPPINGS = [("", ())] + [(p, k) for p, k in FIELDS if isinstance(_get(VALID, k), dict)]

# Values no field should take, or only some: wrong types, bad durations and selectors, huge and odd numbers.
bad_values = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            0,
            -1,
            2**53 + 1,
            10**400,  # past any float
            -(10**400),
            1e308,
            float("inf"),
            float("-inf"),
            float("nan"),
            0.1,
            "",
            "10 minutes",
            "-1s",
            "1e3s",
            "1_0s",
            "5x",
            "1h-30m",
            "9" * 400 + "h",
            "0s",
            "Lock",
            "In",
            "DoesNotExist",
            "not a selector",
            "a b",
            ".spec[",
            "$..*",
            "!!python/object:os.system",
            "Invalid",
            [],
            {},
            [None],
            {"": None},
            {"key": "x", "operator": "Exists", "values": ["v"]},
            {"matchLabels": {"": "v"}},
            {"matchLabels": {"k": "v" * 64}},
            {"matchExpressions": [{"key": "k", "operator": "Bogus"}]},
            {"matchExpressions": "k in (a)"},
            {"maxLoad": 101},
            {"value": 0},
            {"perCore": -1},
            {"burst": 1},
            {"exponential": {"minInitial": 1, "multiplier": 1, "maxStagger": 1}},
            {"linear": {"step": 1, "maxStagger": 1}, "maxConcurrent": {"value": 1}},
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=3),
    st.dictionaries(
        st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=3
    ),
)
unknown_keys = st.one_of(
    st.sampled_from(["maxConcurent", "holdtimeout", "Name", "throttle", "nodeSelectors", "x.y", "a[0]"]),
    st.text(min_size=1, max_size=12),
    st.integers(),
    st.booleans(),
)


@dataclass(frozen=True)
class Change:
    """VALID with one field changed: `path` is the field's (for an added key, the mapping's: label selectors
    write odd keys quoted, `labelSelector["x.y"]`), and an added `key` must be named in the error too."""

    data: dict[str, Any]
    path: str
    kind: str  # replace, remove, add, none
    key: object = None


@st.composite
def mutations(draw: st.DrawFn) -> Change:
    data = copy.deepcopy(VALID)
    kind = draw(st.sampled_from(["replace", "replace", "add", "remove"]))
    if kind == "add":
        path, keys = draw(st.sampled_from(MAPPINGS))
        key = draw(unknown_keys.filter(lambda k: k not in _get(data, keys)))
        _get(data, keys)[key] = draw(bad_values)
        return Change(data, path, kind, key)
    path, keys = draw(st.sampled_from(FIELDS))
    parent = _get(data, keys[:-1])
    if kind == "remove":
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = draw(bad_values)
    return Change(data, path, kind)


def parent(path: str) -> str:
    """The mapping or list that holds the field at `path` ("" for a top-level key)."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def within(inner: str, outer: str) -> bool:
    """`inner` is the field at `outer` or one inside it."""
    return outer == "" or inner == outer or inner.startswith((f"{outer}.", f"{outer}["))


def applies(loaded: PolicyFile) -> None:
    """What lockd does with a policy it loaded: choose the node policy, build its throttles, show it."""
    for node_policy in (*loaded.node_policies, policy.DEFAULT_NODE_POLICY):
        json.dumps(policy.describe_node_policy(node_policy, cores=4))
    chosen = choose_node_policy(policy_file=loaded, source="fuzz", node_labels={"node-role": "x"})
    service = LockService(
        active=chosen,
        cores=4,
        metrics=Metrics(),
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
        ready=True,
        max_queue=10,
    )
    service.apply_policy(chosen)


# --- one field changed -------------------------------------------------------------------------------

MUTATION_EXAMPLES = 200


def _one_node_policy(node_policy: dict[str, Any]) -> dict[str, Any]:
    return {**VALID, "nodePolicies": [{"name": "a", **node_policy}]}


@settings(FUZZ_SETTINGS, max_examples=MUTATION_EXAMPLES)
@given(change=mutations())
@example(change=Change(VALID, "", "none"))  # the valid file itself
# Integers past the largest float raised OverflowError (perCore, maxLoad; holdTimeout through
# stagger.durations), and a burst past it passed validation, then raised OverflowError in lockd.
@example(
    change=Change(
        _one_node_policy({"throttleConfig": {"maxConcurrent": {"perCore": 10**400}}}),
        "nodePolicies[0].throttleConfig.maxConcurrent.perCore",
        "replace",
    )
)
@example(
    change=Change(
        _one_node_policy({"throttleConfig": {"cpu": {"maxLoad": 10**400}}}),
        "nodePolicies[0].throttleConfig.cpu.maxLoad",
        "replace",
    )
)
@example(change=Change(_one_node_policy({"holdTimeout": 10**400}), "nodePolicies[0].holdTimeout", "replace"))
@example(
    change=Change(
        _one_node_policy({"throttleConfig": {"rateLimit": {"burst": 10**400, "fillFactor": "1s"}}}),
        "nodePolicies[0].throttleConfig.rateLimit.burst",
        "replace",
    )
)
def test_a_changed_field_loads_or_is_named_in_a_policy_error(change: Change) -> None:
    text = yaml.safe_dump(change.data, sort_keys=False, allow_unicode=True)
    try:
        loaded = policy.parse_policy_text(text, source="fuzz.yaml")
    except PolicyError as error:
        assert error.errors and change.kind != "none"
        error_paths = [line.split(": ", 1)[0] for line in error.errors]
        # The field changed, one inside it, its siblings (a rule of the mapping: `operator: In` wants
        # `values`) or the mapping itself (`needs perCore, value or both`): nothing elsewhere.
        near = change.path if change.kind == "add" else parent(change.path)
        assert all(within(p, near) for p in error_paths), f"{change} gave {error.errors}"
        if change.kind == "add":
            spellings = {str(change.key), repr(change.key), json.dumps(change.key)}
            # YAML reads a NEL or a Unicode line or paragraph separator in a plain key as a line break, which
            # folds to a space: the loader names the key it was given.
            spellings.add(str(change.key).translate({0x85: " ", 0x2028: " ", 0x2029: " "}))
            assert any(k in line for line in error.errors for k in spellings), f"{change} not named: {error}"
    else:
        assert isinstance(loaded, PolicyFile)
        applies(loaded)


# --- the text mangled --------------------------------------------------------------------------------

YAML_BITS = [
    "\t",
    ":",
    ": ",
    "- ",
    "? ",
    "&a ",
    "*a",
    "!!int ",
    "!!float ",
    "!!timestamp ",
    "!!binary ",
    "!!set ",
    "!!python/object/apply:os.system ",
    "!local ",
    "{",
    "}",
    "[",
    "]",
    "'",
    '"',
    "\\",
    "#",
    "|",
    ">",
    "\n---\n",
    "%YAML 1.1\n",
    "\ufeff",
    "\x00",
    "\x85",
    "2001-13-45",
    "2001-02-30 25:61:61",
    "9" * 5000,  # past Python's 4300 digits for an int
    "0x",
    "0o9",
    ".nan",
    ".inf",
    "1.0e+400",
    "~",
    "<<: ",
    "[" * 400,  # deeper than the stack
    "- " * 400,
]


@st.composite
def mangled(draw: st.DrawFn) -> str:
    text = VALID_TEXT
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        cut = draw(st.integers(min_value=0, max_value=8))
        insert = draw(
            st.one_of(
                st.sampled_from(YAML_BITS), st.text(st.characters(exclude_categories=("Cs",)), max_size=4)
            )
        )
        text = text[:at] + insert + text[at + cut :]
    return text


MANGLED_EXAMPLES = 150


@settings(FUZZ_SETTINGS, max_examples=MANGLED_EXAMPLES)
@given(text=mangled())
# PyYAML raised ValueError for a bad timestamp or an int of more than 4300 digits, and RecursionError for
# deep nesting: none of them a PolicyError.
@example(text="nodePolicies:\n- name: a\n  holdTimeout: 2001-13-45\n")
@example(text="nodePolicies:\n- name: a\n  priority: " + "9" * 5000 + "\n")
@example(text="nodePolicies:\n- name: a\n  priority: !!int 0x\n")
@example(text="[" * 1000)
def test_any_text_loads_or_is_a_policy_error(text: str) -> None:
    try:
        loaded = policy.parse_policy_text(text, source="fuzz.yaml")
    except PolicyError as error:
        assert error.errors
        assert all(
            line.startswith(("fuzz.yaml", "staggeringPolicies", "nodePolicies")) or ": " in line
            for line in error.errors
        )
    else:
        applies(loaded)


# --- lockd's reload ----------------------------------------------------------------------------------

RELOAD_EXAMPLES = 60


def test_a_bad_reload_keeps_the_last_good_policy_and_a_good_one_is_taken(tmp_path: Path) -> None:
    policy_path = tmp_path / "policies.yaml"
    load_path = tmp_path / "load.json"
    load_path.write_text(json.dumps({"cpuPercent": 5.0, "ioPercent": 0.0}))
    policy_path.write_text(VALID_TEXT)
    settings_ = grouped(
        Settings,
        {"standalone": True, "node_name": "n", "cores": 4, "load_file": load_path, "policies": policy_path},
    )
    app = daemon.make_app(regrouped(settings_, node_labels=(("node-role", "x"),)))
    state, service = app[lockd_app.POLICY], app[lockd_app.SERVICE]

    @settings(FUZZ_SETTINGS, max_examples=RELOAD_EXAMPLES)
    @given(text=st.one_of(mangled(), mutations().map(lambda m: yaml.safe_dump(m.data, sort_keys=False))))
    @example(
        text="nodePolicies:\n- name: a\n  throttleConfig: {rateLimit: {burst: "
        + "9" * 400
        + ", fillFactor: 1s}}\n"
    )
    @example(text="")  # an emptied file is an error on a reload, not "no policies"
    def check(text: str) -> None:
        good_file, good_policy, good_digest = state.policy_file, service.node_policy, state.digest
        policy_path.write_text(text)
        try:
            expected = policy.parse_policy_text(text, source=str(policy_path), allow_empty=False)
        except PolicyError as error:
            assert lockd_app.reload_policy(app) is False
            assert state.policy_file is good_file and service.node_policy == good_policy
            assert state.digest == good_digest
            if state.failed_digest:  # the same bad text twice is reported once (its error stays)
                assert state.last_error == str(error)
        else:
            changed = lockd_app.reload_policy(app)
            assert changed or state.digest == good_digest
            assert state.policy_file == expected and not state.last_error
            chosen = choose_node_policy(
                policy_file=expected, source=str(policy_path), node_labels={"node-role": "x"}
            )
            assert service.node_policy == chosen.node_policy

    check()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param(
            "nodePolicies:\n- name: a\n  throttleConfig: {rateLimit: {burst: "
            + "9" * 400
            + ", fillFactor: 1s}}\n",
            "nodePolicies[0].throttleConfig.rateLimit.burst: must be at most",
            id="burst-past-any-float",
        ),
        pytest.param(
            "nodePolicies:\n- name: a\n  holdTimeout: " + "9" * 400 + "\n",
            "nodePolicies[0].holdTimeout: is too large",
            id="hold-timeout-past-any-float",
        ),
        pytest.param(
            "nodePolicies:\n- name: a\n  maxWait: 2001-13-45\n",
            ":3:12: invalid YAML: cannot read",
            id="bad-date",
        ),
        pytest.param("[" * 1000, "invalid YAML: nested too deeply", id="deep-nesting"),
    ],
)
def test_lockd_refuses_to_start_on_a_bad_file_with_a_policy_error(
    tmp_path: Path, text: str, named: str
) -> None:
    # lockd's main turns a PolicyError into its message and exit 2; anything else was a traceback.
    policy_path = tmp_path / "policies.yaml"
    policy_path.write_text(text)
    with pytest.raises(PolicyError) as raised:
        daemon.make_app(
            grouped(
                Settings,
                {
                    "standalone": True,
                    "cores": 4,
                    "load_file": tmp_path / "none.json",
                    "policies": policy_path,
                },
            )
        )
    assert named in str(raised.value)
