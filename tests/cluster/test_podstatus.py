"""The pod status the kubelet reports: phases, conditions, container states, what counts as a change."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sim.cluster.kubernetes.podstatus import (
    ContainerView,
    final_phase,
    killed,
    pod_phase,
    qos_class,
    render_pod_status,
    status_changed,
    view_from_model,
    waiting,
)
from sim.cluster.startup import ContainerSpec, ContainerState, Termination

BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "default", "uid": "u-1"},
    "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
    "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "x"}]},
}
SPEC = ContainerSpec(cpu_seconds=3, liveness_seconds=20)


def test_views_follow_the_model() -> None:
    starting = view_from_model("app", "img", ContainerState(spec=SPEC, phase="starting", started_at=5))
    assert (starting.state, starting.ready, starting.started_at) == ("running", False, 5)
    ready = view_from_model(
        "app", "img", ContainerState(spec=SPEC, phase="running", started_at=5, ready_at=8)
    )
    assert ready.ready
    term = Termination(reason="Error", exit_code=137, started_at=5, finished_at=25)
    backoff = view_from_model(
        "app",
        "img",
        ContainerState(
            spec=SPEC, phase="backoff", started_at=5, restarts=1, backoff_until=35, last_termination=term
        ),
        pod_name="web-1",
    )
    assert (backoff.state, backoff.reason, backoff.restarts, backoff.last) == (
        "waiting",
        "CrashLoopBackOff",
        1,
        term,
    )
    assert backoff.message == "back-off 10s restarting failed container=app pod=web-1"
    done = view_from_model(
        "init",
        "img",
        ContainerState(
            spec=SPEC, phase="succeeded", started_at=0, last_termination=Termination("Completed", 0, 0, 1)
        ),
        is_init=True,
    )
    assert (done.state, done.reason, done.exit_code, done.ready) == ("terminated", "Completed", 0, True)


def test_phases() -> None:
    done_init = ContainerView(name="i", image="x", state="terminated", reason="Completed")
    failed_init = ContainerView(name="i", image="x", state="terminated", reason="Error", exit_code=1)
    running = ContainerView(name="a", image="x", state="running", reason="")
    ok = ContainerView(name="a", image="x", state="terminated", reason="Completed")
    bad = ContainerView(name="a", image="x", state="terminated", reason="Error", exit_code=1)
    pending = waiting("a", "x", reason="PodInitializing")
    assert (
        pod_phase(
            init=[waiting("i", "x", reason="PodInitializing")],
            main=[pending],
            restart_policy="Always",
            started=False,
        )
        == "Pending"
    )
    assert pod_phase(init=[done_init], main=[running], restart_policy="Always", started=True) == "Running"
    assert pod_phase(init=[], main=[ok], restart_policy="Never", started=True) == "Succeeded"
    assert pod_phase(init=[], main=[ok, bad], restart_policy="Never", started=True) == "Failed"
    assert pod_phase(init=[], main=[ok], restart_policy="Always", started=True) == "Pending"
    assert pod_phase(init=[failed_init], main=[pending], restart_policy="Never", started=False) == "Failed"
    assert final_phase([killed(running, now=9)]) == "Failed"
    assert final_phase([ok]) == "Succeeded"


def test_rendered_status_looks_like_a_kubelets() -> None:
    init = [
        ContainerView(
            name="stagger-init",
            image="s:1",
            state="terminated",
            reason="Completed",
            started_at=1,
            finished_at=4,
            ready=True,
        )
    ]
    main = [
        ContainerView(
            name="app",
            image="web:1",
            state="running",
            reason="",
            started_at=4,
            restarts=2,
            last=Termination("Error", 137, 1, 3),
        )
    ]
    status = render_pod_status(
        POD,
        init=init,
        main=main,
        phase="Running",
        host_ip="127.0.1.1",
        pod_ip="198.18.128.2",
        start_time=0.5,
        now=6,
        base=BASE,
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["DisruptionTarget"]["status"] == "True"  # not the kubelet's: kept
    assert conditions["Initialized"]["status"] == "True"
    assert conditions["Ready"] | {"lastTransitionTime": None} == {
        "type": "Ready",
        "status": "False",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [app]",
        "lastTransitionTime": None,
    }
    assert conditions["PodScheduled"]["status"] == "True"
    assert (status["hostIP"], status["podIP"], status["startTime"]) == (
        "127.0.1.1",
        "198.18.128.2",
        "2024-01-01T00:00:00Z",
    )
    assert status["qosClass"] == "Burstable"
    [app] = status["containerStatuses"]
    assert app["state"] == {"running": {"startedAt": "2024-01-01T00:00:04Z"}}
    assert app["lastState"]["terminated"]["exitCode"] == 137
    assert (app["restartCount"], app["ready"], app["started"]) == (2, False, True)
    assert app["containerID"].startswith("containerd://") and app["imageID"].startswith(
        "docker.io/library/web@sha256:"
    )
    [init_status] = status["initContainerStatuses"]
    assert init_status["state"]["terminated"]["reason"] == "Completed" and init_status["ready"]


def test_condition_times_change_only_with_their_status() -> None:
    view = ContainerView(name="app", image="web:1", state="running", reason="", started_at=4, ready=True)
    first = render_pod_status(
        POD, init=[], main=[view], phase="Running", host_ip="h", pod_ip="p", start_time=0, now=5, base=BASE
    )
    later = render_pod_status(
        {**POD, "status": first},
        init=[],
        main=[view],
        phase="Running",
        host_ip="h",
        pod_ip="p",
        start_time=0,
        now=50,
        base=BASE,
    )
    assert first["conditions"] == later["conditions"]
    assert not status_changed(first, later)
    flipped = render_pod_status(
        {**POD, "status": first},
        init=[],
        main=[ContainerView(name="app", image="web:1")],
        phase="Running",
        host_ip="h",
        pod_ip="p",
        start_time=0,
        now=60,
        base=BASE,
    )
    assert status_changed(first, flipped)
    assert {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}[
        "Ready"
    ] == "2024-01-01T00:01:00Z"


def test_qos_classes() -> None:
    def pod(resources: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "a", "resources": resources}]}}

    assert qos_class(pod({})) == "BestEffort"
    assert qos_class(pod({"requests": {"cpu": "1"}})) == "Burstable"
    assert qos_class(pod({"limits": {"cpu": "1", "memory": "1Gi"}})) == "Guaranteed"
