"""lockd's Prometheus metrics, in the text exposition format (version 0.0.4), kept per app (no process-wide
globals).

Written here rather than with prometheus_client: lockd runs on every node, and the client library (with
the HTTP server, WSGI and OpenMetrics modules it imports) was about 1 MB of each lockd's memory for nine
metrics; its Counter also takes a lock on every increment, on the request path. One event loop updates
these, so plain numbers do. Same names, types, labels and lines as before (`_total` counters, histogram
`_bucket`/`_count`/`_sum`), minus prometheus_client's `_created` series.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _header(name: str, kind: str, help_text: str) -> list[str]:
    escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return [f"# HELP {name} {escaped}", f"# TYPE {name} {kind}"]


class Counter:
    """A counter with one label (or none): `labels(x).inc()`, or `count(x)` on the request path."""

    def __init__(self, name: str, help_text: str, label: str | None = None) -> None:
        self.name, self.help, self.label = name, help_text, label
        self.values: dict[str, float] = {}

    def count(self, value: str = "", amount: float = 1) -> None:
        self.values[value] = self.values.get(value, 0) + amount

    def labels(self, **labels: str) -> _Child:
        return _Child(self, next(iter(labels.values()), ""))

    def render(self) -> list[str]:
        lines = _header(f"{self.name}_total", "counter", self.help)
        for value, total in self.values.items():
            labels = f'{{{self.label}="{_escape(value)}"}}' if self.label else ""
            lines.append(f"{self.name}_total{labels} {_number(total)}")
        return lines


@dataclass(frozen=True)
class _Child:
    counter: Counter
    value: str

    def inc(self, amount: float = 1) -> None:
        self.counter.count(self.value, amount)


class Gauge:
    """A number set now and then, or read from a function when scraped."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help = name, help_text
        self.value = 0.0
        self._read: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self.value = float(value)

    def set_function(self, read: Callable[[], float]) -> None:
        self._read = read

    def get(self) -> float:
        return float(self._read()) if self._read is not None else self.value

    def render(self) -> list[str]:
        return [*_header(self.name, "gauge", self.help), f"{self.name} {_number(self.get())}"]


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help = name, help_text
        self.bounds = (*sorted(buckets), math.inf)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break

    def render(self) -> list[str]:
        lines = _header(self.name, "histogram", self.help)
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            lines.append(f'{self.name}_bucket{{le="{_number(bound)}"}} {_number(cumulative)}')
        lines.append(f"{self.name}_count {_number(cumulative)}")
        lines.append(f"{self.name}_sum {_number(self.sum)}")
        return lines


@dataclass
class Metrics:
    requests: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_requests", "Lock requests answered, by result.", "result"
        )
    )
    wait_seconds: Histogram = field(
        default_factory=lambda: Histogram(
            "stagger_lockd_wait_seconds",
            "Time from a pod's first ask to its grant.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
        )
    )
    slots_in_use: Gauge = field(
        default_factory=lambda: Gauge("stagger_lockd_slots_in_use", "Start-up slots held now.")
    )
    slot_limit: Gauge = field(
        default_factory=lambda: Gauge("stagger_lockd_slot_limit", "Effective maxConcurrent limit (-1: none).")
    )
    queue_length: Gauge = field(
        default_factory=lambda: Gauge("stagger_lockd_queue_length", "Pods waiting for a slot.")
    )
    slots_ended: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_slots_ended", "Slots ended, by why: released, expired.", "why"
        )
    )
    waits_given_up: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_waits_given_up",
            "Waits that ended without a slot, by why: stoppedAsking (the init client stopped asking: it "
            "gave up after maxWait or unreachableWait, or its pod went away), startedWithoutSlot (the pod "
            "became Ready while in the queue), podGone (finished or deleted while in the queue).",
            "why",
        )
    )
    connections_shed: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_connections_shed",
            "Connections shed at --max-connections, by why: idleClosed (the oldest connection without a "
            "request in progress closed for a new one), refused (all busy: the new one closed at once).",
            "why",
        )
    )
    pod_tokens: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_pod_tokens",
            "Asks and releases in cluster mode, by the pod's service-account token: verified (the token's "
            "pod is the one named), absent (no token: checked by name and uid), unchecked (the API server "
            "could not review it: checked by name and uid), refused (another pod's, expired, another "
            "audience, or none under --require-pod-token).",
            "result",
        )
    )
    cpu_load: Gauge = field(
        default_factory=lambda: Gauge(
            "stagger_lockd_cpu_load_percent", "Last sampled CPU busy percent (-1: no reading)."
        )
    )
    io_load: Gauge = field(
        default_factory=lambda: Gauge(
            "stagger_lockd_io_load_percent", "Last sampled IO pressure percent (-1: no reading)."
        )
    )
    policy_reloads: Counter = field(
        default_factory=lambda: Counter(
            "stagger_lockd_policy_reloads", "Policy file reloads, by result: ok, error.", "result"
        )
    )

    def count(self, result: str) -> None:
        """One lock request answered with this result."""
        self.requests.count(result)

    def watch(
        self,
        *,
        slots_in_use: Callable[[], float],
        queue_length: Callable[[], float],
        slot_limit: Callable[[], float],
    ) -> None:
        """The ledger's gauges are read when /metrics is scraped, not set on every request."""
        self.slots_in_use.set_function(slots_in_use)
        self.queue_length.set_function(queue_length)
        self.slot_limit.set_function(slot_limit)

    def render(self) -> bytes:
        """Every metric in the text exposition format."""
        lines: list[str] = []
        # Every metric field, in the order they are defined: a new metric cannot be left out of the page.
        for each in fields(self):
            metric = getattr(self, each.name)
            if isinstance(metric, Counter | Gauge | Histogram):
                lines += metric.render()
        return ("\n".join(lines) + "\n").encode()
