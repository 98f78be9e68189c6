"""The scheduler's pure decisions: filters, least-allocated spreading, messages, gates, no overcommit."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cluster.kubernetes.placement import (
    Bind,
    MarkUnschedulable,
    needs_condition_update,
    node_info,
    pod_requests,
    schedule,
    usage_by_node,
)


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    *,
    cpu: str | None = None,
    memory: str | None = None,
    node_name: str = "",
    created: str = "2024-01-01T00:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
        "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}], **spec},
        "status": {"phase": "Pending"},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


def binds(decisions: list[Bind | MarkUnschedulable]) -> dict[str, str]:
    return {d.name: d.node for d in decisions if isinstance(d, Bind)}


def test_spreads_least_allocated_first_ties_by_name() -> None:
    pods = [pod(f"p{i}", cpu="1", created=f"2024-01-01T00:00:0{i}Z") for i in range(4)]
    placed = binds(schedule(pods=pods, nodes=[node("b"), node("a")]))
    assert placed == {"p0": "a", "p1": "b", "p2": "a", "p3": "b"}


def test_pods_without_requests_still_spread() -> None:
    placed = binds(schedule(pods=[pod(f"p{i}") for i in range(4)], nodes=[node("n1"), node("n2")]))
    assert sorted(placed.values()) == ["n1", "n1", "n2", "n2"]


def test_effective_requests_take_the_largest_init_container() -> None:
    p = pod("p", cpu="500m", memory="1Gi")
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}]
    req = pod_requests(p)
    assert (req.cpu_millis, req.memory, req.pods) == (2000, 1024**3, 1)


@pytest.mark.parametrize(
    ("pod_spec", "nodes", "message_part"),
    [
        pytest.param({"cpu": "5"}, [node("n1"), node("n2")], "2 Insufficient cpu", id="cpu"),
        pytest.param({"memory": "9Gi"}, [node("n1")], "1 Insufficient memory", id="memory"),
        pytest.param(
            {"nodeSelector": {"disk": "ssd"}},
            [node("n1")],
            "1 node(s) didn't match Pod's node affinity/selector",
            id="selector",
        ),
        pytest.param(
            {},
            [node("n1", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])],
            "1 node(s) had untolerated taint {dedicated: gpu}",
            id="taint",
        ),
        pytest.param({}, [node("n1", unschedulable=True)], "1 node(s) were unschedulable", id="cordoned"),
        pytest.param(
            {},
            [node("n1", ready=False)],
            "untolerated taint {node.kubernetes.io/not-ready: }",
            id="not-ready",
        ),
        pytest.param({}, [node("n1", pods=0)], "1 Too many pods", id="pod-count"),
    ],
)
def test_unschedulable_messages(
    pod_spec: dict[str, Any], nodes: list[dict[str, Any]], message_part: str
) -> None:
    p = pod("p", cpu=pod_spec.pop("cpu", None), memory=pod_spec.pop("memory", None), **pod_spec)
    [decision] = schedule(pods=[p], nodes=nodes)
    assert isinstance(decision, MarkUnschedulable)
    assert decision.reason == "Unschedulable"
    assert decision.message.startswith(f"0/{len(nodes)} nodes are available: ")
    assert message_part in decision.message
    assert decision.message.endswith("Preemption is not helpful for scheduling.")


def test_reasons_are_counted_and_sorted_like_kube_scheduler() -> None:
    nodes = [node("a", labels={"zone": "x"}), node("b"), node("c")]
    [decision] = schedule(pods=[pod("p", cpu="8", nodeSelector={"zone": "x"})], nodes=nodes)
    assert isinstance(decision, MarkUnschedulable)
    assert decision.message.startswith(
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. "
    )


def test_tolerations_selectors_and_affinity_are_respected() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}
    nodes = [node("plain"), node("gpu", labels={"accel": "yes"}, taints=[taint])]
    tolerating = pod(
        "t",
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu"}],
        nodeSelector={"accel": "yes"},
    )
    pinned = pod(
        "pinned",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["plain"]}]}
                    ]
                }
            }
        },
    )
    exists_all = pod(
        "any",
        tolerations=[{"operator": "Exists"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "accel", "operator": "Exists"}]}]
                }
            }
        },
    )
    placed = binds(schedule(pods=[tolerating, pinned, exists_all], nodes=nodes))
    assert placed == {"t": "gpu", "pinned": "plain", "any": "gpu"}


def test_gated_bound_terminating_and_finished_pods_are_left_alone() -> None:
    gated = pod("gated", schedulingGates=[{"name": "example.com/wait"}])
    bound = pod("bound", node_name="n1")
    terminating = pod("bye")
    terminating["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    done = pod("done")
    done["status"]["phase"] = "Succeeded"
    other = pod("other", schedulerName="someone-else")
    decisions = schedule(pods=[gated, bound, terminating, done, other], nodes=[node("n1")])
    assert decisions == [
        MarkUnschedulable(
            "default", "gated", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"
        )
    ]


def test_condition_update_only_when_it_says_something_new() -> None:
    decision = MarkUnschedulable("default", "p", "Unschedulable", "0/1 nodes are available: ...")
    p = pod("p")
    assert needs_condition_update(p, decision)
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": decision.message}
    ]
    assert not needs_condition_update(p, decision)


def test_higher_priority_then_older_pods_go_first() -> None:
    old = pod("old", cpu="3", created="2024-01-01T00:00:00Z")
    new = pod("new", cpu="3", created="2024-01-01T00:00:05Z")
    vip = pod("vip", cpu="3", created="2024-01-01T00:00:09Z", priority=1000)
    decisions = schedule(pods=[new, old, vip], nodes=[node("n1"), node("n2")])
    assert binds(decisions) == {"vip": "n1", "old": "n2"}
    assert [d.name for d in decisions if isinstance(d, MarkUnschedulable)] == ["new"]


@settings(max_examples=60, deadline=None)
@given(
    node_cpus=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4),
    pod_cpus=st.lists(st.integers(min_value=1, max_value=4000), max_size=30),
    preexisting=st.integers(min_value=0, max_value=3),
)
def test_never_overcommits_allocatable(node_cpus: list[int], pod_cpus: list[int], preexisting: int) -> None:
    nodes = [node(f"n{i}", cpu=str(c), memory="1Gi") for i, c in enumerate(node_cpus)]
    bound = [pod(f"b{i}", cpu="500m", memory="100Mi", node_name="n0") for i in range(preexisting)]
    pending = [pod(f"p{i:02d}", cpu=f"{c}m", memory="64Mi") for i, c in enumerate(pod_cpus)]
    decisions = schedule(pods=bound + pending, nodes=nodes)
    assert len(decisions) == len(pending)
    placed = binds(decisions)
    by_name = {p["metadata"]["name"]: p for p in pending}
    final = bound + [
        {**by_name[n], "spec": {**by_name[n]["spec"], "nodeName": node_name}}
        for n, node_name in placed.items()
    ]
    usage = usage_by_node(final)
    for n in nodes:
        info = node_info(n)
        if info.name in placed.values():
            used = usage[info.name]
            assert used.requested.cpu_millis <= info.allocatable.cpu_millis
            assert used.requested.memory <= info.allocatable.memory
    # Whatever was left out did not fit anywhere at that point (30 pods of 64Mi can also fill 1Gi of memory).
    assert all(
        isinstance(d, MarkUnschedulable)
        and ("Insufficient cpu" in d.message or "Insufficient memory" in d.message)
        for d in decisions
        if d.name not in placed
    )
