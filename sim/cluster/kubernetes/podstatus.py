"""The pod status a kubelet reports, built from what its containers are doing (pure).

Times are simulated seconds since the cluster started; ``base`` turns them into timestamps, so a pod's
``startTime`` and container times are consistent with the simulated durations.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sim.cluster.objects import set_condition
from sim.cluster.startup import ContainerState, Termination
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339

ContainerPhase = Literal["waiting", "running", "terminated"]


@dataclass(frozen=True)
class ContainerView:
    """One container as the kubelet reports it."""

    name: str
    image: str
    state: ContainerPhase = "waiting"
    reason: str = "PodInitializing"
    message: str = ""
    exit_code: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    ready: bool = False
    restarts: int = 0
    last: Termination | None = None


def waiting(
    name: str,
    image: str,
    *,
    reason: str,
    message: str = "",
    restarts: int = 0,
    last: Termination | None = None,
) -> ContainerView:
    return ContainerView(name=name, image=image, reason=reason, message=message, restarts=restarts, last=last)


def view_from_model(
    name: str, image: str, state: ContainerState, *, is_init: bool = False, pod_name: str = ""
) -> ContainerView:
    """Translate the start-up model's container state to what the kubelet reports."""
    base = ContainerView(name=name, image=image, restarts=state.restarts, last=state.last_termination)
    if state.phase in ("starting", "probing"):
        # Probing: the work is done, but the kubelet has not yet run the readiness probe that says so.
        return replace(base, state="running", reason="", started_at=state.started_at, ready=False)
    if state.phase == "running":
        return replace(base, state="running", reason="", started_at=state.started_at, ready=not is_init)
    if state.phase == "backoff":
        delay = (state.backoff_until or 0.0) - (
            state.last_termination.finished_at if state.last_termination else 0.0
        )
        return replace(
            base,
            reason="CrashLoopBackOff",
            message=f"back-off {delay:.0f}s restarting failed container={name} pod={pod_name}",
        )
    term = state.last_termination
    if term is None:  # finished without an attempt on record: cannot happen, report it plainly
        return replace(base, state="terminated", reason="Unknown", exit_code=0)
    # A finished container's own termination is its current state, not its last state.
    last_before = None
    return replace(
        base,
        state="terminated",
        reason=term.reason,
        exit_code=term.exit_code,
        started_at=term.started_at,
        finished_at=term.finished_at,
        ready=is_init and term.exit_code == 0,
        last=last_before,
    )


def killed(view: ContainerView, *, now: float, exit_code: int = 143) -> ContainerView:
    """A container stopped by the kubelet because its pod is being deleted."""
    if view.state == "terminated":
        return view
    if view.state == "waiting":
        return replace(
            view,
            state="terminated",
            reason="ContainerStatusUnknown" if view.started_at is None else "Error",
            exit_code=137 if view.started_at is None else exit_code,
            finished_at=now,
            ready=False,
            message="",
        )
    return replace(
        view, state="terminated", reason="Error", exit_code=exit_code, finished_at=now, ready=False
    )


def blank(view: ContainerView) -> ContainerView:
    """The container of ``view`` (name, image, restart count, last termination) in a blank state, for
    ``dataclasses.replace`` to give it its next one."""
    return ContainerView(name=view.name, image=view.image, restarts=view.restarts, last=view.last)


def started(view: ContainerView, *, now: float) -> ContainerView:
    """The container of ``view`` running from ``now`` on."""
    return replace(blank(view), state="running", reason="", started_at=now)


def exited(
    view: ContainerView,
    *,
    reason: str,
    exit_code: int,
    started_at: float,
    finished_at: float,
    message: str = "",
    ready: bool = False,
) -> ContainerView:
    """The container of ``view`` terminated: its run from ``started_at`` ended with ``exit_code``."""
    return replace(
        blank(view),
        state="terminated",
        reason=reason,
        exit_code=exit_code,
        message=message,
        started_at=started_at,
        finished_at=finished_at,
        ready=ready,
    )


def stopped(view: ContainerView, *, now: float, stub: bool, init: bool = False) -> ContainerView:
    """A container stopped because its pod is being deleted: SIGTERM kills an ordinary one (143); a running
    stub (``webhook.idle``) handles it and exits 0 (an init container that exited 0 is reported ready)."""
    if stub and view.state == "running":
        return replace(view, state="terminated", reason="Completed", exit_code=0, finished_at=now, ready=init)
    return killed(view, now=now)


def _stamp(base: dt.datetime, t: float | None) -> str | None:
    return None if t is None else format_rfc3339((base + dt.timedelta(seconds=t)).timestamp(), digits=0)


