"""Node throttles: pure objects that say whether one more pod may start on this node now.

Each throttle is a function of data (the node policy's `throttleConfig`, the number of cores, how many
slots are in use, the latest load sample) and of an injected clock, so they can be tested without a
node, an event loop or real time. lockd owns the only mutable pieces, the token bucket and the grants
counted since each load reading (for pod-pacemaker's `incrementBy`), and calls `NodeThrottle.commit()`
when it actually grants a slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from stagger import policy

# What said no: a node throttle, or (in cluster mode) the DaemonSet gate, the group pacer, or the API
# write that records a grant.
ThrottleName = Literal[
    "maxConcurrent", "rateLimit", "loadAvg", "cpu", "io", "daemonSets", "dependency", "group", "api"
]

# How soon a caller denied by a load throttle should ask again: load is sampled about once a second,
# so asking sooner only burns requests on a node that is already busy.
LOAD_RETRY_SECONDS = 2.0
# A freed slot is handed out through the long poll; this only matters to callers that do not long-poll.
SLOT_RETRY_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class LoadSample:
    """The node's load as last sampled. None means the source cannot tell (e.g. no PSI, no iowait)."""

    cpu_percent: float | None
    io_percent: float | None
    source: str
    # The 1-minute load average as the kernel reports it (/proc/loadavg), not divided by the cores.
    load1: float | None = None
    # When cpu/io and load1 were read (monotonic seconds). A newer time is a fresh reading, which ends the
    # load assumed for the grants made since the last one (incrementBy). Times are not compared: a sample
    # with the same numbers is no change to wake waiters for.
    taken_at: float = field(default=0.0, compare=False)
    load1_taken_at: float = field(default=0.0, compare=False)


NO_LOAD = LoadSample(cpu_percent=None, io_percent=None, source="none")

LoadThrottle = Literal["loadAvg", "cpu", "io"]


@dataclass(frozen=True, kw_only=True)
class LoadReading:
    """One configured load throttle as it stands, for /status: its number as sampled (loadAvg's per core
    when perCore; None when unknown), the grants since that number was read, and what they are assumed to
    add (grants x incrementBy)."""

    throttle: LoadThrottle
    max_load: float
    sampled: float | None
    grants: int
    assumed: float


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


def _sum(sampled: float, assumed: float) -> float:
    # Rounded as MaxConcurrent.limit is: in floats 0.1 + 3 x 0.3 is 0.9999999999999999, below a maxLoad
    # of 1, and would let one grant more through than the numbers as written allow.
    return round(sampled + assumed, 9) if assumed else sampled


def _since(grants: int) -> str:
    return f"{grants} grant{'' if grants == 1 else 's'} since"


def check_load(
    *,
    kind: Literal["cpu", "io"],
    max_load: float | None,
    current: float | None,
    source: str,
    grants: int = 0,
    increment_by: float = 0.0,
) -> Verdict:
    """pod-pacemaker's `currentLoad < maxLoad`, where currentLoad is the sample plus `incrementBy` for each
    grant since it was read. The comparison is the same strict one, kept as stagger had it; the numbers
    differ in source only: pod-pacemaker's io is the iowait share over 5 s, stagger's the PSI "some avg10"
    (the share of the last 10 s in which some task waited for IO) where the kernel has it, else the
    iowait share too; cpu is the busy share (iowait left out, as gopsutil's) over one sample interval
    rather than 5 s. An io maxLoad tuned for iowait may hold more often under PSI, which counts stalls
    a busy CPU hides; that is stagger's documented io, not changed here."""
    # No reading (e.g. IO pressure on a kernel without PSI and no iowait) cannot justify holding pods, with
    # or without grants since: pod-pacemaker reads 0 when it cannot read, and then its increments alone
    # could hold a node whose load nobody knows.
    if max_load is None or current is None:
        return ALLOWED
    assumed = grants * increment_by
    total = _sum(current, assumed)
    if total < max_load:
        return ALLOWED
    shown = (
        f"{total:.0f}% ({current:.0f}% sampled + {assumed:.0f}% assumed for {_since(grants)})"
        if assumed
        else f"{current:.0f}%"
    )
    return Verdict(
        allowed=False,
        reason=f"{kind} {shown} >= maxLoad {max_load:g}% ({source})",
        throttle=kind,
        retry_after=LOAD_RETRY_SECONDS,
    )


