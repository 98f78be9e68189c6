"""lockd.daemonsetwait: which DaemonSets a node waits for under waitForDaemonSets (pods on the node not Ready,
and DaemonSets that should run here with no pod here yet), lockd's own and those being deleted left out,
and the bound on waiting for a missing pod (`--daemonset-wait`), which also bounds waiting for DaemonSets
that cannot be listed (a chart whose RBAC lacks them)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from lockd.daemonsetwait import (
    NOT_LISTED,
    MissingBound,
    Waiting,
    daemonset_view,
    lean_daemonset,
    waiting_for,
)
from lockd.daemonsetwatch import DaemonSetWatch
from stagger.informer import InformerSettings
from stagger.kube import ApiError
from tests.waiting import eventually

NODE = {"metadata": {"name": "n1", "labels": {"role": "worker"}}, "spec": {}}


def ds(
    name: str, *, namespace: str = "kube-system", deleting: bool = False, **template: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"ds-{name}"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    return {"metadata": metadata, "spec": {"template": {"spec": template}}}


def pod(
    name: str,
    *,
    owner: str | None,
    namespace: str = "kube-system",
    ready: bool = False,
    phase: str = "Running",
    deleting: bool = False,
    crash_looping: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"pod-{name}"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"kind": "DaemonSet", "name": owner, "uid": f"ds-{owner}", "controller": True}
        ]
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if crash_looping:
        status["containerStatuses"] = [
            {
                "name": "a",
                "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            }
        ]
    return {"metadata": metadata, "status": status}


def waits(
    pods: list[dict[str, Any]],
    daemonsets: list[dict[str, Any]] | None,
    *,
    own_pod: tuple[str, str] | None = None,
) -> list[str]:
    view = daemonset_view(daemonsets, NODE) if daemonsets is not None else None
    return [str(w) for w in waiting_for(pods, view=view, own_pod=own_pod)]


@pytest.mark.parametrize(
    ("pods", "daemonsets", "expected"),
    [
        pytest.param([], [], [], id="nothing"),
        pytest.param([], [ds("cni")], ["kube-system/cni (no pod on this node yet)"], id="missing"),
        pytest.param(
            [pod("cni-x", owner="cni")], [ds("cni")], ["kube-system/cni (pod not Ready)"], id="not-ready"
        ),
        pytest.param([pod("cni-x", owner="cni", ready=True)], [ds("cni")], [], id="ready"),
        pytest.param(
            [pod("cni-x", owner="cni", crash_looping=True)],
            [ds("cni")],
            ["kube-system/cni (pod in CrashLoopBackOff)"],
            id="crash-looping",
        ),
        pytest.param([], [ds("gpu", nodeSelector={"gpu": "true"})], [], id="selector-excludes-the-node"),
        pytest.param([], [ds("cni", deleting=True)], [], id="daemonset-being-deleted"),
        pytest.param(
            [pod("old-x", owner="old")], [ds("old", deleting=True)], [], id="pod-of-daemonset-being-deleted"
        ),
        pytest.param(
            [pod("cni-x", owner="cni", deleting=True)],
            [ds("cni")],
            ["kube-system/cni (no pod on this node yet)"],
            id="pod-being-replaced",
        ),
        pytest.param(
            [pod("cni-x", owner="cni", phase="Failed")],
            [ds("cni")],
            ["kube-system/cni (no pod on this node yet)"],
            id="pod-failed-is-replaced",
        ),
        pytest.param(
            # DaemonSets not listed (yet): what the pods on the node say alone.
            [pod("agent-x", owner="agent", namespace="monitoring")],
            None,
            ["monitoring/agent (pod not Ready)"],
            id="not-listed-pods-only",
        ),
        pytest.param(
            # A pod whose DaemonSet is unknown (created a moment ago, or listed by another view) still counts.
            [pod("agent-x", owner="agent", namespace="monitoring")],
            [],
            ["monitoring/agent (pod not Ready)"],
            id="pod-of-unknown-daemonset",
        ),
        pytest.param([pod("app", owner=None)], [], [], id="not-a-daemonset-pod"),
        pytest.param(
            [pod("b-x", owner="b")],
            [ds("a"), ds("b"), ds("c", namespace="monitoring")],
            [
                "kube-system/a (no pod on this node yet)",
                "kube-system/b (pod not Ready)",
                "monitoring/c (no pod on this node yet)",
            ],
            id="sorted-each-once",
        ),
    ],
)
def test_waiting_for(
    pods: list[dict[str, Any]], daemonsets: list[dict[str, Any]] | None, expected: list[str]
) -> None:
    assert waits(pods, daemonsets) == expected


def test_lockds_own_daemonset_is_never_waited_for() -> None:
    own = pod("lockd-x", owner="lockd", namespace="stagger")
    assert waits([own], [ds("lockd", namespace="stagger")], own_pod=("stagger", "lockd-x")) == []
    # Not even when its pod on this node is gone for a moment (replaced by a rollout): the DaemonSet is
    # known by the pod that runs this lockd; a rollout's new pod is a new lockd.
    replaced = pod("lockd-x", owner="lockd", namespace="stagger", deleting=True)
    assert waits([replaced], [ds("lockd", namespace="stagger")], own_pod=("stagger", "lockd-x")) == []
    # Without knowing its own pod, lockd's DaemonSet is like any other.
    assert waits([own], [ds("lockd", namespace="stagger")]) == ["stagger/lockd (pod not Ready)"]


def test_no_node_no_missing_pods() -> None:
    view = daemonset_view([ds("cni")], None)
    assert view.eligible == () and waiting_for([], view=view, own_pod=None) == []


def test_the_bound_stops_waiting_for_a_missing_pod_once() -> None:
    bound = MissingBound(bound=10.0)
    missing = Waiting("kube-system", "cni", "podMissing")
    unready = Waiting("monitoring", "agent", "notReady")
    assert bound.apply([missing, unready], now=100.0) == ([missing, unready], [])
    assert bound.apply([missing, unready], now=109.9) == ([missing, unready], [])
    # At the bound: no longer waited for, reported once; a pod that is here and not Ready stays waited for.
    assert bound.apply([missing, unready], now=110.0) == ([unready], [missing])
    assert bound.apply([missing, unready], now=500.0) == ([unready], [])
    # Its pod came (and went again): a new wait, timed anew.
    assert bound.apply([unready], now=501.0) == ([unready], [])
    assert bound.apply([missing], now=502.0) == ([missing], [])
    assert bound.apply([missing], now=512.0) == ([], [missing])


def test_the_bound_covers_daemonsets_not_listed_and_reset_forgets() -> None:
    bound = MissingBound(bound=5.0)
    assert bound.apply([NOT_LISTED], now=0.0) == ([NOT_LISTED], [])
    assert bound.apply([NOT_LISTED], now=5.0) == ([], [NOT_LISTED])
    bound.reset()
    assert bound.apply([NOT_LISTED], now=6.0) == ([NOT_LISTED], [])
    assert str(NOT_LISTED) == "the cluster's DaemonSets (not listed yet)"


def full_daemonset() -> dict[str, Any]:
    """A DaemonSet as kube-apiserver sends it, with what lockd never reads."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "agent",
            "namespace": "monitoring",
            "uid": "ds-agent",
            "resourceVersion": "77",
            "generation": 3,
            "labels": {"app": "agent"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 2000 + "}"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {"role": "worker"},
                    "hostNetwork": True,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "role", "operator": "Exists"}]}
                                ]
                            },
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 1,
                                    "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                                }
                            ],
                        },
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
                    },
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "agent",
                            "image": "agent:1",
                            "env": [{"name": f"V{i}", "value": "x" * 50} for i in range(20)],
                        }
                    ],
                },
            },
        },
        "status": {"desiredNumberScheduled": 40, "numberReady": 39},
    }


