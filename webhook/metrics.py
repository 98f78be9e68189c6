"""Prometheus metrics of one controller app (`stagger_controller_*`), in a registry of its own (no
process-wide globals)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from stagger.contracts.failopen import CAUSES
from stagger.version import VERSION

ADMISSION_RESULTS = ("allowed", "mutated", "error", "bad_request")
"""allowed: answered with no patch; mutated: with a patch; error: an internal error, the pod admitted
unchanged with a warning; bad_request: 400 or 413, not an AdmissionReview we could read."""
_OK_ERROR = ("ok", "error")


def _registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def _counter(
    name: str,
    documentation: str,
    label: str,
    *,
    registry: CollectorRegistry,
    values: Iterable[str] = (),
) -> Counter:
    """A counter with one label whose series for each of `values` is exported at 0 from the start, so that a
    rate or an alert on it has a series before the first increment."""
    counter = Counter(name, documentation, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=_registry)
    refreshers: list[Callable[[], None]] = field(default_factory=list)
    """Called before each scrape: gauges that are read off the state (the group counts) are current."""

    def __post_init__(self) -> None:
        self._serving(self.registry)
        self._groups(self.registry)
        # The standard process_* metrics (memory, CPU, open files) and which stagger runs.
        ProcessCollector(registry=self.registry)
        Gauge(
            "stagger_controller_build_info",
            "Always 1; the version of stagger this process runs.",
            ["version"],
            registry=self.registry,
        ).labels(VERSION).set(1)
        # No sample until the start-up check has read the API server's version (none when it could not).
        self.kubernetes_info = Gauge(
            "stagger_controller_kubernetes_info",
            "Always 1; the API server's Kubernetes version as read at start-up, and whether its minor is "
            "one stagger is tested on (tested: true, false).",
            ["version", "tested"],
            registry=self.registry,
        )

    def _serving(self, r: CollectorRegistry) -> None:
        """Admission, the TLS listener's requests and the files it reloads."""
        self.admissions = _counter(
            "stagger_controller_admissions",
            "AdmissionReviews answered, by result: allowed, mutated, error, bad_request.",
            "result",
            registry=r,
            values=ADMISSION_RESULTS,
        )
        self.requests = Counter(
            "stagger_controller_requests",
            "HTTP requests answered on the TLS listener (admission, the group API, /status), by route "
            "(the path template; 'other' for paths that match none) and code class (2xx, 4xx, 5xx).",
            ["route", "code"],
            registry=r,
        )
        self.connections_shed = _counter(
            "stagger_controller_connections_shed",
            "Connections shed at --max-connections, by why: idleClosed (the oldest connection without a "
            "request being served closed for a new one), refused (all busy: the new one closed at once).",
            "why",
            registry=r,
            values=("idleClosed", "refused"),
        )
        self.requests_refused = _counter(
            "stagger_controller_requests_refused",
            "Requests refused on the TLS listener before any handler, by HTTP status: 408 (not whole "
            "within --header-timeout), 411 (a chunked body), 413 (a body over --max-body), 431 (a head over "
            "8 KiB), 503 (--body-budget taken), 400 (a bad Content-Length).",
            "status",
            registry=r,
        )
        self.admission_seconds = Histogram(
            "stagger_controller_admission_seconds",
            "Time to answer one AdmissionReview, from the handler's start to the encoded answer.",
            buckets=(0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.policy_reloads = _counter(
            "stagger_controller_policy_reloads",
            "Policy file reloads, by result: ok, error.",
            "result",
            registry=r,
            values=_OK_ERROR,
        )
        self.certificate_reloads = _counter(
            "stagger_controller_certificate_reloads",
            "Serving certificate reloads, by result: ok, error.",
            "result",
            registry=r,
            values=_OK_ERROR,
        )
        self.staggering_policies = Gauge(
            "stagger_controller_staggering_policies", "Staggering policies in force.", registry=r
        )

    def _groups(self, r: CollectorRegistry) -> None:
        """The group part: grants, gates and evictions, evict mode's admissions, the book's counts."""
        self.grants = Counter(
            "stagger_controller_grants",
            "Answers of the group grant API (POST /v1/groups/grant and the gate reconciler), by basis: "
            "paced, bypassed, maxBlocked, notHeld, reserved, ownerReservation (granted), denied, unknown "
            "(refused).",
            ["basis"],
            registry=r,
        )
        self.grant_latency = Histogram(
            "stagger_controller_grant_latency_seconds",
            "From a pod turning Ready in the controller's pod watch to a grant that Ready made room for "
            "being written into a node's wait answer (POST /v1/groups/wait), in the controller's own "
            "clock. Grants to pods that had room when they asked (or got it otherwise: startTimeout, a "
            "deletion, maxBlockedDuration) are not in it: they are counted in stagger_controller_grants.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        self.gate_removals = _counter(
            "stagger_controller_gate_removals",
            "Scheduling gates removed (gate mode), by result: ok, error.",
            "result",
            registry=r,
            values=_OK_ERROR,
        )
        self.evictions = _counter(
            "stagger_controller_evictions",
            "Held pods evicted (evict mode), by result: evicted, throttled (429: a disruption budget or the "
            "API server's limits; retried after a back-off), gone (404/409: nothing to evict), error.",
            "result",
            registry=r,
            values=("evicted", "throttled", "gone", "error"),
        )
        self.evict_admissions = Counter(
            "stagger_controller_evict_admissions",
            "Evict-mode admission decisions, by outcome: admit (let through), hold, lock (no group pacing "
            "here: paced by the init client), and by how: reserved (its owner's reservation), paced, denied, "
            "forwarded (asked the leader), unanswered (the leader could not be asked in time: held), off (no "
            "group pacing: lock).",
            ["outcome", "basis"],
            registry=r,
        )
        self.reservations = Gauge(
            "stagger_controller_reservations",
            "Places counted for pods not seen yet (evict mode): owners' reservations and admissions.",
            registry=r,
        )
        self.claims_lapsed = Counter(
            "stagger_controller_claims_lapsed",
            "Places evict-mode admission claimed for pods it let through that lapsed because the pod never "
            "showed in the controller's pod watch within --claim-confirm-timeout: reviews for pods never "
            "created (forged, or refused by a later webhook), or a watch running late.",
            registry=r,
        )
        self.group_pods = Gauge(
            "stagger_controller_group_pods",
            "Pods of all staggering groups, by state: ready, starting, held (a pod in two groups counts twice).",
            ["state"],
            registry=r,
        )
        self.groups = Gauge("stagger_controller_groups", "Staggering groups with pods.", registry=r)
        self.leader = Gauge(
            "stagger_controller_leader",
            "1 while this replica leads (grants, removes gates), else 0.",
            registry=r,
        )
        self.fail_opens = _counter(
            "stagger_controller_fail_opens",
            "Pods counted (by the leader, once each) as started without their start-up slot, by cause: "
            "lockdUnreachable, maxWait, rejected, badConfig, groupPacerUnreachable, groupPacerNotConfigured, "
            "webhookNotCalled, unknown (docs/contracts.md, Fail-open causes).",
            "cause",
            registry=r,
            values=CAUSES,
        )
        self.pods_without_slot = Gauge(
            "stagger_controller_pods_started_without_slot",
            "Enabled pods that exist now and started without their start-up slot, by cause.",
            ["cause"],
            registry=r,
        )
        self.group_waits = Gauge(
            "stagger_controller_group_waits",
            "Long polls of lockd (POST /v1/groups/wait) waiting now.",
            registry=r,
        )
