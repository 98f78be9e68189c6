"""`countDaemonSets` (thundering-herd-scheduler counts DaemonSet pods among the starting): which pods count
against maxConcurrent for each of countAllStarting and countDaemonSets (`lockd.pods.other_starting`:
DaemonSet pods only with countDaemonSets, the others only with countAllStarting, restarts alike,
excluded namespaces never), cluster mode's node view counting them as its node policy says and never
lockd's own pod, what the gates read (`lockd.serviceparts.read_gates`, `pods_matter`) and the maxConcurrent
reason naming the key that counted them."""

from __future__ import annotations

from typing import Any

import pytest

from lockd import pods
from lockd.clusterwatch import NodeView
from lockd.serviceparts import NoNodeState, pods_matter, read_gates
from stagger import nodechecks, policy, throttles
from stagger.informer import InformerSettings, cache_key
from stagger.names import Names

NAMES = Names()


def pod(
    name: str,
    *,
    namespace: str = "default",
    daemonset: bool = False,
    ready: bool = False,
    crash_looping: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if daemonset:
        metadata["ownerReferences"] = [
            {"kind": "DaemonSet", "name": name, "uid": f"ds-{name}", "controller": True}
        ]
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if crash_looping:
        status["containerStatuses"] = [
            {
                "name": "c",
                "ready": False,
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ]
    return {"metadata": metadata, "status": status}


NODE_PODS = [
    pod("web"),
    pod("web-ready", ready=True),
    pod("agent", daemonset=True),
    pod("agent-ready", daemonset=True, ready=True),
    pod("logs", daemonset=True, crash_looping=True, ready=True),
    pod("proxy", namespace="kube-system", daemonset=True),
]


@pytest.mark.parametrize(
    ("workloads", "daemonsets", "expected"),
    [
        pytest.param(True, False, ["web"], id="count-all-starting-alone"),
        pytest.param(False, True, ["agent", "logs"], id="count-daemonsets-alone"),
        pytest.param(True, True, ["agent", "logs", "web"], id="both"),
        pytest.param(False, False, [], id="neither"),
    ],
)
def test_which_pods_count(workloads: bool, daemonsets: bool, expected: list[str]) -> None:
    found = pods.other_starting(
        NODE_PODS,
        names=NAMES,
        exclude_namespaces=["kube-system"],
        holders=[],
        workloads=workloads,
        daemonsets=daemonsets,
    )
    assert [other.name for other in found] == expected


def test_a_crash_looping_daemonset_pod_counts_as_starting_again() -> None:
    found = pods.other_starting(
        [NODE_PODS[4]], names=NAMES, exclude_namespaces=[], holders=[], daemonsets=True
    )
    assert found == [pods.OtherStarting("default", "logs", "crashLoopBackOff")]


def test_by_default_daemonset_pods_do_not_count() -> None:
    found = pods.other_starting(NODE_PODS, names=NAMES, exclude_namespaces=[], holders=[])
    assert [other.name for other in found] == ["web"]


def view_of(node_pods: list[dict[str, Any]], *, own_pod: tuple[str, str] | None) -> NodeView:
    view = NodeView(
        client=None,  # type: ignore[arg-type]  # never runs: its pods are put in its store
        node="n1",
        names=NAMES,
        own_pod=own_pod,
        informer_settings=InformerSettings(),
    )
    view.pods.store = {cache_key(each): each for each in node_pods}
    return view


@pytest.mark.parametrize(
    ("node_policy", "expected"),
    [
        pytest.param(policy.NodePolicy(name="p", count_all_starting=True), ["web"], id="count-all-starting"),
        pytest.param(policy.NodePolicy(name="p", count_daemonsets=True), ["agent", "logs"], id="count-daemonsets"),
        pytest.param(
            policy.NodePolicy(name="p", count_all_starting=True, count_daemonsets=True, exclude_namespaces=()),
            ["agent", "logs", "web", "proxy"],  # by namespace/name
            id="both-every-namespace",
        ),
    ],
)  # fmt: skip
def test_the_node_view_counts_as_the_node_policy_says(
    node_policy: policy.NodePolicy, expected: list[str]
) -> None:
    view = view_of(NODE_PODS, own_pod=None)
    assert [other.name for other in view.starting_elsewhere(node_policy, set())] == expected


def test_lockds_own_pod_never_counts() -> None:
    own = pod("stagger-lockd-x", namespace="stagger", daemonset=True)
    view = view_of([own, pod("agent", daemonset=True)], own_pod=("stagger", "stagger-lockd-x"))
    counted = view.starting_elsewhere(policy.NodePolicy(name="p", count_daemonsets=True), set())
    assert [other.name for other in counted] == ["agent"]


class Starting(NoNodeState):
    """The node's pods as cluster mode's view counts them."""

    def __init__(self, node_pods: list[dict[str, Any]]) -> None:
        self.node_pods = node_pods

    def starting_elsewhere(
        self, node_policy: policy.NodePolicy, holders: set[tuple[str, str]]
    ) -> list[pods.OtherStarting]:
        return pods.other_starting(
            self.node_pods,
            names=NAMES,
            exclude_namespaces=node_policy.exclude_namespaces,
            holders=holders,
            workloads=node_policy.count_all_starting,
            daemonsets=node_policy.count_daemonsets,
        )


LIMIT = policy.ThrottleConfig(max_concurrent=policy.MaxConcurrent(value=2))


@pytest.mark.parametrize(
    ("node_policy", "reason"),
    [
        pytest.param(
            policy.NodePolicy(name="p", throttle=LIMIT, count_daemonsets=True),
            "2 of 2 slots in use: 0 granted + 2 other pods starting (in CrashLoopBackOff: default/logs) "
            "(maxConcurrent, countDaemonSets)",
            id="count-daemonsets",
        ),
        pytest.param(
            policy.NodePolicy(name="p", throttle=LIMIT, count_daemonsets=True, count_all_starting=True),
            "3 of 2 slots in use: 0 granted + 3 other pods starting (in CrashLoopBackOff: default/logs) "
            "(maxConcurrent, countAllStarting, countDaemonSets)",
            id="both",
        ),
    ],
)
def test_the_gates_count_daemonset_pods_and_the_reason_names_the_key(
    node_policy: policy.NodePolicy, reason: str
) -> None:
    gates = read_gates(
        node_policy, node_state=Starting(NODE_PODS), dependencies=dict, dependency_retry=5.0, holders=[]
    )
    sample = throttles.LoadSample(cpu_percent=0.0, io_percent=0.0, source="test")
    checks = nodechecks.NodeChecks(node_policy=node_policy, cores=4, clock=lambda: 0.0, load=lambda: sample)
    verdict = checks.decide(in_use=0, gates=gates)
    assert (verdict.allowed, verdict.throttle, verdict.reason) == (False, "maxConcurrent", reason)
    assert pods_matter(node_policy)


def test_without_either_key_no_pod_is_read() -> None:
    node_policy = policy.NodePolicy(name="p", throttle=LIMIT)
    gates = read_gates(
        node_policy, node_state=Starting(NODE_PODS), dependencies=dict, dependency_retry=5.0, holders=[]
    )
    assert gates is nodechecks.NO_GATES
    assert not pods_matter(node_policy)
