"""The pod annotations that parameterise the start-up model, and reading them (pure).

A main container's ``readinessProbe`` (its timing fields: ``periodSeconds``, ``initialDelaySeconds``,
``successThreshold``) is read from the container itself, as the kubelet does; what the probe runs does not
matter to the model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sim.cluster.objects import annotations_of
from sim.cluster.startup import DEFAULT_PROBE_PERIOD_SECONDS, ContainerSpec, ReadinessProbe, RestartPolicy

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


def _probe_number(probe: Mapping[str, Any], key: str, *, default: float, least: float) -> float:
    value = probe.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    # The API server rejects a value below the least; the emulator does not check probes, so such a
    # value gets the default rather than stopping the pod.
    return float(value) if value >= least else default


def readiness_probe(container: Mapping[str, Any]) -> ReadinessProbe | None:
    """When the kubelet runs the container's ``readinessProbe`` (None: it has none), with Kubernetes'
    defaults for the fields it leaves out (every 10 s from the start, one success)."""
    probe = container.get("readinessProbe")
    if not isinstance(probe, Mapping):
        return None
    return ReadinessProbe(
        period_seconds=_probe_number(probe, "periodSeconds", default=DEFAULT_PROBE_PERIOD_SECONDS, least=1),
        initial_delay_seconds=_probe_number(probe, "initialDelaySeconds", default=0.0, least=0),
        success_threshold=int(_probe_number(probe, "successThreshold", default=1, least=1)),
    )


def container_spec(pod: Mapping[str, Any], *, container: Mapping[str, Any] | None = None) -> ContainerSpec:
    """The model parameters of the pod's (regular) containers; with ``container`` (one of them), its
    readiness probe too."""
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
        readiness=readiness_probe(container) if container is not None else None,
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
