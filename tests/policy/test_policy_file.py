"""The policy file: the seed and DESIGN.md examples load with exact values; `maxBlockedDuration: never` loads
as math.inf (and the smallest of several policies is still `min`); every class of error has its exact
message; all errors of a file are reported at once; files and YAML errors name the file."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagger.policy import (
    ExponentialPacer,
    LinearPacer,
    MaxConcurrent,
    MaxConcurrentPacer,
    NodePolicy,
    PolicyError,
    PolicyFile,
    RateLimit,
    StaggeringPolicy,
    ThrottleConfig,
    load_policy_file,
    parse_policy_file,
    parse_policy_text,
)
from stagger.selectors import LabelSelector, Requirement

SEED = """\
staggeringPolicies:
- name: image-pull
  labelSelector:
    staggerimages: "1"
  maxBlockedDuration: 10m
  groupingExpression: .spec.containers[0].image
  pacer:
    exponential:
      minInitial: 4
      maxStagger: 16
      multiplier: 4
"""

# The example of DESIGN.md, with its `bypassLabelSelector: {...}` placeholder filled in.
DESIGN = """\
staggeringPolicies:              # cluster-wide groups
- name: image-pull
  labelSelector: {staggerimages: "1"}        # map, or {matchLabels, matchExpressions}
  bypassLabelSelector: {stagger-bypass: "1"} # matched: not held, but counted against pacing
  groupingExpression: .spec.containers[0].image
  maxBlockedDuration: 10m                    # then released regardless
  mode: lock                                 # lock (default) | evict | gate
  pacer:
    exponential: {minInitial: 4, multiplier: 4, maxStagger: 16}
    # linear: {step: 2, maxStagger: 10}
nodePolicies:                    # per node; highest priority whose nodeSelector matches wins
- name: default
  nodeSelector: {}
  priority: 0
  throttleConfig:
    cpu: {maxLoad: 80}                       # percent of all CPUs busy
    io: {maxLoad: 20}                        # percent IO pressure (PSI some avg10), else iowait share
    maxConcurrent: {perCore: 0.5, value: 4}  # value wins over perCore
    rateLimit: {burst: 2, fillFactor: 2s}    # one token every fillFactor
  holdTimeout: 5m                            # a slot ends at Ready, termination, deletion, or this
  countAllStarting: false                    # also count non-Ready pods on the node that do not use stagger
  waitForDaemonSets: false                   # grant nothing until this node's DaemonSet pods are Ready
  maxWait: 10m                               # the init client gives up waiting (fail-open) after this