@pytest.mark.parametrize(
    "the_node",
    [
        pytest.param(NODE, id="selected"),
        pytest.param({"metadata": {"name": "n1", "labels": {}}}, id="not-selected"),
        pytest.param(
            {
                "metadata": {"name": "n1", "labels": {"role": "w"}},
                "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]},
            },
            id="tainted-tolerated",
        ),
        pytest.param(
            {
                "metadata": {"name": "n1", "labels": {"role": "w"}},
                "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]},
            },
            id="tainted-untolerated",
        ),
    ],
)
def test_every_reading_is_the_same_on_the_lean_daemonset(the_node: dict[str, Any]) -> None:
    item = full_daemonset()
    sent = copy.deepcopy(item)
    lean = lean_daemonset(item)
    assert item == sent
    assert [x["metadata"]["uid"] for x in daemonset_view([lean], the_node).eligible] == [
        x["metadata"]["uid"] for x in daemonset_view([item], the_node).eligible
    ]
    assert waiting_for([], view=daemonset_view([lean], the_node), own_pod=None) == waiting_for(
        [], view=daemonset_view([item], the_node), own_pod=None
    )
    assert (
        "status" not in lean
        and "managedFields" not in lean["metadata"]
        and "annotations" not in lean["metadata"]
    )
    assert "containers" not in lean["spec"]["template"]["spec"]
    assert len(str(lean)) < len(str(item)) / 5


class ForbiddenApi:
    """An API server whose RBAC lacks daemonsets (a chart from before them): every list is refused."""

    def __init__(self) -> None:
        self.lists = 0

    async def list(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.lists += 1
        raise ApiError(status=403, reason="Forbidden", message="daemonsets.apps is forbidden")


async def test_daemonsets_that_cannot_be_listed_hold_grants_at_most_the_bound() -> None:
    now = [0.0]
    expired: list[Waiting] = []
    api = ForbiddenApi()
    watch = DaemonSetWatch(
        client=api,  # type: ignore[arg-type]
        settings=InformerSettings(retry_seconds=0.01, max_retry_seconds=0.01),
        node=lambda: NODE,
        pods=lambda: [pod("agent-x", owner="agent", namespace="monitoring")],
        own_pod=None,
        bound=30.0,
        clock=lambda: now[0],
    )
    watch.on_expired = expired.append
    assert watch.waiting() == ["monitoring/agent (pod not Ready)"]  # not wanted: the pods alone
    task = asyncio.create_task(watch.run())
    try:
        watch.want(True)

        async def listing() -> bool:
            return api.lists >= 2

        await eventually(listing, what="lockd to try to list the DaemonSets")
        assert watch.waiting() == [
            "monitoring/agent (pod not Ready)",
            "the cluster's DaemonSets (not listed yet)",
        ]
        now[0] = 30.0
        assert watch.waiting() == ["monitoring/agent (pod not Ready)"]
        assert [item.why for item in expired] == ["notListed"]
        watch.waiting()
        assert len(expired) == 1  # counted once
        # No longer wanted: the informer stops, and so do the list attempts.
        watch.want(False)

        async def stopped() -> bool:
            return watch.informer is None

        await eventually(stopped, what="the DaemonSet informer to stop")
        tried = api.lists
        await asyncio.sleep(0.1)
        assert api.lists == tried
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
