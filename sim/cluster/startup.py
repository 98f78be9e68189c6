"""Start-up CPU contention model of one node, in simulated seconds (pure).

A container needs ``cpu_seconds`` of CPU before it is Ready. All containers that are starting on a
node at the same time share the node's cores. With ``n`` containers starting on ``cores`` cores,
each one gets, per simulated second::

    rate(n) = min(1, cores / n) * efficiency(n)
    efficiency(n) = 1 / (1 + penalty * max(0, n / cores - 1))

A single start-up is single-threaded (at most one core). While the node is not oversubscribed
(``n <= cores``) every container runs at full speed; beyond that the cores are shared and, on top,
``efficiency`` models what oversubscription really costs (context switches, cache and memory
bandwidth thrash, GC pressure), so ``n * rate(n) <= cores`` always, with equality only up to
``n == cores``. With the default ``penalty = 0.5``, 15 containers on 4 cores get 0.27 * 0.42 =
0.11 core each: a 3 CPU-second start-up then needs 27 s instead of 3 s.

A container without a readiness probe is Ready as soon as its work is done. One with a
``readiness`` probe is Ready at the kubelet's first probe once its work is done (``probe_ready_at``):
the kubelet runs the probe ``initial_delay_seconds`` after the container started and then every
``period_seconds`` (Kubernetes' default 10 s), so a container can wait up to one period with its work
done ("probing"), running but not Ready, and with ``success_threshold`` above 1 that many probes in a row
must pass. Every duration here is in simulated seconds, the period included.

A liveness deadline of ``liveness_seconds`` after each (re)start kills a container whose work is not
done by then (``Error``, exit code 137): its work is lost, ``restarts`` goes up and, unless its
restart policy is ``Never``, it starts again after a CrashLoopBackOff-like back-off
(``backoff_base_seconds * 2 ** (restarts - 1)``, capped at ``backoff_cap_seconds``). A container whose
work is done but which waits for its readiness probe is not killed: the app answers its liveness probe
once it has started. A container with ``run_seconds`` (a Job's) exits 0 that long after it became Ready;
without, it runs until removed.

Containers whose work is done (probing or Ready) are not part of the contention: the model is about
start-ups. The node's CPU busy percentage reported to lockd is ``min(100, 100 * starting / cores)``
(each starting container asks for one core).

The model is event-driven: ``advance`` applies every event between ``now`` and ``until`` exactly at
its time, whatever the step the caller uses.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

RestartPolicy = Literal["Always", "OnFailure", "Never"]
Phase = Literal["starting", "probing", "running", "backoff", "succeeded", "failed"]
"""``probing``: the start-up work is done, the container waits for its readiness probe (see above)."""
EventKind = Literal["ready", "killed", "restarted", "exited"]

# Floating point slack when comparing simulated times and amounts of work.
_EPS = 1e-9

LIVENESS_EXIT_CODE = 137

DEFAULT_PROBE_PERIOD_SECONDS = 10.0
"""Kubernetes' ``periodSeconds`` of a probe that does not say."""


@dataclass(frozen=True)
class ModelSettings:
    """Parameters of the contention model (see the module docstring)."""

    penalty: float = 0.5
    backoff_base_seconds: float = 10.0
    backoff_cap_seconds: float = 300.0
    backoff_jitter: float = 0.25

    def __post_init__(self) -> None:
        if not 0 <= self.backoff_jitter <= 1:
            raise ValueError(f"backoff_jitter must be in [0, 1], got {self.backoff_jitter}")
        if self.penalty < 0:
            raise ValueError(f"penalty must be >= 0, got {self.penalty}")
        if self.backoff_base_seconds < 0 or self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError("need 0 <= backoff_base_seconds <= backoff_cap_seconds")