def per_core_load(limit: policy.LoadAvg, *, load1: float, cores: int) -> float:
    """The load average loadAvg compares: divided by the logical CPUs when perCore (pod-pacemaker divides
    by gopsutil's `cpu.Counts(true)`; lockd's cores are os.cpu_count(), or --cores)."""
    return load1 / max(cores, 1) if limit.per_core else load1


def check_load_avg(
    *, limit: policy.LoadAvg | None, load1: float | None, cores: int, grants: int = 0
) -> Verdict:
    """pod-pacemaker's loadAvg: `currentLoad < maxLoad`, where currentLoad is the 1-minute load average (per
    core when perCore) plus `incrementBy` for each grant since it was read. The increment is added after
    the division, as pod-pacemaker adds it to the divided figure: with perCore it is per core too."""
    if limit is None or load1 is None:
        return ALLOWED
    sampled = per_core_load(limit, load1=load1, cores=cores)
    assumed = grants * limit.increment_by
    total = _sum(sampled, assumed)
    if total < limit.max_load:
        return ALLOWED
    what = "load average per core" if limit.per_core else "load average"
    parts = [f"{sampled:.2f} sampled"] if assumed else []
    if limit.per_core:
        divided = f"{load1:.2f} over {max(cores, 1)} cores"
        parts = [f"{sampled:.2f} sampled: {divided}"] if assumed else [divided]
    if assumed:
        parts.append(f"{assumed:.2f} assumed for {_since(grants)}")
    detail = f" ({' + '.join(parts)})" if parts else ""
    return Verdict(
        allowed=False,
        reason=f"{what} {total:.2f}{detail} is not below loadAvg.maxLoad {limit.max_load:g}",
        throttle="loadAvg",
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


class GrantsSince:
    """The grants counted against one reading of a load number: a reading taken at another time starts
    the count over, as pod-pacemaker's monitor replaces `currentLoad` with each fresh sample."""

    __slots__ = ("grants", "taken_at")

    def __init__(self) -> None:
        self.taken_at: float | None = None
        self.grants = 0

    def at(self, taken_at: float) -> int:
        """The grants since the reading taken at `taken_at`."""
        if taken_at != self.taken_at:
            self.taken_at, self.grants = taken_at, 0
        return self.grants

    def take_back(self, taken_at: float, *, counted_at: float | None) -> None:
        """Uncount a grant counted against the reading of `counted_at`; nothing if a fresh reading has
        started the count over since (the grant is no longer in it)."""
        if self.at(taken_at) > 0 and counted_at == self.taken_at:
            self.grants -= 1


@dataclass(frozen=True)
class Counted:
    """The readings a grant was counted against (`NodeThrottle.counted()`), so that its refund takes it
    back from that count only."""

    taken_at: float | None
    load1_taken_at: float | None


class NodeThrottle:
    """All throttles of one node policy, checked in a fixed order; the first that says no is reported.

    Concurrency comes first because it is the most common and most actionable reason; the rate limit
    before load because its wait is exact; then loadAvg, cpu and io, pod-pacemaker's order.

    A load throttle with `incrementBy` assumes each grant adds that much load until its number is read
    anew, so a burst of asks between two readings cannot all pass on one low reading. pod-pacemaker keeps
    one `currentLoad` per throttle, each refreshed by its own monitor; here cpu and io come from one
    reading (every sample) and the load average from another (/proc/loadavg, which the kernel updates
    every 5 s), so each has its own count. pod-pacemaker adds a throttle's increment when that throttle
    lets the pod past, even if a later one then holds it; here all are added when the slot is granted.
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
        self._loads = (
            config.cpu_max_load is not None or config.io_max_load is not None or config.load_avg is not None
        )
        self._stat = GrantsSince()  # since cpu and io were read
        self._loadavg = GrantsSince()  # since the load average was read

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
        if not self._loads:
            return ALLOWED
        config = self.config
        sample = self._load()
        if config.load_avg is not None:
            verdict = check_load_avg(
                limit=config.load_avg,
                load1=sample.load1,
                cores=self.cores,
                grants=self._loadavg.at(sample.load1_taken_at),
            )
            if not verdict.allowed:
                return verdict
        if config.cpu_max_load is None and config.io_max_load is None:
            return ALLOWED
        grants = self._stat.at(sample.taken_at)
        # cpu, then io: both read from the same sample, each with its own maxLoad and incrementBy.
        percents: tuple[tuple[Literal["cpu", "io"], float | None, float | None, float], ...] = (
            ("cpu", config.cpu_max_load, sample.cpu_percent, config.cpu_increment_by),
            ("io", config.io_max_load, sample.io_percent, config.io_increment_by),
        )
        for kind, max_load, current, increment_by in percents:
            verdict = check_load(
                kind=kind,
                max_load=max_load,
                current=current,
                source=sample.source,
                grants=grants,
                increment_by=increment_by,
            )
            if not verdict.allowed:
                return verdict
        return ALLOWED

    def commit(self) -> None:
        """Record that a slot was granted: it takes a rate-limit token, and counts against the current
        load readings (each load throttle assumes its incrementBy for it until its number is read anew)."""
        if self._bucket is not None:
            self._bucket.take(self._clock())
        if self._loads:
            sample = self._load()
            self._stat.grants = self._stat.at(sample.taken_at) + 1
            self._loadavg.grants = self._loadavg.at(sample.load1_taken_at) + 1

    def counted(self) -> Counted:
        """The readings the grant committed last was counted against (read right after commit())."""
        return Counted(taken_at=self._stat.taken_at, load1_taken_at=self._loadavg.taken_at)

    def refund(self, *, counted: Counted | None = None) -> None:
        """A committed grant did not happen after all (its group said no): its rate-limit token comes back,
        and so does the load assumed for it, if the reading it was `counted` against is still the current
        one (by default: the current ones)."""
        if self._bucket is not None:
            self._bucket.give_back(self._clock())
        if self._loads:
            sample = self._load()
            stat_at = sample.taken_at if counted is None else counted.taken_at
            load1_at = sample.load1_taken_at if counted is None else counted.load1_taken_at
            self._stat.take_back(sample.taken_at, counted_at=stat_at)
            self._loadavg.take_back(sample.load1_taken_at, counted_at=load1_at)

    def resets_assumed(self, sample: LoadSample) -> bool:
        """Does this sample end load assumed for earlier grants (a fresh reading of a number that has
        increments counted against it)? Then waiters held by it may go: the sampler wakes them."""
        config = self.config
        stat_assumed = self._stat.grants > 0 and (config.cpu_increment_by > 0 or config.io_increment_by > 0)
        load_avg = config.load_avg
        loadavg_assumed = self._loadavg.grants > 0 and load_avg is not None and load_avg.increment_by > 0
        return (stat_assumed and sample.taken_at != self._stat.taken_at) or (
            loadavg_assumed and sample.load1_taken_at != self._loadavg.taken_at
        )

    def load_readings(self) -> list[LoadReading]:
        """Each configured load throttle as it stands now (for /status)."""
        config, sample, readings = self.config, self._load(), []
        stat = self._stat.at(sample.taken_at) if self._loads else 0
        if config.load_avg is not None:
            limit, grants = config.load_avg, self._loadavg.at(sample.load1_taken_at)
            load1 = sample.load1
            readings.append(
                LoadReading(
                    throttle="loadAvg",
                    max_load=limit.max_load,
                    sampled=None if load1 is None else per_core_load(limit, load1=load1, cores=self.cores),
                    grants=grants,
                    assumed=grants * limit.increment_by,
                )
            )
        stat_throttles: tuple[tuple[LoadThrottle, float | None, float | None, float], ...] = (
            ("cpu", config.cpu_max_load, sample.cpu_percent, config.cpu_increment_by),
            ("io", config.io_max_load, sample.io_percent, config.io_increment_by),
        )
        for kind, max_load, sampled, increment_by in stat_throttles:
            if max_load is not None:
                readings.append(
                    LoadReading(
                        throttle=kind,
                        max_load=max_load,
                        sampled=sampled,
                        grants=stat,
                        assumed=stat * increment_by,
                    )
                )
        return readings

    def seconds_until_token(self) -> float | None:
        return None if self._bucket is None else self._bucket.seconds_until_token(self._clock())

    def carry_over(self, previous: NodeThrottle) -> None:
        """Keep the token bucket's level and the grants counted against the current load readings across
        a policy reload, so a reload is not a free burst (pod-pacemaker starts its load throttles afresh)."""
        if self._bucket is not None and previous._bucket is not None:
            now = self._clock()
            self._bucket._tokens = min(float(self._bucket.burst), previous._bucket.tokens(now))
            self._bucket._updated = now
        if self._loads:
            for mine, theirs in ((self._stat, previous._stat), (self._loadavg, previous._loadavg)):
                mine.taken_at, mine.grants = theirs.taken_at, theirs.grants


def ceil_seconds(seconds: float) -> int:
    """Retry-After is whole seconds; never 0, which some clients read as 'hammer me'."""
    return max(1, math.ceil(seconds))
