"""Node policies: MaxConcurrent.limit, which policy a node gets (priority, ties), the built-in default,
and the effective limits reported on /status (the load average, the increments and the dependencies too)."""

from __future__ import annotations

import json

import pytest

from stagger.policy import (
    DEFAULT_NODE_POLICY,
    Dependency,
    LoadAvg,
    MaxConcurrent,
    NodePolicy,
    RateLimit,
    ThrottleConfig,
    describe_node_policy,
    select_node_policy,
)
from stagger.selectors import LabelSelector


@pytest.mark.parametrize(
    ("max_concurrent", "cores", "limit"),
    [
        pytest.param(MaxConcurrent(per_core=0.5, value=4), 64, 4, id="value-wins"),
        pytest.param(MaxConcurrent(value=3), 1, 3, id="value-only"),
        pytest.param(MaxConcurrent(per_core=0.5), 8, 4, id="per-core-exact"),
        pytest.param(MaxConcurrent(per_core=0.5), 3, 2, id="per-core-rounds-up"),
        pytest.param(MaxConcurrent(per_core=0.1), 1, 1, id="at-least-one"),
        pytest.param(MaxConcurrent(per_core=0.1), 30, 3, id="no-float-fuzz"),
        pytest.param(MaxConcurrent(per_core=2), 4, 8, id="more-than-one-per-core"),
        pytest.param(MaxConcurrent(per_core=1), 0, 1, id="zero-cores-counts-as-one"),
    ],
)
def test_max_concurrent_limit(max_concurrent: MaxConcurrent, cores: int, limit: int) -> None:
    assert max_concurrent.limit(cores=cores) == limit


def test_max_concurrent_needs_a_setting() -> None:
    with pytest.raises(ValueError, match="per_core, value or both"):
        MaxConcurrent()


def policy(name: str, priority: int = 0, **selector: str) -> NodePolicy:
    return NodePolicy(name=name, priority=priority, node_selector=LabelSelector.from_labels(selector))


@pytest.mark.parametrize(
    ("policies", "labels", "chosen"),
    [
        pytest.param([], {"a": "1"}, None, id="no-policies"),
        pytest.param([policy("gpu", gpu="true")], {"a": "1"}, None, id="nothing-matches"),
        pytest.param([policy("any")], {}, "any", id="empty-selector-matches"),
        pytest.param(
            [policy("any"), policy("gpu", 10, gpu="true"), policy("big", 5, size="big")],
            {"gpu": "true", "size": "big"},
            "gpu",
            id="highest-priority-wins",
        ),
        pytest.param(
            [policy("gpu", 10, gpu="true"), policy("any")],
            {"size": "big"},
            "any",
            id="higher-priority-not-matching",
        ),
        pytest.param(
            [policy("any"), policy("first", 3), policy("second", 3)],
            {},
            "first",
            id="tie-first-in-file",
        ),
        pytest.param(
            [policy("low", -1), policy("zero", 0)],
            {},
            "zero",
            id="negative-priority",
        ),
    ],
)
def test_select_node_policy(policies: list[NodePolicy], labels: dict[str, str], chosen: str | None) -> None:
    selected = select_node_policy(policies, labels)
    assert (selected.name if selected else None) == chosen


def test_default_node_policy() -> None:
    assert DEFAULT_NODE_POLICY.name == "builtin-default"
    assert DEFAULT_NODE_POLICY.throttle.max_concurrent == MaxConcurrent(per_core=0.5)
    assert DEFAULT_NODE_POLICY.throttle.cpu_max_load == 90
    assert DEFAULT_NODE_POLICY.hold_timeout == 120
    assert DEFAULT_NODE_POLICY.node_selector.matches({"any": "node"})


def test_describe_node_policy() -> None:
    described = describe_node_policy(
        NodePolicy(
            name="busy",
            priority=2,
            throttle=ThrottleConfig(
                cpu_max_load=80,
                io_max_load=20,
                max_concurrent=MaxConcurrent(per_core=0.5),
                rate_limit=RateLimit(burst=2, fill_seconds=2.0),
                cpu_increment_by=10,
                io_increment_by=5,
                load_avg=LoadAvg(max_load=1.5, per_core=True, increment_by=0.25),
                memory_max_load=40,
            ),
            hold_timeout=300,
            min_hold=1.5,
            count_all_starting=True,
            wait_for_daemonsets=True,
            max_wait=600,
            dependencies=(
                Dependency(kind="http", target="http://registry.local:5000/v2/"),
                Dependency(kind="tcp", target="[fd00::1]:5432", timeout=0.5),
                Dependency(kind="http", target="https://reader:s3cret@vault.example:8200/v1/sys/health"),
            ),
        ),
        cores=6,
    )
    assert described == {
        "name": "busy",
        "priority": 2,
        "maxConcurrent": 3,
        "cpuMaxLoad": 80,
        "cpuIncrementBy": 10,
        "ioMaxLoad": 20,
        "ioIncrementBy": 5,
        "memoryMaxLoad": 40,
        "memoryIncrementBy": 0.0,
        "loadAvg": {"maxLoad": 1.5, "perCore": True, "incrementBy": 0.25},
        "rateLimit": {"burst": 2, "fillFactorSeconds": 2.0},
        "holdTimeoutSeconds": 300,
        "minHoldSeconds": 1.5,
        "maxWaitSeconds": 600,
        "maxQueue": None,
        "countAllStarting": True,
        "countDaemonSets": False,
        "waitForDaemonSets": True,
        "daemonSets": {"hostNetwork": False, "namespaces": [], "include": [], "exclude": []},
        "excludeNamespaces": ["kube-system"],
        "probeReadiness": True,
        "probePeriodSeconds": 0.5,
        "dependencies": [
            {
                "kind": "http",
                "target": "http://registry.local:5000/v2/",
                "timeoutSeconds": 2.0,
                "intervalSeconds": None,
                "failIntervalSeconds": None,
            },
            {
                "kind": "tcp",
                "target": "[fd00::1]:5432",
                "timeoutSeconds": 0.5,
                "intervalSeconds": None,
                "failIntervalSeconds": None,
            },
            # A URL's user and password are not shown: /status is read by people and tools.
            {
                "kind": "http",
                "target": "https://vault.example:8200/v1/sys/health",
                "timeoutSeconds": 2.0,
                "intervalSeconds": None,
                "failIntervalSeconds": None,
            },
        ],
    }
    assert json.loads(json.dumps(described)) == described


def test_describe_without_throttles() -> None:
    described = describe_node_policy(NodePolicy(name="open"), cores=4)
    assert (described["maxConcurrent"], described["cpuMaxLoad"], described["rateLimit"]) == (None, None, None)
    assert (described["loadAvg"], described["cpuIncrementBy"], described["dependencies"]) == (None, 0.0, [])
