"""What lockd probes of a pod while it holds a start-up slot, and when the pod has passed (issue 38).

The kubelet looks at a readiness probe once a `periodSeconds` (10 s by default), so a pod whose work is done
waits up to one period for its Ready condition, holding its slot all along: with the default period, 4 pods
of 2 s each took 50 s one after another on a real node, against 14 s with `periodSeconds: 1`. lockd runs
the pod's own probes itself, at its node policy's `probePeriod`, while the slot is held.

Pure functions of the pod (and of the wall clock for `due`): no I/O. `lockd/prober.py` runs the checks.

Which probe: each container's readinessProbe, or its startupProbe when it has none (the kubelet's Ready
waits for both; the readiness probe is the later of the two). The containers are the pod's containers and
its sidecars (init containers with `restartPolicy: Always`), whose readiness the Ready condition includes.
A container without either probe is ready once it runs, as the kubelet has it.

A pod lockd does not probe keeps the rule of before (its slot ends at the Ready condition): one with an
`exec` or `grpc` probe (lockd cannot judge every container), a probe naming another host than the pod's own
address (`httpGet.host`, `tcpSocket.host`: lockd probes the pod and nothing else, so a pod cannot point
every node's lockd at a third party), or a port that names no port of its container.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from stagger.timestamps import parse_rfc3339

ProbeKind = Literal["http", "tcp"]
Pod = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Target:
    """One container's probe, as lockd runs it against the pod's IP."""

    container: str
    kind: ProbeKind
    port: int
    https: bool = False
    path: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 1.0
    success_threshold: int = 1
    initial_delay: float = 0.0

    def describe(self, ip: str) -> str:
        """As /status and the logs show it: `GET http://198.18.1.5:8080/readyz`, `TCP 198.18.1.5:5432`."""
        host = f"[{ip}]" if ":" in ip else ip
        if self.kind == "tcp":
            return f"TCP {host}:{self.port}"
        return f"GET {'https' if self.https else 'http'}://{host}:{self.port}{self.path}"


@dataclass(frozen=True, slots=True)
class Plan:
    """The probes lockd runs for a pod, or why it runs none (`why_not`, for /status)."""

    targets: tuple[Target, ...] = ()
    why_not: str = ""

    @property
    def probed(self) -> bool:
        return bool(self.targets) and not self.why_not


NO_PROBE: Final = Plan(why_not="no container has a readiness or startup probe")
"""Most pods' plan, shared: lockd keeps one per pod it watches (`lockd.clusterwatch.lean_pod`)."""


PLAN_KEPT: Final = "stagger.lockd/probes"
"""The key of a pod's `Plan` in the spec lockd keeps of it (`lockd.clusterwatch.lean_pod` drops the
containers, probes included, and keeps their plan instead)."""


def pod_plan(pod: Pod) -> Plan:
    spec = pod.get("spec") or {}
    kept = spec.get(PLAN_KEPT)
    return kept if isinstance(kept, Plan) else plan_of(spec)


def plan_of(spec: Mapping[str, Any]) -> Plan:
    """The probes of a pod `spec` that lockd runs, one a container."""
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    containers += [
        c
        for c in spec.get("initContainers") or []
        if isinstance(c, dict) and c.get("restartPolicy") == "Always"
    ]
    targets = []
    for container in containers:
        probe = container.get("readinessProbe") or container.get("startupProbe")
        if not isinstance(probe, dict):
            continue
        target = _target(container, probe)
        if isinstance(target, str):
            return Plan(why_not=target)
        targets.append(target)
    return Plan(targets=tuple(targets)) if targets else NO_PROBE


