"""Pure pod views of cluster-mode lockd: identity checks, start-up stage, countAllStarting (with pods
starting again: CrashLoopBackOff, restarted and not ready yet), and which slots to rebuild after a restart.
DaemonSet readiness is tests/lockd/test_daemonsetwait.py."""

from __future__ import annotations

from typing import Any

import pytest

from lockd import pods
from stagger.names import Names

NAMES = Names()


def pod(
    name: str,
    *,
    namespace: str = "default",
    uid: str = "uid-1",
    ready: bool = False,
    phase: str = "Pending",
    deleting: bool = False,
    owner: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    if owner:
        kind, _, owner_name = owner.partition("/")
        metadata["ownerReferences"] = [{"kind": kind, "name": owner_name, "controller": True, "uid": "o"}]
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return {"metadata": metadata, "status": status}


@pytest.mark.parametrize(
    ("subject", "uid", "problem"),
    [
        pytest.param(pod("a"), "uid-1", None, id="ok"),
        pytest.param(None, "uid-1", "no pod default/a is bound to node n1", id="absent-or-other-node"),
        pytest.param(pod("a"), "spoofed", "uid 'spoofed' does not match", id="spoofed-uid"),
        pytest.param(pod("a", phase="Succeeded"), "uid-1", "has finished (phase Succeeded)", id="finished"),
        pytest.param(pod("a", deleting=True), "uid-1", "is being deleted", id="deleting"),
    ],
)
def test_identity(subject, uid: str, problem: str | None) -> None:
    found = pods.identity_problem(subject, node="n1", namespace="default", name="a", uid=uid)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


@pytest.mark.parametrize(
    ("subject", "stage"),
    [
        pytest.param(pod("a"), "starting", id="pending"),
        pytest.param(pod("a", phase="Running"), "starting", id="running-not-ready"),
        pytest.param(pod("a", phase="Running", ready=True), "ready", id="ready"),
        pytest.param(pod("a", phase="Failed"), "finished", id="failed"),
        pytest.param(pod("a", deleting=True, ready=True), "deleted", id="deleting"),
        pytest.param(None, "deleted", id="gone"),
    ],
)
def test_stage(subject, stage: str) -> None:
    assert pods.stage(subject) == stage


def test_other_starting_counts_only_plain_workload_pods() -> None:
    node_pods = [
        pod("plain"),
        pod("plain-ready", ready=True, phase="Running"),
        pod("done", phase="Succeeded"),
        pod("agent", owner="DaemonSet/agent"),
        pod("system", namespace="kube-system"),
        pod("waiting-stagger", labels={NAMES.enable_label: "1"}),
        pod("holder"),
    ]
    found = pods.other_starting(
        node_pods, names=NAMES, exclude_namespaces=["kube-system"], holders=[("default", "holder")]
    )
    assert found == [pods.OtherStarting("default", "plain", "starting")]


CRASH_LOOP = {
    "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}
}
RUNNING = {"running": {"startedAt": "2026-11-21T10:00:00Z"}}
INITIALIZING = {"waiting": {"reason": "PodInitializing"}}
STAGGER = {NAMES.enable_label: "1"}


def with_app(subject: dict[str, Any], *, state: dict[str, Any], restarts: int, ready: bool) -> dict[str, Any]:
    subject["status"]["containerStatuses"] = [
        {"name": "app", "state": state, "restartCount": restarts, "ready": ready}
    ]
    return subject


@pytest.mark.parametrize(
    ("subject", "why"),
    [
        pytest.param(pod("a", phase="Running"), "starting", id="first-start-not-ready"),
        pytest.param(pod("a", phase="Running", ready=True), None, id="ready"),
        pytest.param(
            with_app(pod("a", phase="Running"), state=CRASH_LOOP, restarts=3, ready=False),
            "crashLoopBackOff",
            id="crash-loop",
        ),
        pytest.param(
            # The kubelet has not turned the Ready condition yet: the container's state says it all.
            with_app(pod("a", phase="Running", ready=True), state=CRASH_LOOP, restarts=3, ready=False),
            "crashLoopBackOff",
            id="crash-loop-ready-condition-behind",
        ),
        pytest.param(
            with_app(pod("a", phase="Running"), state=RUNNING, restarts=1, ready=False),
            "restarting",
            id="restarted-not-ready-yet",
        ),
        pytest.param(
            with_app(pod("a", phase="Running", ready=True), state=RUNNING, restarts=1, ready=True),
            None,
            id="restarted-and-ready-again",
        ),
        pytest.param(
            with_app(pod("s", phase="Running", labels=STAGGER), state=CRASH_LOOP, restarts=2, ready=False),
            "crashLoopBackOff",
            id="stagger-pod-crash-looping-counts",
        ),
        pytest.param(
            with_app(pod("s", phase="Running", labels=STAGGER), state=RUNNING, restarts=1, ready=False),
            "restarting",
            id="stagger-pod-restarting-counts",
        ),
        pytest.param(
            with_app(pod("s", phase="Running", labels=STAGGER), state=RUNNING, restarts=0, ready=False),
            None,
            id="stagger-pod-first-start-counts-through-its-slot",
        ),
        pytest.param(
            # After a node restart the init containers run again (the init client asks anew): not a
            # restart of the app, or the pod would block itself.
            with_app(pod("s", labels=STAGGER), state=INITIALIZING, restarts=4, ready=False),
            None,
            id="stagger-pod-initializing-after-node-restart",
        ),
        pytest.param(
            with_app(
                pod("d", phase="Running", owner="DaemonSet/agent"), state=CRASH_LOOP, restarts=5, ready=False
            ),
            None,
            id="daemonset-pod-never",
        ),
        pytest.param(
            with_app(
                pod("k", namespace="kube-system", phase="Running"), state=CRASH_LOOP, restarts=5, ready=False
            ),
            None,
            id="excluded-namespace-never",
        ),
        pytest.param(
            with_app(pod("f", phase="Failed"), state=CRASH_LOOP, restarts=5, ready=False),
            None,
            id="finished-never",
        ),
        pytest.param(
            with_app(pod("x", deleting=True), state=CRASH_LOOP, restarts=5, ready=False),
            None,
            id="deleting-never",
        ),
    ],
)
def test_other_starting_counts_pods_starting_again(subject: dict[str, Any], why: str | None) -> None:
    found = pods.other_starting([subject], names=NAMES, exclude_namespaces=["kube-system"], holders=[])
    assert [other.why for other in found] == ([] if why is None else [why])


def test_a_slot_holder_is_counted_by_its_slot_even_when_it_restarts() -> None:
    holder = with_app(pod("h", phase="Running", labels=STAGGER), state=CRASH_LOOP, restarts=1, ready=False)
    assert pods.other_starting([holder], names=NAMES, exclude_namespaces=[], holders=[("default", "h")]) == []


def test_slots_to_rebuild_are_granted_pods_still_starting() -> None:
    granted = {NAMES.granted_at_annotation: "2026-11-21T10:00:05.250Z"}
    node_pods = [
        pod("second", annotations={NAMES.granted_at_annotation: "2026-11-21T10:00:09Z"}),
        pod("first", annotations=granted),
        pod("started", annotations=granted, ready=True, phase="Running"),
        pod("never"),
        pod("garbled", annotations={NAMES.granted_at_annotation: "yesterday"}),
    ]
    rebuilt = pods.slots_to_rebuild(node_pods, names=NAMES)
    assert [slot.name for slot in rebuilt] == ["first", "second"]
    assert rebuilt[0].granted_wall == pytest.approx(1795255205.25)


def unready(name: str, *, since: str, annotations: dict[str, str]) -> dict[str, Any]:
    subject = pod(name, annotations=annotations, phase="Running")
    subject["status"]["conditions"][0]["lastTransitionTime"] = since
    return subject


def test_a_pod_ready_since_its_grant_holds_no_slot_after_a_restart() -> None:
    """After a cold start every pod on the node is unready again, its old grant still annotated: a pod whose
    Ready condition is in another unready spell than the one lockd recorded at the grant has been Ready
    since (its slot ended then) and holds none now; one still in the recorded spell holds its slot, however
    far the kubelet's clock is from lockd's (the simulated kubelet's runs faster)."""
    spell = "2026-11-21T10:00:01Z"
    granted = {
        NAMES.node_slot_annotation: "2026-11-21T10:00:05.250Z",
        NAMES.node_slot_unready_since_annotation: spell,
    }
    node_pods = [
        unready("rebooted", since="2026-11-21T10:00:09Z", annotations=granted),
        unready("starting", since=spell, annotations=granted),
        # Stamped by a kubelet whose clock is ahead of lockd's: the same spell, so still starting.
        unready(
            "clock-ahead",
            since="2026-11-21T10:07:00Z",
            annotations={**granted, NAMES.node_slot_unready_since_annotation: "2026-11-21T10:07:00Z"},
        ),
    ]
    rebuilt = pods.slots_to_rebuild(node_pods, names=NAMES)
    assert sorted(slot.name for slot in rebuilt) == ["clock-ahead", "starting"]
    assert pods.ready_since(node_pods[0], granted_wall=0.0, names=NAMES)
    assert not pods.ready_since(node_pods[1], granted_wall=2e9, names=NAMES)


def test_a_grant_of_an_older_lockd_compares_the_condition_with_the_grant_time() -> None:
    """Without `node-slot-unready-since` (a grant of a lockd before it), a Ready condition that changed
    after the grant means Ready since; one that changed before it or in the same second does not."""
    granted = {NAMES.node_slot_annotation: "2026-11-21T10:00:05.250Z"}
    node_pods = [
        unready("rebooted", since="2026-11-21T10:00:09Z", annotations=granted),
        unready("starting", since="2026-11-21T10:00:01Z", annotations=granted),
        unready("same-second", since="2026-11-21T10:00:05Z", annotations=granted),
    ]
    rebuilt = pods.slots_to_rebuild(node_pods, names=NAMES)
    assert sorted(slot.name for slot in rebuilt) == ["same-second", "starting"]


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([{"type": "Ready", "status": "False", "lastTransitionTime": "T1"}], "T1", id="unready"),
        pytest.param([{"type": "Ready", "status": "True", "lastTransitionTime": "T1"}], None, id="ready"),
        pytest.param([{"type": "Ready", "status": "False"}], None, id="no-time"),
        pytest.param([], None, id="no-condition"),
    ],
)
def test_the_unready_spell_recorded_at_a_grant(
    conditions: list[dict[str, str]], expected: str | None
) -> None:
    assert pods.unready_since({"status": {"conditions": conditions}}) == expected