def _container_id(uid: str, name: str, attempt: int) -> str:
    return "containerd://" + hashlib.sha256(f"{uid}/{name}/{attempt}".encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    return f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_status(view: ContainerView, *, uid: str, base: dt.datetime) -> Obj:
    state: Obj
    if view.state == "running":
        state = {"running": {"startedAt": _stamp(base, view.started_at)}}
    elif view.state == "terminated":
        terminated: Obj = {
            "exitCode": view.exit_code,
            "reason": view.reason,
            "startedAt": _stamp(base, view.started_at),
            "finishedAt": _stamp(base, view.finished_at),
            "message": view.message or None,  # what the container wrote to its termination log
        }
        if view.started_at is not None:
            terminated["containerID"] = _container_id(uid, view.name, view.restarts)
        state = {"terminated": {k: v for k, v in terminated.items() if v is not None}}
    else:
        waiting_state: Obj = {"reason": view.reason}
        if view.message:
            waiting_state["message"] = view.message
        state = {"waiting": waiting_state}
    status: Obj = {
        "name": view.name,
        "image": view.image,
        "imageID": _image_id(view.image) if view.started_at is not None or view.last else "",
        "ready": view.ready,
        "started": view.state == "running",
        "restartCount": view.restarts,
        "state": state,
        "lastState": {},
    }
    if view.started_at is not None or view.state == "terminated":
        status["containerID"] = _container_id(uid, view.name, view.restarts)
    if view.last is not None:
        status["lastState"] = {
            "terminated": {
                "exitCode": view.last.exit_code,
                "reason": view.last.reason,
                "startedAt": _stamp(base, view.last.started_at),
                "finishedAt": _stamp(base, view.last.finished_at),
                "containerID": _container_id(uid, view.name, max(0, view.restarts - 1)),
            }
        }
    return status


def pod_phase(
    *, init: Sequence[ContainerView], main: Sequence[ContainerView], restart_policy: str, started: bool
) -> str:
    """Pending until every init container completed and a container runs; Succeeded/Failed once all
    containers ended for good (never with ``restartPolicy: Always``, except a deleted pod's)."""
    if any(v.state == "terminated" and v.exit_code != 0 for v in init) and restart_policy == "Never":
        return "Failed"
    if not started or not all(v.state == "terminated" and v.exit_code == 0 for v in init):
        return "Pending"
    if main and all(v.state == "terminated" for v in main) and restart_policy != "Always":
        return "Succeeded" if all(v.exit_code == 0 for v in main) else "Failed"
    if any(v.state == "running" for v in main) or any(v.restarts for v in main):
        return "Running"
    return "Pending"


def final_phase(main: Sequence[ContainerView]) -> str:
    """The phase of a pod whose containers were all stopped (deletion): Failed unless all exited 0."""
    return (
        "Succeeded" if main and all(v.state == "terminated" and v.exit_code == 0 for v in main) else "Failed"
    )


def qos_class(pod: Mapping[str, Any]) -> str:
    containers = [
        *((pod.get("spec") or {}).get("containers") or []),
        *((pod.get("spec") or {}).get("initContainers") or []),
    ]
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        set(r.get("limits") or {}) >= {"cpu", "memory"}
        and all(
            (r.get("requests") or {}).get(k, (r.get("limits") or {})[k]) == (r.get("limits") or {})[k]
            for k in ("cpu", "memory")
        )
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"


def render_pod_status(
    pod: Mapping[str, Any],
    *,
    init: Sequence[ContainerView],
    main: Sequence[ContainerView],
    phase: str,
    host_ip: str,
    pod_ip: str,
    start_time: float,
    now: float,
    base: dt.datetime,
) -> Obj:
    """The full status the kubelet writes; conditions it does not own (e.g. DisruptionTarget) are kept."""
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    stamp = _stamp(base, now) or ""
    current = pod.get("status") or {}
    conditions: list[dict[str, Any]] = list(current.get("conditions") or [])
    conditions = set_condition(conditions, kind="PodReadyToStartContainers", status="True", now=stamp)
    pending_init = [v.name for v in init if not (v.state == "terminated" and v.exit_code == 0)]
    terminal = phase in ("Succeeded", "Failed")
    if pending_init and not terminal:
        conditions = set_condition(
            conditions,
            kind="Initialized",
            status="False",
            now=stamp,
            reason="ContainersNotInitialized",
            message=f"containers with incomplete status: [{' '.join(pending_init)}]",
        )
    else:
        conditions = set_condition(conditions, kind="Initialized", status="True", now=stamp)
    unready = [v.name for v in main if not v.ready]
    if terminal:
        for kind in ("Ready", "ContainersReady"):
            conditions = set_condition(
                conditions, kind=kind, status="False", now=stamp, reason="PodCompleted"
            )
    elif unready:
        message = f"containers with unready status: [{' '.join(unready)}]"
        for kind in ("Ready", "ContainersReady"):
            conditions = set_condition(
                conditions, kind=kind, status="False", now=stamp, reason="ContainersNotReady", message=message
            )
    else:
        for kind in ("Ready", "ContainersReady"):
            conditions = set_condition(conditions, kind=kind, status="True", now=stamp)
    conditions = set_condition(conditions, kind="PodScheduled", status="True", now=stamp)
    status: Obj = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": _stamp(base, start_time),
        "qosClass": qos_class(pod),
        "containerStatuses": [container_status(v, uid=uid, base=base) for v in main],
    }
    if init:
        status["initContainerStatuses"] = [container_status(v, uid=uid, base=base) for v in init]
    return status


def status_patch(status: Mapping[str, Any]) -> Obj:
    """``status`` as a strategic merge patch that says everything: the patch merges conditions by type,
    so a condition's ``reason`` or ``message`` that ``status`` leaves out is set to null (removed), or
    the one of an earlier status (``ContainersNotReady`` ...) would stay on a condition now True."""
    patch = dict(status)
    patch["conditions"] = [{"reason": None, "message": None, **c} for c in status.get("conditions") or []]
    return patch


def _strip_times(conditions: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (str(c.get("type")), c.get("status"), c.get("reason"), c.get("message")) for c in conditions
    )


def status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether ``new`` says anything ``old`` does not (condition timestamps alone do not count)."""
    if old is None:
        return True
    for key in new:
        if key == "conditions":
            if _strip_times(old.get("conditions") or []) != _strip_times(new["conditions"]):
                return True
        elif old.get(key) != new[key]:
            return True
    return False
