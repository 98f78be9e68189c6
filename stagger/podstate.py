"""Where a pod is in its life, read from the pod object the same way by every component."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
