"""Node throttles: pure objects that say whether one more pod may start on this node now.

Each throttle is a function of data (the node policy's `throttleConfig`, the number of cores, how many
slots are in use, the latest load sample) and of an injected clock, so they can be tested without a
node, an event loop or real time. lockd owns the only mutable piece, the token bucket, and calls
`NodeThrottle.commit()` when it actually grants a slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from stagger import policy

# What said no: a node throttle, or (in cluster mode) the DaemonSet gate, the group pacer, or the API
# write that records a grant.
ThrottleName = Literal["maxConcurrent", "rateLimit", "cpu", "io", "daemonSets", "group", "api"]

# How soon a caller denied by a load throttle should ask again: load is sampled about once a second,
# so asking sooner only burns requests on a node that is already busy.
LOAD_RETRY_SECONDS = 2.0
# A freed slot is handed out through the long poll; this only matters to callers that do not long-poll.
SLOT_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class LoadSample:
    """The node's load as last sampled. None means the source cannot tell (e.g. no PSI, no iowait)."""

    cpu_percent: float | None
    io_percent: float | None
    source: str


NO_LOAD = LoadSample(cpu_percent=None, io_percent=None, source="none")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # A sentence naming the throttle that said no, with its numbers; empty when allowed.
    reason: str = ""
    throttle: ThrottleName | None = None
    retry_after: float = 0.0


ALLOWED = Verdict(allowed=True)


class TokenBucket:
    """Token bucket: holds at most `burst` tokens, gains one every `fill_seconds`. Starts full."""

    def __init__(self, *, burst: int, fill_seconds: float, now: float) -> None:
        if burst < 1 or fill_seconds <= 0:
            raise ValueError(
                f"token bucket needs burst >= 1 and fill_seconds > 0 (got {burst}, {fill_seconds})"
            )
        self.burst = burst
        self.fill_seconds = fill_seconds
        self._tokens = float(burst)
        self._updated = now

    def tokens(self, now: float) -> float:
        # A clock that goes backwards (it should not, lockd uses a monotonic one) must not mint tokens.
        elapsed = max(0.0, now - self._updated)
        return min(float(self.burst), self._tokens + elapsed / self.fill_seconds)

    def seconds_until_token(self, now: float) -> float:
        return max(0.0, (1.0 - self.tokens(now)) * self.fill_seconds)

    def take(self, now: float) -> bool:
        available = self.tokens(now)
        self._updated = max(self._updated, now)
        if available < 1.0:
            self._tokens = available
            return False
        self._tokens = available - 1.0
        return True

    def give_back(self, now: float) -> None:
        """Return a token taken for a grant that did not happen (capped at `burst`)."""
        self._tokens = min(float(self.burst), self.tokens(now) + 1.0)
        self._updated = max(self._updated, now)


def concurrency_limit(config: policy.ThrottleConfig, *, cores: int) -> int | None:
    """The effective slot limit of a throttle config, or None when it sets none."""
    if config.max_concurrent is None:
        return None
    return config.max_concurrent.limit(cores=cores)


def check_concurrency(*, limit: int | None, in_use: int) -> Verdict:
    if limit is None or in_use < limit:
        return ALLOWED
    return Verdict(
        allowed=False,
        reason=f"{in_use} of {limit} slots in use (maxConcurrent)",
        throttle="maxConcurrent",
        retry_after=SLOT_RETRY_SECONDS,
    )


def check_load(
    *, kind: Literal["cpu", "io"], max_load: float | None, current: float | None, source: str
) -> Verdict:
    # No reading (e.g. IO pressure on a kernel without PSI and no iowait) cannot justify holding pods.
    if max_load is None or current is None or current < max_load:
        return ALLOWED
    return Verdict(
        allowed=False,
        reason=f"{kind} {current:.0f}% >= maxLoad {max_load:g}% ({source})",
        throttle=kind,
        retry_after=LOAD_RETRY_SECONDS,
    )


def check_rate(*, bucket: TokenBucket | None, now: float) -> Verdict:
    if bucket is None or bucket.tokens(now) >= 1.0:
        return ALLOWED
    wait = bucket.seconds_until_token(now)
    return Verdict(
        allowed=False,
        reason=(
            f"no start-up token, next in {wait:.1f}s "
            f"(rateLimit burst {bucket.burst}, one every {bucket.fill_seconds:g}s)"
        ),
        throttle="rateLimit",
        retry_after=wait,
    )


class NodeThrottle:
    """All throttles of one node policy, checked in a fixed order; the first that says no is reported.

    Concurrency comes first because it is the most common and most actionable reason; the rate limit
    before load because its wait is exact.
    """

    def __init__(
        self,
        *,
        config: policy.ThrottleConfig,
        cores: int,
        clock: Callable[[], float],
        load: Callable[[], LoadSample],
    ) -> None:
        self.config = config
        self.cores = cores
        self._clock = clock
        self._load = load
        self.limit = concurrency_limit(config, cores=cores)
        # The "slots in use" denial by count in use: the same few sentences are asked for on every ask.
        self._full: dict[int, Verdict] = {}
        rate = config.rate_limit
        self._bucket = (
            TokenBucket(burst=rate.burst, fill_seconds=rate.fill_factor, now=clock())
            if rate is not None
            else None
        )

    def check(self, *, in_use: int) -> Verdict:
        """Would one more slot be allowed now? Consumes nothing."""
        # One by one, stopping at the first no: this runs on every ask.
        limit = self.limit
        if limit is not None and in_use >= limit:
            full = self._full.get(in_use)
            if full is None:
                if len(self._full) > 64:
                    self._full.clear()
                full = self._full[in_use] = check_concurrency(limit=limit, in_use=in_use)
            return full
        if self._bucket is not None:
            verdict = check_rate(bucket=self._bucket, now=self._clock())
            if not verdict.allowed:
                return verdict
        config = self.config
        if config.cpu_max_load is None and config.io_max_load is None:
            return ALLOWED
        sample = self._load()
        verdict = check_load(
            kind="cpu", max_load=config.cpu_max_load, current=sample.cpu_percent, source=sample.source
        )
        if not verdict.allowed:
            return verdict
        return check_load(
            kind="io", max_load=config.io_max_load, current=sample.io_percent, source=sample.source
        )

    def commit(self) -> None:
        """Record that a slot was granted (takes a rate-limit token)."""
        if self._bucket is not None:
            self._bucket.take(self._clock())

    def refund(self) -> None:
        """A committed grant did not happen after all (its group said no): its rate-limit token comes back."""
        if self._bucket is not None:
            self._bucket.give_back(self._clock())

    def seconds_until_token(self) -> float | None:
        return None if self._bucket is None else self._bucket.seconds_until_token(self._clock())

    def carry_over(self, previous: NodeThrottle) -> None:
        """Keep the token bucket's level across a policy reload, so a reload is not a free burst."""
        if self._bucket is not None and previous._bucket is not None:
            now = self._clock()
            self._bucket._tokens = min(float(self._bucket.burst), previous._bucket.tokens(now))
            self._bucket._updated = now


def ceil_seconds(seconds: float) -> int:
    """Retry-After is whole seconds; never 0, which some clients read as 'hammer me'."""
    return max(1, math.ceil(seconds))