@dataclass(frozen=True)
class ReadinessProbe:
    """When the kubelet runs a container's readiness probe (what it runs is of no concern to the model:
    the probe passes once the container's work is done)."""

    period_seconds: float = DEFAULT_PROBE_PERIOD_SECONDS
    initial_delay_seconds: float = 0.0
    success_threshold: int = 1

    def __post_init__(self) -> None:
        if not self.period_seconds > 0:
            raise ValueError(f"period_seconds must be > 0, got {self.period_seconds}")
        if self.initial_delay_seconds < 0:
            raise ValueError(f"initial_delay_seconds must be >= 0, got {self.initial_delay_seconds}")
        if self.success_threshold < 1:
            raise ValueError(f"success_threshold must be >= 1, got {self.success_threshold}")


@dataclass(frozen=True)
class ContainerSpec:
    """What the model needs to know about one container."""

    cpu_seconds: float = 1.0
    liveness_seconds: float | None = 30.0
    run_seconds: float | None = None
    restart_policy: RestartPolicy = "Always"
    readiness: ReadinessProbe | None = None
    """None: Ready as soon as the work is done."""

    def __post_init__(self) -> None:
        if self.cpu_seconds < 0:
            raise ValueError(f"cpu_seconds must be >= 0, got {self.cpu_seconds}")
        if self.liveness_seconds is not None and self.liveness_seconds <= 0:
            raise ValueError(f"liveness_seconds must be > 0, got {self.liveness_seconds}")
        if self.run_seconds is not None and self.run_seconds < 0:
            raise ValueError(f"run_seconds must be >= 0, got {self.run_seconds}")


@dataclass(frozen=True)
class Termination:
    """How an attempt ended (the kubelet's ``lastState.terminated`` / ``state.terminated``)."""

    reason: str
    exit_code: int
    started_at: float
    finished_at: float


@dataclass(frozen=True)
class ContainerState:
    spec: ContainerSpec
    phase: Phase
    started_at: float
    """Start of the current attempt (or of the back-off that precedes the next one)."""
    work_done: float = 0.0
    restarts: int = 0
    ready_at: float | None = None
    work_done_at: float | None = None
    """When the current attempt's work was done (phase probing or running)."""
    backoff_until: float | None = None
    last_termination: Termination | None = None
    """The previous attempt's end, or this container's final end once succeeded/failed."""


@dataclass(frozen=True)
class ModelEvent:
    at: float
    key: str
    kind: EventKind
    exit_code: int | None = None


@dataclass(frozen=True)
class NodeModel:
    cores: float
    settings: ModelSettings = field(default_factory=ModelSettings)
    now: float = 0.0
    containers: Mapping[str, ContainerState] = field(default_factory=dict)
    peak_starting: int = 0

    def __post_init__(self) -> None:
        if self.cores <= 0:
            raise ValueError(f"cores must be > 0, got {self.cores}")


def efficiency(*, starting: int, cores: float, penalty: float) -> float:
    """Share of the handed-out CPU that turns into start-up progress."""
    return 1.0 / (1.0 + penalty * max(0.0, starting / cores - 1.0))


def per_container_rate(*, starting: int, cores: float, penalty: float) -> float:
    """CPU-seconds of start-up work each of ``starting`` containers gets per simulated second."""
    if starting <= 0:
        return 0.0
    return min(1.0, cores / starting) * efficiency(starting=starting, cores=cores, penalty=penalty)


def backoff_delay(*, restarts: int, settings: ModelSettings, key: str = "") -> float:
    """Back-off before attempt ``restarts + 1``: 10 s, 20 s, 40 s, ... capped, like CrashLoopBackOff.

    Stretched by up to ``backoff_jitter`` (a share, deterministic per container key and attempt):
    a real kubelet's sync loop and probe periods spread restarts out the same way, and without it
    identical containers started together would stay in lock-step for ever.
    """
    if restarts <= 0:
        return 0.0
    exponent = min(restarts - 1, 62)
    base = min(settings.backoff_cap_seconds, settings.backoff_base_seconds * 2.0**exponent)
    return float(base * (1.0 + settings.backoff_jitter * _unit_hash(f"{key}/{restarts}")))


