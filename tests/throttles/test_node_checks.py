"""The node's decision as one ordered list of checks (`stagger.nodechecks`): a policy gets the checks it
sets, gates first, in `ORDER`; every check name has one check; which denials clear by an event (the
waiter is woken) and which by time is the checks' own say, and lockd's service names no check; the gates
decide from the inputs lockd passes in as data (DaemonSets, dependencies, the other pods starting)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from stagger import nodechecks, policy, throttles

SERVICE = Path(__file__).resolve().parents[2] / "lockd" / "service.py"


def make(node_policy: policy.NodePolicy, *, cpu: float = 0.0) -> nodechecks.NodeChecks:
    sample = throttles.LoadSample(cpu_percent=cpu, io_percent=0.0, source="test")
    return nodechecks.NodeChecks(node_policy=node_policy, cores=4, clock=lambda: 0.0, load=lambda: sample)


EVERYTHING = policy.NodePolicy(
    name="all",
    wait_for_daemonsets=True,
    dependencies=(policy.Dependency(kind="tcp", target="db:5432"),),
    throttle=policy.ThrottleConfig(
        max_concurrent=policy.MaxConcurrent(value=2),
        rate_limit=policy.RateLimit(burst=1, fill_seconds=1.0),
        load_avg=policy.LoadAvg(max_load=4),
        cpu_max_load=80,
        io_max_load=20,
        memory_max_load=50,
    ),
)


def test_a_policy_gets_the_checks_it_sets_in_order() -> None:
    assert [check.name for check in make(EVERYTHING).checks] == [
        "daemonSets",
        "dependency",
        "maxConcurrent",
        "rateLimit",
        "loadAvg",
        "cpu",
        "io",
        "memory",
    ]
    assert make(policy.NodePolicy(name="none")).checks == ()
    only_cpu = policy.NodePolicy(name="cpu", throttle=policy.ThrottleConfig(cpu_max_load=80))
    assert [check.name for check in make(only_cpu).checks] == ["cpu"]


def test_every_check_name_has_one_check() -> None:
    assert sorted(kind.name for kind in nodechecks.ORDER) == sorted(get_args(throttles.CheckName))


@pytest.mark.parametrize(
    ("said_no", "by_event"),
    [
        pytest.param(None, True, id="queued-behind-others"),
        pytest.param("maxConcurrent", True, id="slot-freed"),
        pytest.param("dependency", True, id="dependency-up"),
        pytest.param("daemonSets", False, id="daemonsets"),
        pytest.param("rateLimit", False, id="token"),
        pytest.param("loadAvg", False, id="load-average"),
        pytest.param("cpu", False, id="cpu"),
        pytest.param("io", False, id="io"),
        pytest.param("memory", False, id="memory"),
        pytest.param("group", False, id="group-pacer"),
        pytest.param("api", False, id="api-write"),
    ],
)
def test_which_denials_clear_by_an_event(said_no: str | None, by_event: bool) -> None:
    assert nodechecks.clears_by_event(said_no) is by_event


def test_the_service_names_no_check() -> None:
    """Which denials clear by an event is the checks' say: lockd's service spells no check's name."""
    names = set(get_args(throttles.CheckName))
    spelled = {
        node.value
        for node in ast.walk(ast.parse(SERVICE.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    }
    assert spelled == set()


@pytest.mark.parametrize(
    ("gates", "in_use", "reason", "said_no"),
    [
        pytest.param(
            nodechecks.GateInputs(daemonsets_waiting=["kube-system/cni (no pod on this node yet)"]),
            5,
            "waiting for this node's DaemonSets: kube-system/cni (no pod on this node yet) (waitForDaemonSets)",
            "daemonSets",
            id="daemonsets-before-everything",
        ),
        pytest.param(
            nodechecks.GateInputs(
                dependencies_down=[("tcp db:5432", "connection refused"), ("tcp cache:6379", "timed out")],
                dependency_retry=3.0,
            ),
            5,
            "waiting for dependency tcp db:5432: connection refused (and 1 more failing)",
            "dependency",
            id="dependency-before-the-throttles",
        ),
        pytest.param(
            nodechecks.GateInputs(
                others_starting=1, others_restarting=" (in CrashLoopBackOff: default/web-1)"
            ),
            1,
            "2 of 2 slots in use: 1 granted + 1 other pods starting (in CrashLoopBackOff: default/web-1) "
            "(maxConcurrent, countAllStarting)",
            "maxConcurrent",
            id="count-all-starting",
        ),
        pytest.param(
            nodechecks.NO_GATES, 2, "2 of 2 slots in use (maxConcurrent)", "maxConcurrent", id="full"
        ),
    ],
)
def test_the_gates_decide_from_their_inputs(
    gates: nodechecks.GateInputs, in_use: int, reason: str, said_no: str
) -> None:
    verdict = make(EVERYTHING, cpu=99.0).decide(in_use=in_use, gates=gates)
    assert (verdict.reason, verdict.throttle) == (reason, said_no)


def test_a_dependency_denial_hints_the_check_interval() -> None:
    gates = nodechecks.GateInputs(
        dependencies_down=[("tcp db:5432", "not checked yet")], dependency_retry=3.0
    )
    assert make(EVERYTHING).decide(in_use=0, gates=gates).retry_after == 3.0