def _target(container: Mapping[str, Any], probe: Mapping[str, Any]) -> Target | str:
    name = str(container.get("name") or "")
    action = probe.get("httpGet") or probe.get("tcpSocket")
    if not isinstance(action, dict):
        kind = next((key for key in ("exec", "grpc") if key in probe), "unknown")
        article = "an" if kind[0] in "aeiou" else "a"
        return f"container {name} has {article} {kind} probe, which only the kubelet runs"
    host = action.get("host")
    if host:
        return (
            f"container {name}'s probe names the host {str(host)[:64]!r}: lockd probes only the pod's own IP"
        )
    port = _port(container, action.get("port"))
    if port is None:
        return f"container {name}'s probe port {str(action.get('port'))[:64]!r} is no port of the container"
    tcp = Target(
        container=name,
        kind="tcp",
        port=port,
        timeout=_number(probe.get("timeoutSeconds"), default=1.0),
        success_threshold=int(_number(probe.get("successThreshold"), default=1.0)),
        initial_delay=_number(probe.get("initialDelaySeconds"), default=0.0, least=0.0),
    )
    if not isinstance(probe.get("httpGet"), dict):
        return tcp
    path = str(action.get("path") or "/")
    headers = tuple(
        (str(header.get("name")), str(header.get("value") or ""))
        for header in action.get("httpHeaders") or []
        if isinstance(header, dict) and header.get("name")
    )
    return replace(
        tcp,
        kind="http",
        https=str(action.get("scheme") or "HTTP").upper() == "HTTPS",
        path=path if path.startswith("/") else f"/{path}",
        headers=headers,
    )


def _port(container: Mapping[str, Any], port: object) -> int | None:
    """An IntOrString port: a number, or the name of one of the container's ports (then a number in a
    string, as the kubelet falls back to)."""
    if isinstance(port, str):
        for each in container.get("ports") or []:
            if isinstance(each, dict) and each.get("name") == port:
                port = each.get("containerPort")
                break
        else:
            # ASCII digits only: str.isdigit() is true of "²", which int() refuses.
            port = int(port) if port.isascii() and port.isdigit() and len(port) <= 5 else None
    return port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else None


def _number(value: object, *, default: float, least: float = 1.0) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(float(value), least)
    return default


def pod_ip(pod: Pod) -> str:
    return str((pod.get("status") or {}).get("podIP") or "")


def _statuses(pod: Pod) -> dict[str, Mapping[str, Any]]:
    status = pod.get("status") or {}
    found: dict[str, Mapping[str, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for each in status.get(key) or []:
            if isinstance(each, dict):
                found[str(each.get("name"))] = each
    return found


def _started(status: Mapping[str, Any] | None) -> float | None:
    """When the container's current run started (epoch seconds), or None when it does not run."""
    running = ((status or {}).get("state") or {}).get("running")
    if not isinstance(running, dict):
        return None
    started = parse_rfc3339(str(running.get("startedAt") or ""))
    return started if started is not None else 0.0


def due(plan: Plan, pod: Pod, *, wall: float) -> tuple[Target, ...]:
    """The targets to check now: those whose container runs and is past its `initialDelaySeconds` (the
    kubelet's own wait; a user who set one to let a warm-up run before the probe counts has it kept)."""
    statuses = _statuses(pod)
    found = []
    for target in plan.targets:
        started = _started(statuses.get(target.container))
        if started is not None and started + target.initial_delay <= wall:
            found.append(target)
    return tuple(found)


def all_running(pod: Pod) -> bool:
    """Every container of the pod runs (a container without a probe is ready once it does): the kubelet
    lists each of them in `containerStatuses`."""
    statuses = [s for s in (pod.get("status") or {}).get("containerStatuses") or [] if isinstance(s, dict)]
    return bool(statuses) and all(_started(status) is not None for status in statuses)


Tally = Mapping[str, int]
"""Consecutive passes by container, in the current slot."""


def counted(tally: Tally, results: Sequence[tuple[Target, bool]]) -> dict[str, int]:
    """The tally after one attempt's `results`: a pass adds one, a failure starts over at none."""
    after = dict(tally)
    for target, passed in results:
        after[target.container] = after.get(target.container, 0) + 1 if passed else 0
    return after


def passed(plan: Plan, tally: Tally) -> bool:
    """Every probed container has passed its `successThreshold` times in a row."""
    return plan.probed and all(tally.get(t.container, 0) >= t.success_threshold for t in plan.targets)
