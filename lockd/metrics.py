"""lockd's Prometheus metrics, in the text exposition format (version 0.0.4), kept per app (no process-wide
globals).

Written here rather than with prometheus_client: lockd runs on every node, and the client library (with
the HTTP server, WSGI and OpenMetrics modules it imports) was about 1 MB of each lockd's memory for nine
metrics; its Counter also takes a lock on every increment, on the request path. One event loop updates
these, so plain numbers do. The names, types, labels and lines are the Prometheus text format's as
prometheus_client writes them (`_total` counters, histogram `_bucket`/`_count`/`_sum`), minus its `_created`
series.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from stagger.version import VERSION

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


class _Family:
    """Samples by the value of one label (or, without a label, the one sample under ""): what a counter and
    a gauge family share, so both write their lines the same way."""

    kind = ""
    suffix = ""  # after the name on every line: a counter's `_total`

    def __init__(self, name: str, help_text: str, label: str | None = None) -> None:
        self.name, self.help, self.label = name, help_text, label
        self.values: dict[str, float] = {}

    def render(self) -> list[str]:
        series = f"{self.name}{self.suffix}"
        lines = _header(series, self.kind, self.help)
        for value, number in self.values.items():
            labels = f'{{{self.label}="{_escape(value)}"}}' if self.label else ""
            lines.append(f"{series}{labels} {_number(number)}")
        return lines


class Counter(_Family):
    """A counter with one label (or none): `labels(x).inc()`, or `count(x)` on the request path."""

    kind = "counter"
    suffix = "_total"

    def count(self, value: str = "", amount: float = 1) -> None:
        self.values[value] = self.values.get(value, 0) + amount

    def labels(self, **labels: str) -> _Child:
        return _Child(self, next(iter(labels.values()), ""))


class LockAnswers(Counter):
    """`stagger_lockd_requests_total{result}` for the lock port, and beside it the answers of lockd's other
    lock listener with a `listener` label too (`{listener="podStartupLock",result=...}`): one family, so
    that a sum by result counts every grant and denial the node gave, whatever port it was asked on."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help_text, "result")
        self.by_listener: dict[tuple[str, str], float] = {}

    def count_on(self, listener: str, result: str) -> None:
        key = (listener, result)
        self.by_listener[key] = self.by_listener.get(key, 0) + 1

    def render(self) -> list[str]:
        series = f"{self.name}{self.suffix}"
        return super().render() + [
            f'{series}{{listener="{_escape(listener)}",result="{_escape(result)}"}} {_number(number)}'
            for (listener, result), number in self.by_listener.items()
        ]


@dataclass(frozen=True)
class _Child:
    counter: Counter
    value: str

    def inc(self, amount: float = 1) -> None:
        self.counter.count(self.value, amount)


class Gauge:
    """A number set now and then, or read from a function when scraped. None: no value (no reading yet, no
    limit), and then no sample: Prometheus' convention is an absent series, not a sentinel like -1."""

    def __init__(self, name: str, help_text: str, *, initial: float | None = 0.0) -> None:
        self.name, self.help = name, help_text
        self.value = initial
        self._read: Callable[[], float | None] | None = None

    def set(self, value: float | None) -> None:
        self.value = None if value is None else float(value)

    def set_function(self, read: Callable[[], float | None]) -> None:
        self._read = read

    def get(self) -> float | None:
        value = self._read() if self._read is not None else self.value
        return None if value is None else float(value)

    def render(self) -> list[str]:
        value = self.get()
        sample = [] if value is None else [f"{self.name} {_number(value)}"]
        return [*_header(self.name, "gauge", self.help), *sample]