def _unit_hash(text: str) -> float:
    """A reproducible pseudo-random number in [0, 1) (keeps the model a pure function)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def probe_ready_at(*, probe: ReadinessProbe | None, started_at: float, work_done_at: float) -> float:
    """When a container started at ``started_at`` whose work was done at ``work_done_at`` is Ready.

    Without a probe: at once. With one, the kubelet probes at ``started_at + initial_delay_seconds +
    k * period_seconds`` (k = 0, 1, ...); the first probe at or after ``work_done_at`` passes, and the
    container is Ready once ``success_threshold`` probes in a row have.
    """
    if probe is None:
        return work_done_at
    first = started_at + probe.initial_delay_seconds
    period = probe.period_seconds
    # The slack keeps a probe that falls on the work's end, up to rounding, counted as after it.
    missed = max(0, math.ceil((work_done_at - first) / period - _EPS))
    return first + (missed + probe.success_threshold - 1) * period


def starting_count(node: NodeModel) -> int:
    return sum(1 for c in node.containers.values() if c.phase == "starting")


def cpu_busy_percent(node: NodeModel) -> float:
    """What the node's CPU load looks like to lockd: each starting container asks for a whole core."""
    return min(100.0, 100.0 * starting_count(node) / node.cores)


def start_container(node: NodeModel, *, key: str, spec: ContainerSpec) -> NodeModel:
    """Start a container at ``node.now`` (advance the node to the current time first)."""
    if key in node.containers:
        raise ValueError(f"container {key!r} is already in the model")
    containers = dict(node.containers)
    containers[key] = ContainerState(spec=spec, phase="starting", started_at=node.now)
    updated = replace(node, containers=containers)
    return replace(updated, peak_starting=max(node.peak_starting, starting_count(updated)))


def remove_container(node: NodeModel, *, key: str) -> NodeModel:
    """Forget a container (stopped by the kubelet); unknown keys are ignored."""
    if key not in node.containers:
        return node
    containers = {k: v for k, v in node.containers.items() if k != key}
    return replace(node, containers=containers)


def _next_times(containers: Mapping[str, ContainerState], *, now: float, rate: float) -> dict[str, float]:
    """Each container's next event time, if the current per-container rate stays as it is."""
    times: dict[str, float] = {}
    for key, c in containers.items():
        candidates: list[float] = []
        if c.phase == "starting":
            remaining = c.spec.cpu_seconds - c.work_done
            if remaining <= _EPS:
                candidates.append(now)
            elif rate > 0:
                candidates.append(now + remaining / rate)
            if c.spec.liveness_seconds is not None:
                candidates.append(c.started_at + c.spec.liveness_seconds)
        elif c.phase == "probing" and c.work_done_at is not None:
            candidates.append(
                probe_ready_at(probe=c.spec.readiness, started_at=c.started_at, work_done_at=c.work_done_at)
            )
        elif c.phase == "backoff" and c.backoff_until is not None:
            candidates.append(c.backoff_until)
        elif c.phase == "running" and c.spec.run_seconds is not None and c.ready_at is not None:
            candidates.append(c.ready_at + c.spec.run_seconds)
        if candidates:
            times[key] = max(now, min(candidates))
    return times


def next_event_at(node: NodeModel) -> float | None:
    """Simulated time of the node's next event, assuming nothing is started or removed before."""
    rate = per_container_rate(starting=starting_count(node), cores=node.cores, penalty=node.settings.penalty)
    times = _next_times(node.containers, now=node.now, rate=rate)
    return min(times.values()) if times else None


