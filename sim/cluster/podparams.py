"""The pod annotations that parameterise the start-up model, and reading them (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sim.cluster.objects import annotations_of
from sim.cluster.startup import ContainerSpec, RestartPolicy

PREFIX = "sim.stagger.dev"
CPU_SECONDS = f"{PREFIX}/cpu-seconds"
"""CPU-seconds each container needs to start (to become Ready); default 1."""
LIVENESS_SECONDS = f"{PREFIX}/liveness-seconds"
"""A container not Ready this long after it started is killed and restarted; default 30, "none" for no probe."""
RUN_SECONDS = f"{PREFIX}/run-seconds"
"""For Jobs: a container exits 0 this long after it became Ready; unset: it runs until stopped."""
INIT_CPU_SECONDS = f"{PREFIX}/init-cpu-seconds"
"""CPU-seconds an init container (other than the stagger init client) works before exiting 0; default 0."""

DEFAULT_CPU_SECONDS = 1.0
DEFAULT_LIVENESS_SECONDS = 30.0


class AnnotationError(ValueError):
    """An annotation value the model cannot use; the message names the annotation."""


def _number(annotations: Mapping[str, str], key: str, default: float | None) -> float | None:
    raw = annotations.get(key)
    if raw is None:
        return default
    if raw.strip().lower() == "none":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise AnnotationError(f"{key}: expected a number of seconds (got {raw!r})") from None
    if not math.isfinite(value) or value < 0:
        raise AnnotationError(f"{key}: expected a finite number >= 0 (got {raw!r})")
    return value


def restart_policy(pod: Mapping[str, Any]) -> RestartPolicy:
    policy = (pod.get("spec") or {}).get("restartPolicy")
    if policy == "OnFailure":
        return "OnFailure"
    if policy == "Never":
        return "Never"
    return "Always"


def container_spec(pod: Mapping[str, Any]) -> ContainerSpec:
    """The model parameters of the pod's (regular) containers."""
    annotations = annotations_of(pod)
    cpu = _number(annotations, CPU_SECONDS, DEFAULT_CPU_SECONDS)
    liveness = _number(annotations, LIVENESS_SECONDS, DEFAULT_LIVENESS_SECONDS)
    if liveness == 0:
        raise AnnotationError(f"{LIVENESS_SECONDS}: must be > 0 or none")
    return ContainerSpec(
        cpu_seconds=DEFAULT_CPU_SECONDS if cpu is None else cpu,
        liveness_seconds=liveness,
        run_seconds=_number(annotations, RUN_SECONDS, None),
        restart_policy=restart_policy(pod),
    )


def init_container_spec(pod: Mapping[str, Any]) -> ContainerSpec:
    """An init container runs its work and exits; it has no liveness probe and is retried on failure
    unless the pod's restart policy is Never."""
    cpu = _number(annotations_of(pod), INIT_CPU_SECONDS, 0.0)
    policy = restart_policy(pod)
    return ContainerSpec(
        cpu_seconds=cpu or 0.0,
        liveness_seconds=None,
        run_seconds=0.0,
        restart_policy="Never" if policy == "Never" else "OnFailure",
    )
