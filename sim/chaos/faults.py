"""What goes wrong, and when: the faults a chaos run injects between stagger's processes and the API server,
decided from a seed so that a run can be replayed.

Per request (`FaultPlan.decide`), at the rates of `FaultSettings`:
- `error`: the API server answers 500 or 503 (a JSON Status, as kube-apiserver does);
- `throttle`: 429 with `Retry-After` (API Priority and Fairness rejecting the request);
- `reset`: the connection is dropped before any answer;
- `slow`: the answer is held back for a while (up to `slow_seconds`);
- for a watch: `cut` (the stream ends after its first events, as when an apiserver restarts or a load
  balancer times the connection out) and `gone` (a resumed watch answered `410 Gone`: the client must list
  again, https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes).
And by time: the API server down for `outage_seconds`, every request reset (`FaultPlan.outages`), and the
admission webhook too slow to answer within its timeout (`FaultPlan.webhook_delay`).

Pure: a function of the seed and of what is asked, no I/O.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Fault", "FaultKind", "FaultPlan", "FaultSettings", "Outage"]

FaultKind = Literal["error", "throttle", "reset", "slow", "cut", "gone", "outage", "webhook"]


@dataclass(frozen=True)
class FaultSettings:
    """Rates are per request (0 to 1); `cut` and `gone` apply to watches only."""

    error: float = 0.05
    throttle: float = 0.05
    reset: float = 0.03
    slow: float = 0.05
    slow_seconds: float = 2.0
    cut: float = 0.2
    gone: float = 0.3
    outages: int = 1
    outage_seconds: float = 60.0
    webhook_timeouts: int = 1
    """Windows during which every admission request to the controller is held back past the webhook's
    timeoutSeconds (the API server then lets the pod through unchanged: failurePolicy Ignore)."""
    webhook_timeout_seconds: float = 4.0
    quiet_start_seconds: float = 3.0
    """No fault before this many seconds into the run: the processes come up first, as in a cluster that
    was running before the herd arrived."""

    def __post_init__(self) -> None:
        for name in ("error", "throttle", "reset", "slow", "cut", "gone"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: a rate between 0 and 1 (got {value})")
        if self.error + self.throttle + self.reset + self.slow > 1.0:
            raise ValueError("error + throttle + reset + slow: at most 1 in all")
        if min(self.outages, self.outage_seconds, self.slow_seconds) < 0:
            raise ValueError("outages, outage_seconds and slow_seconds: not negative")
        if min(self.webhook_timeouts, self.webhook_timeout_seconds) < 0:
            raise ValueError("webhook_timeouts and webhook_timeout_seconds: not negative")

    @classmethod
    def none(cls) -> FaultSettings:
        return cls(error=0, throttle=0, reset=0, slow=0, cut=0, gone=0, outages=0, webhook_timeouts=0)


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    status: int = 0
    """`error` and `throttle`: the HTTP status to answer."""
    seconds: float = 0.0
    """`slow`: the delay; `throttle`: the Retry-After."""
    events: int = 0
    """`cut`: how many events the watch delivers before it ends."""
    after: bool = False
    """`reset`: dropped after the API server did the request (the client cannot tell it happened)."""


@dataclass(frozen=True)
class Outage:
    start: float
    end: float


@dataclass
class FaultPlan:
    """The faults of one run: `decide` for each request (times are seconds since the run began)."""

    settings: FaultSettings
    seed: int
    span_seconds: float
    """How long the run injects faults: outages fall within it, and no request is faulted after it (the run's
    settle window, `ChaosSettings.settle_seconds`, is for the herd to finish, not more faults)."""
    counts: Counter[str] = field(default_factory=Counter)
    outages: tuple[Outage, ...] = ()
    webhook_windows: tuple[Outage, ...] = ()
    _random: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        s = self.settings
        outages = []
        earliest = s.quiet_start_seconds
        latest = max(earliest, self.span_seconds - s.outage_seconds)
        for _ in range(s.outages):
            start = self._random.uniform(earliest, latest)
            outages.append(Outage(start=start, end=start + s.outage_seconds))
        self.outages = tuple(sorted(outages, key=lambda o: o.start))
        windows = []
        for _ in range(s.webhook_timeouts):
            start = self._random.uniform(
                earliest, max(earliest, self.span_seconds - s.webhook_timeout_seconds)
            )
            windows.append(Outage(start=start, end=start + s.webhook_timeout_seconds))
        self.webhook_windows = tuple(sorted(windows, key=lambda o: o.start))

    def webhook_delay(self, now: float, *, timeout: float) -> float:
        """How long to hold back an admission request at `now`: past `timeout` inside a window, else 0
        (counted as a `webhook` fault)."""
        if any(w.start <= now < w.end for w in self.webhook_windows):
            self.counts["webhook"] += 1
            return timeout + 1.0
        return 0.0

    def down(self, now: float) -> bool:
        """Whether the API server is down at `now`."""
        return any(o.start <= now < o.end for o in self.outages)

    def decide(self, *, method: str, watch: bool, resumed: bool, now: float) -> Fault | None:
        """The fault for one request (None: pass it through), counted by kind. `resumed`: a watch that
        names the resourceVersion to start from (only those can be told 410 Gone)."""
        fault = self._choose(method=method, watch=watch, resumed=resumed, now=now)
        if fault is not None:
            self.counts[fault.kind] += 1
        return fault

    def _choose(self, *, method: str, watch: bool, resumed: bool, now: float) -> Fault | None:
        s = self.settings
        if now < s.quiet_start_seconds or now >= self.span_seconds:
            return None
        if self.down(now):
            return Fault("outage")
        draw = self._random.random()
        if watch:
            if resumed and draw < s.gone:
                return Fault("gone", status=410)
            if self._random.random() < s.cut:
                return Fault("cut", events=self._random.randint(0, 3))
            draw = self._random.random()
        bound = s.error
        if draw < bound:
            return Fault("error", status=self._random.choice((500, 503)))
        bound += s.throttle
        if draw < bound:
            return Fault("throttle", status=429, seconds=float(self._random.randint(1, 2)))
        bound += s.reset
        if draw < bound:
            # Half the resets come after the API server did the request: a write that happened, though
            # its client saw the connection drop.
            return Fault("reset", after=method != "GET" and self._random.random() < 0.5)
        bound += s.slow
        if draw < bound and not watch:
            return Fault("slow", seconds=self._random.uniform(0.1, s.slow_seconds))
        return None
