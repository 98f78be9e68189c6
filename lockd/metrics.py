"""Prometheus metrics of one lockd app, in a registry of its own (no process-wide globals)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=_registry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = _RequestCounts()
        r.register(self.requests)
        self.wait_seconds = Histogram(
            "stagger_lockd_wait_seconds",
            "Time from a pod's first ask to its grant.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.slots_in_use = Gauge("stagger_lockd_slots_in_use", "Start-up slots held now.", registry=r)
        self.slot_limit = Gauge(
            "stagger_lockd_slot_limit", "Effective maxConcurrent limit (-1: none).", registry=r
        )
        self.queue_length = Gauge("stagger_lockd_queue_length", "Pods waiting for a slot.", registry=r)
        self.slots_ended = Counter(
            "stagger_lockd_slots_ended", "Slots ended, by why: released, expired.", ["why"], registry=r
        )
        self.cpu_load = Gauge(
            "stagger_lockd_cpu_load_percent", "Last sampled CPU busy percent (-1: no reading).", registry=r
        )
        self.io_load = Gauge(
            "stagger_lockd_io_load_percent", "Last sampled IO pressure percent (-1: no reading).", registry=r
        )
        self.policy_reloads = Counter(
            "stagger_lockd_policy_reloads",
            "Policy file reloads, by result: ok, error.",
            ["result"],
            registry=r,
        )

    def count(self, result: str) -> None:
        """One lock request answered with this result."""
        counts = self.requests.counts
        counts[result] = counts.get(result, 0) + 1

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


class _RequestCounts(Collector):
    """`stagger_lockd_requests_total{result}`: plain integers bumped on every answer (one event loop, no
    lock needed; a prometheus_client Counter takes a lock per increment), read when /metrics is scraped."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "stagger_lockd_requests", "Lock requests answered, by result.", labels=["result"]
        )
        for result, count in self.counts.items():
            family.add_metric([result], count)
        yield family