class GaugeFamily(_Family):
    """A gauge with one label: a sample per label value set, none for a value removed (its subject is gone:
    an absent series, not a stale one)."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, label: str) -> None:
        super().__init__(name, help_text, label)  # here the label is required: a sample per subject

    def set(self, value: str, number: float) -> None:
        self.values[value] = float(number)

    def remove(self, value: str) -> None:
        self.values.pop(value, None)


@dataclass(frozen=True)
class BuildInfo:
    """`<name> {version=...} 1`: which stagger runs, to join on or to count versions during a rollout."""

    name: str
    version: str

    def render(self) -> list[str]:
        help_text = "Always 1; the version of stagger this process runs."
        return [
            *_header(self.name, "gauge", help_text),
            f'{self.name}{{version="{_escape(self.version)}"}} 1.0',
        ]


class ProcessMetrics:
    """The standard `process_*` metrics (prometheus_client's ProcessCollector's names and meanings) read from
    /proc/self when scraped: memory, CPU time, open files, start time. None where /proc is not Linux's."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096

    def _stat(self) -> list[str] | None:
        try:
            with open(f"{self.proc}/self/stat", "rb") as f:
                # The command name (field 2) is in parentheses and may hold spaces: split after it.
                return f.read().rsplit(b")", 1)[1].decode().split()
        except OSError:
            return None

    def _boot_time(self) -> float | None:
        try:
            with open(f"{self.proc}/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        return float(line.split()[1])
        except OSError:
            return None
        return None

    def render(self) -> list[str]:
        fields = self._stat()
        if fields is None:
            return []
        # Fields counted from 3 (state) in proc(5): utime 14, stime 15, starttime 22, vsize 23, rss 24.
        utime, stime, start = (float(fields[i - 3]) for i in (14, 15, 22))
        vsize, rss = float(fields[23 - 3]), float(fields[24 - 3])
        lines = [
            *_header(
                "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds."
            ),
            f"process_cpu_seconds_total {_number((utime + stime) / self._ticks)}",
            *_header("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
            f"process_resident_memory_bytes {_number(rss * self._page)}",
            *_header("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
            f"process_virtual_memory_bytes {_number(vsize)}",
        ]
        boot = self._boot_time()
        if boot is not None:
            started = boot + start / self._ticks
            help_text = "Start time of the process since unix epoch in seconds."
            lines += [
                *_header("process_start_time_seconds", "gauge", help_text),
                f"process_start_time_seconds {_number(started)}",
            ]
        try:
            open_fds = len(os.listdir(f"{self.proc}/self/fd"))
        except OSError:
            return lines
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        lines += [
            *_header("process_open_fds", "gauge", "Number of open file descriptors."),
            f"process_open_fds {_number(open_fds)}",
            *_header("process_max_fds", "gauge", "Maximum number of open file descriptors."),
            f"process_max_fds {_number(soft)}",
        ]
        return lines


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


def _counter(name: str, help_text: str, label: str | None = None) -> Counter:
    """A dataclass field whose default is a new Counter (one per app: no process-wide metrics)."""
    return field(default_factory=lambda: Counter(name, help_text, label))


def _gauge(name: str, help_text: str, *, initial: float | None = 0.0) -> Gauge:
    """A dataclass field whose default is a new Gauge (one per app: no process-wide metrics)."""
    return field(default_factory=lambda: Gauge(name, help_text, initial=initial))


def _gauge_family(name: str, help_text: str, label: str) -> GaugeFamily:
    """A dataclass field whose default is a new GaugeFamily (one per app: no process-wide metrics)."""
    return field(default_factory=lambda: GaugeFamily(name, help_text, label))


def _histogram(name: str, help_text: str, buckets: tuple[float, ...]) -> Histogram:
    """A dataclass field whose default is a new Histogram (one per app: no process-wide metrics)."""
    return field(default_factory=lambda: Histogram(name, help_text, buckets=buckets))


@dataclass
class Metrics:
    # Each helper returns field(default_factory=...), a new metric per instance, but ruff's RUF009 sees
    # only a call in a dataclass default: it does not follow a helper to dataclasses.field.
    # ruff: disable[RUF009]
    requests: LockAnswers = field(
        default_factory=lambda: LockAnswers(
            "stagger_lockd_requests",
            "Lock requests answered, by result; those of pod-startup-lock's port (--pod-startup-lock-port) "
            'with listener="podStartupLock" too: granted, denied (423), queue_full, unavailable (not ready).',
        )
    )
    wait_seconds: Histogram = _histogram(
        "stagger_lockd_wait_seconds",
        "Time from a pod's first ask to its grant.",
        buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
    )
    slots_in_use: Gauge = _gauge("stagger_lockd_slots_in_use", "Start-up slots held now.")
    slot_limit: Gauge = _gauge(
        "stagger_lockd_slot_limit", "Effective maxConcurrent limit; no sample while the policy sets none."
    )
    queue_length: Gauge = _gauge("stagger_lockd_queue_length", "Pods waiting for a slot.")
    slots_ended: Counter = _counter(
        "stagger_lockd_slots_ended",
        "Slots ended, by why: released (DELETE), ready (the pod's Ready condition), probedReady (lockd's own "
        "run of the pod's readiness probe passed), finished, deleted, expired (holdTimeout).",
        "why",
    )
    probes: Counter = _counter(
        "stagger_lockd_probes",
        "lockd's own runs of held pods' readiness probes (node policy probeReadiness), one a container, by "
        "result: passed, failed (refused, timed out, or an HTTP status outside 2xx), skipped (more probes "
        "in flight than --probe-max-in-flight: tried at the next period).",
        "result",
    )
    waits_given_up: Counter = _counter(
        "stagger_lockd_waits_given_up",
        "Waits that ended without a slot, by why: stoppedAsking (the init client stopped asking: it "
        "gave up after maxWait or unreachableWait, or its pod went away), startedWithoutSlot (the pod "
        "became Ready while in the queue), podGone (finished or deleted while in the queue).",
        "why",
    )
    daemonset_waits_given_up: Counter = _counter(
        "stagger_lockd_daemonset_waits_given_up",
        "waitForDaemonSets waits that lockd stopped at --daemonset-wait, by why: podMissing (a DaemonSet "
        "that should run on the node had no pod there), notListed (the DaemonSets could not be listed).",
        "why",
    )
    connections_shed: Counter = _counter(
        "stagger_lockd_connections_shed",
        "Connections shed at --max-connections, by why: idleClosed (the oldest connection without a "
        "request in progress closed for a new one), refused (all busy: the new one closed at once).",
        "why",
    )
    requests_refused: Counter = _counter(
        "stagger_lockd_requests_refused",
        "Requests refused at the door before any handler, by HTTP status: 408 (not whole within "
        "--header-timeout), 411 (a chunked body), 413 (a body over --max-body), 431 (a head over 8 KiB), "
        "400 (a bad Content-Length).",
        "status",
    )
    pod_tokens: Counter = _counter(
        "stagger_lockd_pod_tokens",
        "Asks and releases in cluster mode, by the pod's service-account token: verified (the token's "
        "pod is the one named), absent (no token: checked by name and uid), unchecked (the API server "
        "could not review it: checked by name and uid), refused (another pod's, expired, another "
        "audience, or none under --require-pod-token).",
        "result",
    )
    pod_token_refusals: Counter = _counter(
        "stagger_lockd_pod_token_refusals",
        "Asks and releases refused for their token (403, or 503 to ask again), by reason: missing (none, "
        "for a pod admission gave one), required (none, under --require-pod-token), rejected (the API "
        "server does not accept it), other_pod (another pod's), caller_budget (the caller address sent "
        "too many new tokens: --token-review-caller-burst), node_budget (the node's backstop), "
        "unanswered (the TokenReview failed).",
        "reason",
    )
    token_checks: Counter = _counter(
        "stagger_lockd_token_checks",
        "New pod tokens checked (a cached answer is not counted), by how: keys (against the API server's "
        "published keys, no API request), review (a TokenReview: a token the keys cannot judge, or "
        "--no-token-keys).",
        "how",
    )
    pushed_grants: Counter = _counter(
        "stagger_lockd_pushed_grants",
        "Group grants the controller gave in the answers of the node's wait stream, by outcome: "
        "received, used (a pod started on one), lapsed (not used within half its reservation, or its "
        "pod was another of that name: the pod asks for its grant instead).",
        "outcome",
    )
    cpu_load: Gauge = _gauge(
        "stagger_lockd_cpu_busy_ratio",
        "Last sampled share of the node's CPU time that was busy, 0 to 1; no sample before the first reading.",
        initial=None,
    )
    io_load: Gauge = _gauge(
        "stagger_lockd_io_pressure_ratio",
        "Last sampled IO pressure (/proc/pressure/io some avg10), 0 to 1; no sample where the node has none.",
        initial=None,
    )
    memory_load: Gauge = _gauge(
        "stagger_lockd_memory_pressure_ratio",
        "Last sampled memory pressure (/proc/pressure/memory some avg10), 0 to 1, what the memory "
        "throttle compares; no sample where the node has none.",
        initial=None,
    )
    load1: Gauge = _gauge(
        "stagger_lockd_load1",
        "Last sampled 1-minute load average of the node (/proc/loadavg, not divided by the cores), "
        "what loadAvg compares; no sample where it cannot be read.",
        initial=None,
    )
    build_info: BuildInfo = field(default_factory=lambda: BuildInfo("stagger_lockd_build_info", VERSION))
    process: ProcessMetrics = field(default_factory=ProcessMetrics)
    policy_reloads: Counter = _counter(
        "stagger_lockd_policy_reloads",
        "Policy file reloads, by result: ok, error; with --pacemaker-configs also each PacemakerConfig "
        "object version read: object_ok, object_error (invalid: skipped, its last good version stays).",
        "result",
    )
    dependency_up: GaugeFamily = _gauge_family(
        "stagger_lockd_dependency_up",
        "1 when the node policy's dependency answered its last check, 0 when it failed; no sample before "
        "its first check, nor for a dependency the node policy no longer has.",
        "dependency",
    )
    dependency_check_failures: Counter = _counter(
        "stagger_lockd_dependency_check_failures",
        "Checks of a node policy dependency that failed (an error, a non-2xx answer, a timeout), by dependency.",
        "dependency",
    )
    # ruff: enable[RUF009]

    def count(self, result: str) -> None:
        """One lock request answered with this result."""
        self.requests.count(result)

    def count_on(self, listener: str, result: str) -> None:
        """One lock request answered on another listener than the lock port (`LockAnswers`)."""
        self.requests.count_on(listener, result)

    def count_refused(self, status: int) -> None:
        """One request refused at the door (`stagger.framing`)."""
        self.requests_refused.count(str(status))

    def watch(
        self,
        *,
        slots_in_use: Callable[[], float],
        queue_length: Callable[[], float],
        slot_limit: Callable[[], float | None],
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
            if isinstance(metric, Counter | Gauge | GaugeFamily | Histogram | BuildInfo | ProcessMetrics):
                lines += metric.render()
        return ("\n".join(lines) + "\n").encode()