def test_a_group_grant_is_no_node_slot_after_a_restart() -> None:
    """`granted-at` on a pod of a staggering group may be the controller's group grant (gate and evict
    mode) of a pod whose init client still waits for its node slot: only lockd's own `node-slot` counts
    there. A pod in no group with `granted-at` alone (granted by a lockd from before `node-slot`) counts."""
    group = {NAMES.group_key_annotation: '{"g1":""}'}
    node_pods = [
        pod("group-granted", annotations={**group, NAMES.granted_at_annotation: "2026-11-21T10:00:01Z"}),
        pod(
            "node-granted",
            annotations={
                **group,
                NAMES.granted_at_annotation: "2026-11-21T10:00:02Z",
                NAMES.node_slot_annotation: "2026-11-21T10:00:03Z",
            },
        ),
        pod("older-lockd", annotations={NAMES.granted_at_annotation: "2026-11-21T10:00:04Z"}),
    ]
    rebuilt = pods.slots_to_rebuild(node_pods, names=NAMES)
    assert [slot.name for slot in rebuilt] == ["node-granted", "older-lockd"]
    assert rebuilt[0].granted_wall == pytest.approx(1795255203.0)


@pytest.mark.parametrize(
    ("others", "said"),
    [
        pytest.param([pods.OtherStarting("default", "a", "starting")], "", id="first-starts-unnamed"),
        pytest.param(
            [
                pods.OtherStarting("default", "a", "crashLoopBackOff"),
                pods.OtherStarting("shop", "b", "restarting"),
            ],
            " (in CrashLoopBackOff: default/a; restarting: shop/b)",
            id="both-kinds",
        ),
        pytest.param(
            [pods.OtherStarting("default", f"p{i}", "crashLoopBackOff") for i in range(7)],
            " (in CrashLoopBackOff: default/p0, default/p1, default/p2, default/p3, default/p4 and 2 more)",
            id="five-named",
        ),
    ],
)
def test_restarts_named(others: list[pods.OtherStarting], said: str) -> None:
    assert pods.restarts_named(others) == said
