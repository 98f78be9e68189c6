"""Writing a policy file back (`stagger.policy.render.policy_document`): for generated policy files of every
field, the document dumped as YAML and loaded by stagger's own loader is the same policy file
(parse(render(x)) == x); defaults are left out (a policy of defaults is its name alone); selectors are
written as a plain map when they can be, else as matchExpressions in their own order; the issue 25 fields
(cpu/io incrementBy, loadAvg, dependencies) round-trip as well, and so does `maxBlockedDuration: never`
(math.inf, written "never"), which no other duration may be."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagger.policy import (
    Dependency,
    ExponentialPacer,
    LinearPacer,
    LoadAvg,
    MaxConcurrent,
    MaxConcurrentPacer,
    NodePolicy,
    PolicyFile,
    RateLimit,
    StaggeringPolicy,
    ThrottleConfig,
    parse_policy_text,
)
from stagger.policy.render import policy_document
from stagger.selectors import LabelSelector, Requirement

ROUND_TRIP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
label_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,10}[A-Za-z0-9])?", fullmatch=True)
label_keys = st.one_of(
    label_names,
    st.builds(lambda prefix, name: f"{prefix}/{name}", st.sampled_from(["example.com", "a.b"]), label_names),
)
label_values = st.one_of(st.just(""), label_names)
operators_with_values = st.sampled_from(["In", "NotIn"])


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    key = draw(label_keys)
    if draw(st.booleans()):
        return Requirement(
            key, draw(operators_with_values), tuple(draw(st.lists(label_values, min_size=1, max_size=3)))
        )
    return Requirement(key, draw(st.sampled_from(["Exists", "DoesNotExist"])))


selectors = st.one_of(
    st.builds(lambda terms: LabelSelector(tuple(terms)), st.lists(requirements(), max_size=3)),
    st.builds(LabelSelector.from_labels, st.dictionaries(label_keys, label_values, max_size=3)),
)
# Durations a policy can hold: whole and fractional seconds, from milliseconds to days.
durations = st.one_of(
    st.integers(min_value=1, max_value=10**6).map(float),
    st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False),
)
counts = st.integers(min_value=1, max_value=2**53)
percents = st.floats(min_value=0.01, max_value=100, allow_nan=False)
pacers = st.one_of(
    st.builds(
        ExponentialPacer,
        min_initial=counts,
        multiplier=st.floats(min_value=1.01, max_value=1e6, allow_nan=False),
        max_stagger=counts,
    ),
    st.builds(LinearPacer, step=counts, max_stagger=counts),
    st.builds(MaxConcurrentPacer, value=counts),
)
staggering_policies = st.builds(
    StaggeringPolicy,
    name=names,
    label_selector=selectors,
    pacer=pacers,
    bypass_label_selector=st.none() | selectors,
    grouping_expression=st.none() | st.sampled_from([".spec.containers[0].image", "$.metadata.labels.app"]),
    max_blocked_duration=durations | st.just(math.inf),
    start_timeout=durations,
    mode=st.sampled_from(["lock", "evict", "gate"]),
    hold=st.sampled_from(["nodeSelector", "stub"]),
)
max_concurrent = st.one_of(
    st.builds(MaxConcurrent, per_core=st.floats(min_value=0.01, max_value=64, allow_nan=False)),
    st.builds(MaxConcurrent, value=counts),
    st.builds(MaxConcurrent, per_core=st.floats(min_value=0.01, max_value=64, allow_nan=False), value=counts),
)


def throttles(*, issue_25: bool) -> st.SearchStrategy[ThrottleConfig]:
    """Every throttle, each present or not; with `issue_25`, also incrementBy and loadAvg."""
    increments = st.floats(min_value=0, max_value=100, allow_nan=False) if issue_25 else st.just(0.0)
    load_avg = (
        st.none()
        | st.builds(
            LoadAvg,
            max_load=st.floats(min_value=0.01, max_value=512, allow_nan=False),
            per_core=st.booleans(),
            increment_by=st.floats(min_value=0, max_value=8, allow_nan=False),
        )
        if issue_25
        else st.none()
    )

    @st.composite
    def build(draw: st.DrawFn) -> ThrottleConfig:
        cpu, io = draw(st.none() | percents), draw(st.none() | percents)
        return ThrottleConfig(
            cpu_max_load=cpu,
            io_max_load=io,
            max_concurrent=draw(st.none() | max_concurrent),
            rate_limit=draw(st.none() | st.builds(RateLimit, burst=counts, fill_seconds=durations)),
            # incrementBy is part of `cpu` and `io`: only there when their maxLoad is.
            cpu_increment_by=draw(increments) if cpu is not None else 0.0,
            io_increment_by=draw(increments) if io is not None else 0.0,
            load_avg=draw(load_avg),
        )

    return build()


dependencies = st.one_of(
    st.builds(
        Dependency,
        kind=st.just("http"),
        target=st.sampled_from(["http://127.0.0.1:9999/", "https://es.example.com:9200/_cluster/health"]),
        timeout=durations,
    ),
    st.builds(
        Dependency,
        kind=st.just("tcp"),
        target=st.sampled_from(["mongo:27017", "[::1]:5432"]),
        timeout=durations,
    ),
)


def node_policies(*, issue_25: bool) -> st.SearchStrategy[NodePolicy]:
    return st.builds(
        NodePolicy,
        name=names,
        node_selector=selectors,
        priority=st.integers(min_value=-(2**53), max_value=2**53),
        throttle=throttles(issue_25=issue_25),
        hold_timeout=durations,
        min_hold=st.just(0.0) | durations,
        count_all_starting=st.booleans(),
        exclude_namespaces=st.lists(names, max_size=3).map(tuple),
        wait_for_daemonsets=st.booleans(),
        max_wait=durations,
        unreachable_wait=durations,
        max_queue=st.none() | counts,
        dependencies=st.lists(dependencies, max_size=2).map(tuple) if issue_25 else st.just(()),
    )


def unique_names(policies: list[Any]) -> bool:
    return len({policy.name for policy in policies}) == len(policies)


def policy_files(*, issue_25: bool) -> st.SearchStrategy[PolicyFile]:
    return st.builds(
        lambda staggering, nodes: PolicyFile(
            staggering_policies=tuple(staggering), node_policies=tuple(nodes)
        ),
        st.lists(staggering_policies, max_size=3).filter(unique_names),
        st.lists(node_policies(issue_25=issue_25), max_size=3).filter(unique_names),
    )


def round_trip(policy_file: PolicyFile) -> PolicyFile:
    return parse_policy_text(yaml.safe_dump(policy_document(policy_file), sort_keys=False), source="<render>")


@ROUND_TRIP
@given(policy_files(issue_25=False))
def test_a_rendered_policy_file_loads_as_the_same_policy_file(policy_file: PolicyFile) -> None:
    assert round_trip(policy_file) == policy_file


@ROUND_TRIP
@given(policy_files(issue_25=True))
def test_the_issue_25_fields_round_trip_too(policy_file: PolicyFile) -> None:
    """cpu/io incrementBy, loadAvg and dependencies, as stagger.policy.schema spells them."""
    assert round_trip(policy_file) == policy_file


def test_defaults_are_left_out() -> None:
    policy_file = PolicyFile(
        staggering_policies=(
            StaggeringPolicy(
                name="image-pull",
                label_selector=LabelSelector.from_labels({"staggerimages": "1"}),
                pacer=ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16),
            ),
        ),
        node_policies=(NodePolicy(name="default"),),
    )
    assert policy_document(policy_file) == {
        "staggeringPolicies": [
            {
                "name": "image-pull",
                "labelSelector": {"staggerimages": "1"},
                "pacer": {"exponential": {"minInitial": 4, "multiplier": 4, "maxStagger": 16}},
            }
        ],
        "nodePolicies": [{"name": "default"}],
    }
    assert policy_document(PolicyFile()) == {}


def test_values_other_than_the_defaults_are_written_as_the_file_spells_them() -> None:
    node = NodePolicy(
        name="slow",
        node_selector=LabelSelector.from_labels({"pool": "slow"}),
        priority=2,
        throttle=ThrottleConfig(
            cpu_max_load=80.0,
            cpu_increment_by=10.0,
            max_concurrent=MaxConcurrent(per_core=0.5),
            rate_limit=RateLimit(burst=2, fill_seconds=1.5),
            load_avg=LoadAvg(max_load=1.5, per_core=True),
        ),
        hold_timeout=10.0,
        count_all_starting=True,
        exclude_namespaces=(),
        max_wait=375.0,
        dependencies=(Dependency(kind="http", target="http://es:9200"), Dependency("tcp", "db:5432", 10.0)),
    )
    assert policy_document(PolicyFile(node_policies=(node,)))["nodePolicies"] == [
        {
            "name": "slow",
            "nodeSelector": {"pool": "slow"},
            "priority": 2,
            "throttleConfig": {
                "cpu": {"maxLoad": 80, "incrementBy": 10},
                "maxConcurrent": {"perCore": 0.5},
                "rateLimit": {"burst": 2, "fillFactor": "1.5s"},
                "loadAvg": {"maxLoad": 1.5, "perCore": True},
            },
            "holdTimeout": "10s",
            "maxWait": "6m15s",
            "countAllStarting": True,
            "excludeNamespaces": [],
            "dependencies": [{"http": "http://es:9200"}, {"tcp": "db:5432", "timeout": "10s"}],
        }
    ]


def test_max_blocked_duration_never_is_written_never() -> None:
    never = StaggeringPolicy(
        name="straggler",
        label_selector=LabelSelector(),
        pacer=MaxConcurrentPacer(value=1),
        max_blocked_duration=math.inf,
    )
    (written,) = policy_document(PolicyFile(staggering_policies=(never,)))["staggeringPolicies"]
    assert written["maxBlockedDuration"] == "never"
    assert parse_policy_text(yaml.safe_dump({"staggeringPolicies": [written]})).staggering_policies == (
        never,
    )
    # No other duration has a spelling for it: a policy built in code with one is refused, not miswritten.
    endless_start = StaggeringPolicy(
        name="s", label_selector=LabelSelector(), pacer=MaxConcurrentPacer(value=1), start_timeout=math.inf
    )
    with pytest.raises(ValueError, match="non-finite"):
        policy_document(PolicyFile(staggering_policies=(endless_start,)))


@pytest.mark.parametrize(
    ("selector", "written"),
    [
        pytest.param(LabelSelector(), {}, id="empty"),
        pytest.param(LabelSelector.from_labels({"a": "1", "b": ""}), {"a": "1", "b": ""}, id="plain-map"),
        pytest.param(
            LabelSelector((Requirement("a", "In", ("1", "2")), Requirement("b", "DoesNotExist"))),
            {
                "matchExpressions": [
                    {"key": "a", "operator": "In", "values": ["1", "2"]},
                    {"key": "b", "operator": "DoesNotExist"},
                ]
            },
            id="expressions",
        ),
        pytest.param(
            LabelSelector.from_labels({"matchLabels": "x"}),
            {"matchExpressions": [{"key": "matchLabels", "operator": "In", "values": ["x"]}]},
            id="a-label-named-like-the-selectors-keys",
        ),
    ],
)
def test_selectors(selector: LabelSelector, written: dict[str, Any]) -> None:
    policy_file = PolicyFile(node_policies=(NodePolicy(name="n", node_selector=selector),))
    assert policy_document(policy_file)["nodePolicies"][0].get("nodeSelector", {}) == written
    assert round_trip(policy_file) == policy_file