"""

IMAGE_PULL = StaggeringPolicy(
    name="image-pull",
    label_selector=LabelSelector((Requirement("staggerimages", "In", ("1",)),)),
    pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
    grouping_expression=".spec.containers[0].image",
    max_blocked_duration=600.0,
)


def test_seed_example_loads_exactly() -> None:
    policy_file = parse_policy_file(yaml.safe_load(SEED))
    assert policy_file == PolicyFile(staggering_policies=(IMAGE_PULL,))
    (policy,) = policy_file.staggering_policies
    assert (policy.start_timeout, policy.mode, policy.hold, policy.bypass_label_selector) == (
        300.0,
        "lock",
        "nodeSelector",
        None,
    )
    assert policy.grouping is not None


def test_design_example_loads_exactly(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(DESIGN, encoding="utf-8")
    policy_file = load_policy_file(path)
    bypass = LabelSelector((Requirement("stagger-bypass", "In", ("1",)),))
    assert policy_file.staggering_policies == (
        StaggeringPolicy(
            name="image-pull",
            label_selector=IMAGE_PULL.label_selector,
            bypass_label_selector=bypass,
            pacer=IMAGE_PULL.pacer,
            grouping_expression=".spec.containers[0].image",
            max_blocked_duration=600.0,
            mode="lock",
        ),
    )
    assert policy_file.node_policies == (
        NodePolicy(
            name="default",
            node_selector=LabelSelector(),
            priority=0,
            throttle=ThrottleConfig(
                cpu_max_load=80.0,
                io_max_load=20.0,
                max_concurrent=MaxConcurrent(per_core=0.5, value=4),
                rate_limit=RateLimit(burst=2, fill_seconds=2.0),
            ),
            hold_timeout=300.0,
            count_all_starting=False,
            wait_for_daemonsets=False,
            max_wait=600.0,
        ),
    )


def test_every_field_of_both_kinds() -> None:
    policy_file = parse_policy_file(
        {
            "staggeringPolicies": [
                {
                    "name": "jobs",
                    "labelSelector": {"matchExpressions": [{"key": "job-name", "operator": "Exists"}]},
                    "pacer": {"linear": {"step": 2, "maxStagger": 10}},
                    "startTimeout": "90s",
                    "maxBlockedDuration": "1h30m",
                    "mode": "evict",
                    "hold": "stub",
                }
            ],
            "nodePolicies": [
                {
                    "name": "gpu",
                    "nodeSelector": {"gpu": "true"},
                    "priority": -3,
                    "minHold": "500ms",
                    "excludeNamespaces": [],
                    "countAllStarting": True,
                    "waitForDaemonSets": True,
                    "maxWait": 30,
                }
            ],
        }
    )
    (jobs,) = policy_file.staggering_policies
    assert (
        jobs.pacer,
        jobs.start_timeout,
        jobs.max_blocked_duration,
        jobs.mode,
        jobs.hold,
        jobs.grouping,
    ) == (
        LinearPacer(step=2, max_stagger=10),
        90.0,
        5400.0,
        "evict",
        "stub",
        None,
    )
    (gpu,) = policy_file.node_policies
    assert gpu == NodePolicy(
        name="gpu",
        node_selector=LabelSelector.from_labels({"gpu": "true"}),
        priority=-3,
        min_hold=0.5,
        exclude_namespaces=(),
        count_all_starting=True,
        wait_for_daemonsets=True,
        max_wait=30.0,
    )


def test_max_concurrent_pacer_loads() -> None:
    policy_file = parse_policy_text(
        "staggeringPolicies:\n"
        "- name: warm-cache\n"
        "  labelSelector: {app: cache}\n"
        "  pacer:\n"
        "    maxConcurrent: {value: 3}\n"
    )
    (warm,) = policy_file.staggering_policies
    assert warm.pacer == MaxConcurrentPacer(value=3)


def test_max_blocked_duration_never_is_infinite() -> None:
    pacer = "pacer: {maxConcurrent: {value: 1}}"
    policy_file = parse_policy_text(
        "staggeringPolicies:\n"
        f"- {{name: straggler, labelSelector: {{}}, maxBlockedDuration: never, {pacer}}}\n"
        f"- {{name: per-node, labelSelector: {{}}, maxBlockedDuration: 90s, {pacer}}}\n"
    )
    straggler, per_node = policy_file.staggering_policies
    assert straggler.max_blocked_duration == math.inf
    assert isinstance(straggler.max_blocked_duration, float)
    assert min(straggler.max_blocked_duration, per_node.max_blocked_duration) == 90.0


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(None, id="null-document"),
        pytest.param({}, id="empty-mapping"),
        pytest.param({"staggeringPolicies": [], "nodePolicies": []}, id="empty-lists"),
        pytest.param({"staggeringPolicies": None}, id="null-list"),
    ],
)
def test_empty_files_are_empty(data: object) -> None:
    assert parse_policy_file(data) == PolicyFile()


def test_empty_file_on_disk_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n", encoding="utf-8")
    assert load_policy_file(path) == PolicyFile()


def staggering(**overrides: Any) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "name": "p",
        "labelSelector": {"a": "b"},
        "pacer": {"linear": {"step": 1, "maxStagger": 2}},
    }
    policy.update(overrides)
    return {"staggeringPolicies": [policy]}


def node(**overrides: Any) -> dict[str, Any]:
    return {"nodePolicies": [{"name": "n", **overrides}]}


def throttle(**overrides: Any) -> dict[str, Any]:
    return node(throttleConfig=overrides)


S = "staggeringPolicies[0]"
N = "nodePolicies[0]"
T = "nodePolicies[0].throttleConfig"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(
            [1, 2],
            "<policy>: must be a mapping with staggeringPolicies and/or nodePolicies (got [1, 2])",
            id="top-level-not-mapping",
        ),
        pytest.param(
            {"nodePolicy": []},
            "nodePolicy: unknown key; did you mean 'nodePolicies'?",
            id="unknown-top-level-key",
        ),
        pytest.param(
            {"rules": []},
            "rules: unknown key; expected one of staggeringPolicies, nodePolicies",
            id="unknown-key-no-suggestion",
        ),
        pytest.param(
            {"nodePolicies": {"name": "n"}},
            "nodePolicies: must be a list (got {'name': 'n'})",
            id="list-expected",
        ),
        pytest.param(
            {"nodePolicies": ["n"]},
            "nodePolicies[0]: must be a mapping with keys name, nodeSelector, priority, throttleConfig, "
            "holdTimeout, minHold, countAllStarting, excludeNamespaces, waitForDaemonSets, daemonSets, countDaemonSets, maxWait, unreachableWait, maxQueue, dependencies, probeReadiness, probePeriod (got 'n')",
            id="mapping-expected",
        ),
        pytest.param(
            staggering(pacer={"exponential": {"minInitial": 4, "multiplier": 0.5, "maxStagger": 16}}),
            f"{S}.pacer.exponential.multiplier: must be greater than 1 (got 0.5)",
            id="multiplier-not-above-1",
        ),
        pytest.param(
            staggering(pacer={"exponential": {"minInitial": 0, "multiplier": 2, "maxStagger": 16}}),
            f"{S}.pacer.exponential.minInitial: must be at least 1 (got 0)",
            id="min-initial-zero",
        ),
        pytest.param(
            staggering(pacer={"exponential": {"minInitial": 4, "multiplier": 2}}),
            f"{S}.pacer.exponential.maxStagger: is required",
            id="pacer-field-missing",
        ),
        pytest.param(
            staggering(pacer={"linear": {"step": "2", "maxStagger": 10}}),
            f"{S}.pacer.linear.step: must be an integer (got '2')",
            id="string-for-int",
        ),
        pytest.param(
            staggering(pacer={"linear": {"step": True, "maxStagger": 10}}),
            f"{S}.pacer.linear.step: must be an integer (got True)",
            id="bool-is-not-int",
        ),
        pytest.param(
            staggering(pacer={"linear": {"step": 2.0, "maxStagger": 10}}),
            f"{S}.pacer.linear.step: must be an integer (got 2.0)",
            id="float-for-int",
        ),
        pytest.param(
            staggering(pacer={}),
            f"{S}.pacer: must have exactly one of exponential, linear or maxConcurrent (got {{}})",
            id="pacer-neither",
        ),
        pytest.param(
            staggering(
                pacer={
                    "linear": {"step": 1, "maxStagger": 2},
                    "exponential": {"minInitial": 1, "multiplier": 2, "maxStagger": 2},
                }
            ),
            f"{S}.pacer: must have exactly one of exponential, linear or maxConcurrent (got {{'exponential': "
            "{'maxStagger': 2, 'minInitial': 1, 'multiplier': 2}, 'linear': {'maxStagger': 2, 'step': 1}})",
            id="pacer-both",
        ),
        pytest.param(
            staggering(pacer={"maxConcurrent": {"value": 0}}),
            f"{S}.pacer.maxConcurrent.value: must be at least 1 (got 0)",
            id="max-concurrent-zero",
        ),
        pytest.param(
            staggering(pacer={"maxConcurrent": {"value": 2.5}}),
            f"{S}.pacer.maxConcurrent.value: must be an integer (got 2.5)",
            id="max-concurrent-not-integer",
        ),
        pytest.param(
            staggering(pacer={"maxConcurrent": {}}),
            f"{S}.pacer.maxConcurrent.value: is required",
            id="max-concurrent-value-missing",
        ),
        pytest.param(
            staggering(pacer={"maxConcurrent": {"value": 3, "perCore": 1}}),
            f"{S}.pacer.maxConcurrent.perCore: unknown key; expected one of value",
            id="max-concurrent-no-per-core",
        ),
        pytest.param(
            staggering(pacer={"maxConcurrent": {"value": 3}, "linear": {"step": 1, "maxStagger": 2}}),
            f"{S}.pacer: must have exactly one of exponential, linear or maxConcurrent (got {{'linear': "
            "{'maxStagger': 2, 'step': 1}, 'maxConcurrent': {'value': 3}})",
            id="max-concurrent-and-linear",
        ),
        pytest.param(
            staggering(name=None),
            f"{S}.name: is required",
            id="name-missing",
        ),
        pytest.param(
            staggering(name="Image_Pull"),
            f"{S}.name: must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting "
            "and ending with a letter or digit (got 'Image_Pull')",
            id="name-not-dns-label",
        ),
        pytest.param(
            staggering(name=7),
            f"{S}.name: must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting "
            "and ending with a letter or digit (got 7)",
            id="name-not-string",
        ),
        pytest.param(
            staggering(labelSelector=None),
            f"{S}.labelSelector: is required",
            id="label-selector-missing",
        ),
        pytest.param(
            staggering(bypassLabelSelector={"matchExpressions": [{"key": "a", "operator": "Equals"}]}),
            f"{S}.bypassLabelSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, "
            "DoesNotExist (got 'Equals')",
            id="bad-selector",
        ),
        pytest.param(
            staggering(mode="Lock"),
            f"{S}.mode: must be one of lock, evict, gate (got 'Lock')",
            id="bad-mode",
        ),
        pytest.param(
            staggering(hold="evict"),
            f"{S}.hold: must be one of nodeSelector, stub (got 'evict')",
            id="bad-hold",
        ),
        pytest.param(
            staggering(groupingExpression=".spec.containers["),
            f"{S}.groupingExpression: not a valid JSONPath expression: Parse error near the end of string! "
            "(got '.spec.containers[')",
            id="bad-jsonpath",
        ),
        pytest.param(
            staggering(groupingExpression=["a"]),
            f"{S}.groupingExpression: must be a JSONPath expression like .spec.containers[0].image "
            "(got ['a'])",
            id="jsonpath-not-string",
        ),
        pytest.param(
            staggering(maxBlockedDuration="10 minutes"),
            f"{S}.maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got '10 minutes')",
            id="bad-duration",
        ),
        pytest.param(
            staggering(startTimeout="0s"),
            f"{S}.startTimeout: must be longer than 0s (got '0s')",
            id="zero-duration",
        ),
        pytest.param(
            staggering(maxBlockedDuration="Never"),
            f"{S}.maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got 'Never')",
            id="never-is-spelt-in-lower-case",
        ),
        pytest.param(
            staggering(maxBlockedDuration="0s"),
            f"{S}.maxBlockedDuration: must be longer than 0s, or never for no limit (got '0s')",
            id="zero-max-blocked-names-never",
        ),
        pytest.param(
            staggering(startTimeout="never"),
            f"{S}.startTimeout: not a duration like 90s, 10m or 1h30m (got 'never')",
            id="never-only-for-max-blocked",
        ),
        pytest.param(
            staggering(groupingExpresion=".spec"),
            f"{S}.groupingExpresion: unknown key; did you mean 'groupingExpression'?",
            id="misspelt-key",
        ),
        pytest.param(
            {
                "staggeringPolicies": [
                    {"name": "p", "labelSelector": {}, "pacer": {"linear": {"step": 1, "maxStagger": 1}}},
                    {"name": "p", "labelSelector": {}, "pacer": {"linear": {"step": 1, "maxStagger": 1}}},
                ]
            },
            "staggeringPolicies[1].name: duplicate name; staggeringPolicies[0] has it already (got 'p')",
            id="duplicate-staggering-name",
        ),
        pytest.param(
            {"nodePolicies": [{"name": "n"}, {"name": "m"}, {"name": "n"}]},
            "nodePolicies[2].name: duplicate name; nodePolicies[0] has it already (got 'n')",
            id="duplicate-node-name",
        ),
        pytest.param(
            throttle(maxConcurent={"value": 2}),
            f"{T}.maxConcurent: unknown key; did you mean 'maxConcurrent'?",
            id="misspelt-throttle-key",
        ),
        pytest.param(
            throttle(cpu={"maxLoad": 0}),
            f"{T}.cpu.maxLoad: must be greater than 0 and at most 100 (got 0)",
            id="cpu-load-zero",
        ),
        pytest.param(
            throttle(io={"maxLoad": 100.5}),
            f"{T}.io.maxLoad: must be greater than 0 and at most 100 (got 100.5)",
            id="io-load-over-100",
        ),
        pytest.param(
            throttle(cpu={"maxLoad": "80%"}),
            f"{T}.cpu.maxLoad: must be a number (got '80%')",
            id="load-not-number",
        ),
        pytest.param(
            throttle(cpu={}),
            f"{T}.cpu.maxLoad: is required",
            id="load-missing",
        ),
        pytest.param(
            throttle(cpu=80),
            f"{T}.cpu: must be a mapping with keys maxLoad, incrementBy (got 80)",
            id="load-not-mapping",
        ),
        pytest.param(
            throttle(maxConcurrent={}),
            f"{T}.maxConcurrent: needs perCore, value or both (got {{}})",
            id="max-concurrent-empty",
        ),
        pytest.param(
            throttle(maxConcurrent={"perCore": 0}),
            f"{T}.maxConcurrent.perCore: must be greater than 0 (got 0)",
            id="per-core-zero",
        ),
        pytest.param(
            throttle(maxConcurrent={"value": 0}),
            f"{T}.maxConcurrent.value: must be at least 1 (got 0)",
            id="value-zero",
        ),
        pytest.param(
            throttle(rateLimit={"burst": 0, "fillFactor": "1s"}),
            f"{T}.rateLimit.burst: must be at least 1 (got 0)",
            id="burst-zero",
        ),
        pytest.param(
            throttle(rateLimit={"burst": 1, "fillFactor": 0}),
            f"{T}.rateLimit.fillFactor: must be longer than 0s (got 0)",
            id="fill-factor-zero",
        ),
        pytest.param(
            throttle(rateLimit={"burst": 1}),
            f"{T}.rateLimit.fillFactor: is required",
            id="fill-factor-missing",
        ),
        pytest.param(
            node(holdTimeout=-1),
            f"{N}.holdTimeout: must not be negative (got -1)",
            id="negative-duration",
        ),
        pytest.param(
            node(minHold="-1s"),
            f"{N}.minHold: not a duration like 90s, 10m or 1h30m (got '-1s')",
            id="min-hold-negative",
        ),
        pytest.param(
            node(countAllStarting="yes please"),
            f"{N}.countAllStarting: must be true or false (got 'yes please')",
            id="bool-expected",
        ),
        pytest.param(
            node(priority=1.5),
            f"{N}.priority: must be an integer (got 1.5)",
            id="priority-not-int",
        ),
        pytest.param(
            node(excludeNamespaces="kube-system"),
            f"{N}.excludeNamespaces: must be a list (got 'kube-system')",
            id="namespaces-not-list",
        ),
        pytest.param(
            node(excludeNamespaces=["kube-system", "Bad_NS"]),
            f"{N}.excludeNamespaces[1]: must be a DNS-1123 label: at most 63 lowercase letters, digits or "
            "'-', starting and ending with a letter or digit (got 'Bad_NS')",
            id="bad-namespace",
        ),
        pytest.param(
            node(nodeSelector={"matchLabels": {"gpu": True}}),
            f"{N}.nodeSelector.matchLabels.gpu: label value must be a string; quote it in YAML (got True)",
            id="unquoted-label-value",
        ),
    ],
)
def test_error_messages(data: object, error: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_file(data)
    assert caught.value.errors == (error,)
    assert str(caught.value) == error


def test_minimum_values_are_accepted() -> None:
    parse_policy_file(
        node(
            minHold=0,
            throttleConfig={
                "cpu": {"maxLoad": 100},
                "io": {"maxLoad": 0.5},
                "maxConcurrent": {"perCore": 0.01},
                "rateLimit": {"burst": 1, "fillFactor": "1ms"},
            },
        )
    )
    parse_policy_file(
        staggering(pacer={"exponential": {"minInitial": 1, "multiplier": 1.01, "maxStagger": 1}})
    )


def test_all_errors_reported_at_once() -> None:
    data = {
        "staggeringPolicies": [
            {
                "name": "Bad",
                "labelSelector": {"a": 1},
                "pacer": {"exponential": {"minInitial": 0, "multiplier": 1, "maxStagger": 1}},
                "mode": "x",
            },
            {
                "labelSelector": {},
                "pacer": {"linear": {"step": 1, "maxStagger": 1}},
                "maxBlockedDuration": "x",
            },
        ],
        "nodePolicies": [
            {"name": "a", "throttleConfig": {"cpu": {"maxLoad": 101}, "maxConcurent": {}}},
            {"name": "a", "holdTimeout": "0s"},
        ],
        "extra": True,
    }
    with pytest.raises(PolicyError) as caught:
        parse_policy_file(data, source="cfg.yaml")
    assert caught.value.source == "cfg.yaml"
    assert sorted(caught.value.errors) == sorted(
        [
            "extra: unknown key; expected one of staggeringPolicies, nodePolicies",
            "staggeringPolicies[0].name: must be a DNS-1123 label: at most 63 lowercase letters, digits or "
            "'-', starting and ending with a letter or digit (got 'Bad')",
            "staggeringPolicies[0].labelSelector.a: label value must be a string; quote it in YAML (got 1)",
            "staggeringPolicies[0].pacer.exponential.minInitial: must be at least 1 (got 0)",
            "staggeringPolicies[0].pacer.exponential.multiplier: must be greater than 1 (got 1)",
            "staggeringPolicies[0].mode: must be one of lock, evict, gate (got 'x')",
            "staggeringPolicies[1].name: is required",
            "staggeringPolicies[1].maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got 'x')",
            "nodePolicies[0].throttleConfig.cpu.maxLoad: must be greater than 0 and at most 100 (got 101)",
            "nodePolicies[0].throttleConfig.maxConcurent: unknown key; did you mean 'maxConcurrent'?",
            "nodePolicies[1].name: duplicate name; nodePolicies[0] has it already (got 'a')",
            "nodePolicies[1].holdTimeout: must be longer than 0s (got '0s')",
        ]
    )
    assert str(caught.value) == "\n".join(caught.value.errors)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            "nodePolicies:\n- name: a\n  priority: [1\n",
            "{path}:4:1: invalid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence)",
            id="syntax-error-with-line",
        ),
        pytest.param(
            "nodePolicies:\n- name: a\n  priority: 1\n  priority: 2\n",
            "{path}:4:3: invalid YAML: found duplicate key 'priority' (while constructing a mapping)",
            id="duplicate-yaml-key",
        ),
        pytest.param(
            "- 1\n",
            "{path}: must be a mapping with staggeringPolicies and/or nodePolicies, or a PacemakerConfig (got [1])",
            id="list",
        ),
    ],
)
def test_load_reports_file_and_line(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy_file(path)
    assert caught.value.errors == (error.format(path=path),)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "nodePolicies:\n- &base {name: a, priority: 1}\n- {<<: *base, name: b}\n", id="merge-key"
        ),
        pytest.param(
            # 468 bytes that expand to millions of strings: the error must stay short.
            'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n",
            id="alias-bomb",
        ),
    ],
)
def test_yaml_aliases_are_refused_with_a_short_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy_file(path)
    (error,) = caught.value.errors
    assert error.startswith(f"{path}:")
    assert error.endswith("invalid YAML: YAML aliases (*name) are not allowed in a policy file")
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "!!timestamp a: 1", "cannot read 'a' as tag:yaml.org,2002:timestamp", id="timestamp-key"
        ),
        pytest.param("!!set [1]", "cannot read a sequence as tag:yaml.org,2002:set", id="set-of-sequence"),
        pytest.param("!!map a", "cannot read 'a' as tag:yaml.org,2002:map", id="map-of-scalar"),
        pytest.param("a: !!set [1]", "cannot read a sequence as tag:yaml.org,2002:set", id="nested"),
    ],
)
def test_a_tag_that_does_not_fit_its_value_is_a_policy_error(text: str, expected: str) -> None:
    """PyYAML raised AttributeError or TypeError for these (found by tests/fuzz/test_policy_files.py): a
    reload then died with a traceback instead of keeping the last good policy."""
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, source="policy.yaml")
    (error,) = caught.value.errors
    assert error.startswith("policy.yaml:1:") and error.endswith(f"invalid YAML: {expected}"), error


def test_policy_files_over_256_kib_are_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("# padding\n" * 30_000, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        load_policy_file(path)
    assert caught.value.errors == (f"{path}: the policy file is larger than 256 KiB; refused",)
    with pytest.raises(PolicyError, match="larger than 256 KiB"):
        parse_policy_text("#" * (256 * 1024 + 1))


def test_an_empty_file_is_an_error_only_when_asked() -> None:
    assert parse_policy_text("# nothing\n") == PolicyFile()
    with pytest.raises(PolicyError, match="the policy file is empty"):
        parse_policy_text("# nothing\n", source="p.yaml", allow_empty=False)


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(PolicyError) as caught:
        load_policy_file(missing)
    assert caught.value.errors == (f"{missing}: cannot read the policy file: No such file or directory",)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PolicyError, match=r"binary\.yaml: cannot read the policy file: 'utf-8' codec"):
        load_policy_file(binary)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
policy_keys = st.sampled_from(
    [
        "name",
        "labelSelector",
        "pacer",
        "exponential",
        "linear",
        "step",
        "maxStagger",
        "throttleConfig",
        "cpu",
        "maxLoad",
        "maxConcurrent",
        "perCore",
        "value",
        "rateLimit",
        "burst",
        "fillFactor",
        "mode",
        "groupingExpression",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "holdTimeout",
    ]
)
policy_like = st.recursive(
    json_values,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(policy_keys, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["staggeringPolicies", "nodePolicies", "other"]), policy_like))
def test_any_data_gives_a_policy_file_or_a_policy_error(data: dict[str, Any]) -> None:
    try:
        result = parse_policy_file(data)
    except PolicyError as error:
        assert error.errors
        assert all(": " in message for message in error.errors)
    else:
        assert isinstance(result, PolicyFile)
