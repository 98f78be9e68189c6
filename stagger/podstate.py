"""Where a pod is in its life, read from the pod object the same way by every component."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from stagger.objects import condition_true

TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_phase(pod: Mapping[str, Any]) -> str:
    """`status.phase`; a pod without one is Pending."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_pod_finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: its containers will not run again."""
    return pod_phase(pod) in TERMINAL_PHASES


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is "True" (what Services, rollouts and lockd's slots go by)."""
    return condition_true(pod, "Ready")


Restart = Literal["crashLoopBackOff", "restarting"]


def restart_state(pod: Mapping[str, Any]) -> Restart | None:
    """Whether the pod is starting again after it ran: a container waits in `CrashLoopBackOff` (the kubelet
    holds it back between restarts), or a container that has restarted runs but is not ready yet. None for
    a pod starting for the first time (no container has restarted) or one whose containers are all ready.

    Only the regular containers count: a pod whose containers wait for its init containers is in its
    first start-up (or a new sandbox's after a node restart, where the kubelet runs the init containers
    again), not a restart of its app.
    https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-restarts"""
    statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(s, Mapping)]
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting")
        if isinstance(waiting, Mapping) and waiting.get("reason") == "CrashLoopBackOff":
            return "crashLoopBackOff"
    for status in statuses:
        restarts = status.get("restartCount")
        restarted = isinstance(restarts, int) and restarts > 0
        if restarted and "running" in (status.get("state") or {}) and not status.get("ready"):
            return "restarting"
    return None