def _apply_event(
    c: ContainerState, *, key: str, now: float, settings: ModelSettings
) -> tuple[ContainerState, ModelEvent | None]:
    """The container after its event at ``now``, and the event, or None when nothing the kubelet reports
    changes (work done, the readiness probe still to come: running and not Ready before and after)."""
    if c.phase == "starting":
        if c.spec.cpu_seconds - c.work_done <= _EPS * max(1.0, c.spec.cpu_seconds):
            done = replace(c, work_done=c.spec.cpu_seconds, work_done_at=now)
            ready_at = probe_ready_at(probe=c.spec.readiness, started_at=c.started_at, work_done_at=now)
            if ready_at > now + _EPS:
                return replace(done, phase="probing"), None
            return replace(done, phase="running", ready_at=now), ModelEvent(at=now, key=key, kind="ready")
        # Not done: the only other event of a starting container is its liveness deadline.
        return _end_attempt(
            c, now=now, settings=settings, reason="Error", exit_code=LIVENESS_EXIT_CODE, key=key
        )
    if c.phase == "probing":
        return replace(c, phase="running", ready_at=now), ModelEvent(at=now, key=key, kind="ready")
    if c.phase == "backoff":
        restarted = replace(
            c,
            phase="starting",
            started_at=now,
            work_done=0.0,
            work_done_at=None,
            ready_at=None,
            backoff_until=None,
        )
        return restarted, ModelEvent(at=now, key=key, kind="restarted")
    return _end_attempt(c, now=now, settings=settings, reason="Completed", exit_code=0, key=key)


def _end_attempt(
    c: ContainerState, *, now: float, settings: ModelSettings, reason: str, exit_code: int, key: str
) -> tuple[ContainerState, ModelEvent]:
    termination = Termination(reason=reason, exit_code=exit_code, started_at=c.started_at, finished_at=now)
    kind: EventKind = "killed" if exit_code != 0 else "exited"
    event = ModelEvent(at=now, key=key, kind=kind, exit_code=exit_code)
    policy = c.spec.restart_policy
    restarts_again = policy == "Always" or (policy == "OnFailure" and exit_code != 0)
    if not restarts_again:
        final: Phase = "succeeded" if exit_code == 0 else "failed"
        return replace(c, phase=final, ready_at=None, last_termination=termination), event
    restarts = c.restarts + 1
    until = now + backoff_delay(restarts=restarts, settings=settings, key=key)
    backing_off = replace(
        c,
        phase="backoff",
        restarts=restarts,
        ready_at=None,
        backoff_until=until,
        work_done=0.0,
        work_done_at=None,
        last_termination=termination,
    )
    return backing_off, event


def advance(node: NodeModel, *, until: float) -> tuple[NodeModel, list[ModelEvent]]:
    """Run the node from ``node.now`` to ``until``; returns the new state and the events, in order."""
    if until < node.now - _EPS:
        raise ValueError(f"cannot go back in time: now={node.now}, until={until}")
    settings = node.settings
    containers = dict(node.containers)
    now = node.now
    peak = node.peak_starting
    events: list[ModelEvent] = []
    while True:
        starting = sum(1 for c in containers.values() if c.phase == "starting")
        rate = per_container_rate(starting=starting, cores=node.cores, penalty=settings.penalty)
        times = _next_times(containers, now=now, rate=rate)
        t_next = min(times.values()) if times else math.inf
        step_to = min(t_next, until)
        if step_to > now and starting:
            done = rate * (step_to - now)
            for key, c in containers.items():
                if c.phase == "starting":
                    containers[key] = replace(c, work_done=min(c.spec.cpu_seconds, c.work_done + done))
        now = max(now, step_to)
        if t_next > until:
            break
        for key in sorted(k for k, t in times.items() if t <= t_next + _EPS):
            containers[key], event = _apply_event(containers[key], key=key, now=now, settings=settings)
            if event is not None:
                events.append(event)
        peak = max(peak, sum(1 for c in containers.values() if c.phase == "starting"))
    return replace(node, now=max(node.now, until), containers=containers, peak_starting=peak), events
