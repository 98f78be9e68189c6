"""Node throttles' arithmetic: pure functions that say whether one more pod may start on this node now.

Each is a function of data (the node policy's `throttleConfig`, the number of cores, how many slots are
in use, the latest load sample, the token bucket's level, the grants counted since a load reading) and of
`now`, so they can be tested without a node, an event loop or real time. The checks that ask them, in
their order, and the state they read are `stagger.nodechecks`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from stagger import policy

# The node's throttles: the node policy's `throttleConfig`.
ThrottleName = Literal["maxConcurrent", "rateLimit", "loadAvg", "cpu", "io", "memory"]
# The node's gates: what the node policy waits for besides its throttles.
GateName = Literal["daemonSets", "dependency"]
# What a node check is called in its verdicts (`stagger.nodechecks`).
CheckName = Literal[ThrottleName, GateName]
# The steps that complete a grant the checks allowed, in cluster mode (lockd's Finisher): the group pacer,
# and the API write that records the grant on the pod.
CompletionName = Literal["group", "api"]

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
    # Memory pressure (PSI /proc/pressure/memory "some avg10"), read with cpu and io; None without PSI.
    memory_percent: float | None = None


NO_LOAD = LoadSample(cpu_percent=None, io_percent=None, source="none")

LoadThrottle = Literal["loadAvg", "cpu", "io", "memory"]
# The load throttles read from one sample at a time (`LoadSample.taken_at`), in their order.
PercentThrottle = Literal["cpu", "io", "memory"]


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
    # A sentence naming the check that said no, with its numbers; empty when allowed.
    reason: str = ""
    # What said no: a node check, or a step completing the grant.
    throttle: CheckName | CompletionName | None = None
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

    def refill_to(self, tokens: float, *, now: float) -> None:
        """Hold `tokens` (at most `burst`) as of `now`: a policy reload keeps the previous bucket's level."""
        self._tokens = min(float(self.burst), tokens)
        self._updated = now

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
    kind: PercentThrottle,
    max_load: float | None,
    current: float | None,
    source: str,
    grants: int = 0,
    increment_by: float = 0.0,
) -> Verdict:
    """pod-pacemaker's `currentLoad < maxLoad`, where currentLoad is the sample plus `incrementBy` for each
    grant since it was read, compared as strictly. The numbers differ from pod-pacemaker's in source only:
    its io is the iowait share over 5 s, stagger's the PSI "some avg10" (the share of the last 10 s in
    which some task waited for IO) where the kernel has it, else the iowait share too; cpu is the busy
    share (iowait left out, as gopsutil's) over one sample interval rather than 5 s. An io maxLoad tuned
    for iowait may hold more often under PSI, which counts stalls a busy CPU hides. memory (stagger's own)
    is the PSI memory "some avg10": the share of the last 10 s in which some task waited for memory
    (reclaim, swap-in, refaults), the kernel's own measure of a node short of memory."""
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


def check_rate(*, limit: policy.RateLimit | None, tokens: float) -> Verdict:
    """The token bucket of `limit` holding `tokens` now: no grant without a whole one."""
    if limit is None or tokens >= 1.0:
        return ALLOWED
    wait = max(0.0, (1.0 - tokens) * limit.fill_seconds)
    return Verdict(
        allowed=False,
        reason=(
            f"no start-up token, next in {wait:.1f}s "
            f"(rateLimit burst {limit.burst}, one every {limit.fill_seconds:g}s)"
        ),
        throttle="rateLimit",
        retry_after=wait,
    )


def ceil_seconds(seconds: float) -> int:
    """Retry-After is whole seconds; never 0, which some clients read as 'hammer me'."""
    return max(1, math.ceil(seconds))
