"""The node's decision: one ordered list of checks, gates and throttles alike, where the first that says no
is the answer; and the state the throttles keep between asks (the token bucket, the grants counted since
each load reading).

A check is a small pure object made from the node policy (`from_policy`: None when the policy does not
set it) that says three things: its verdict on one more grant now (`decide`, a function of `Facts`, the
data lockd gathers at the ask), whether a waiter it holds is freed by an event lockd wakes waiters for or
by time alone (`clears_by`), and what `/status` shows of it (`reading`). `ORDER` is the list. Adding a
throttle is its check class in `ORDER`, its policy field and its test.

The gates' inputs come from I/O (the cluster view, the dependency checks): lockd reads them and passes
them in as data (`GateInputs`), so every check here is a function of data.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from stagger import policy
from stagger.throttles import (
    ALLOWED,
    SLOT_RETRY_SECONDS,
    CheckName,
    LoadReading,
    LoadSample,
    PercentThrottle,
    TokenBucket,
    Verdict,
    check_concurrency,
    check_load,
    check_load_avg,
    check_rate,
    concurrency_limit,
    per_core_load,
)

__all__ = [
    "NO_GATES",
    "ORDER",
    "ClearsBy",
    "Counted",
    "Facts",
    "GateInputs",
    "NodeCheck",
    "NodeChecks",
    "checks_for",
    "clears_by_event",
]

# Whether a denial ends with an event lockd wakes its waiters for (a slot freed, a dependency up), or only
# with time (a token, a load sample, a pod's status), when the waiter asks again after the retry hint.
ClearsBy = Literal["event", "time"]
# The load reading a check's assumed load per grant (incrementBy) is counted against: the sample (cpu,
# io and memory, read every sample) or the load average (/proc/loadavg, read every 5 s).
Reading = Literal["sample", "loadavg"]

# How soon to look again at the DaemonSet gate when nothing else wakes the waiter (pod events usually do).
DAEMONSET_RETRY_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class GateInputs:
    """What the gates read, as lockd's shell found it at the ask (`lockd.serviceparts.read_gates`)."""

    # waitForDaemonSets: each DaemonSet waited for, as namespace/name and why (`lockd.daemonsetwait.Waiting`).
    daemonsets_waiting: Sequence[str] = ()
    # dependencies: the failing ones, (name, error) each, in the policy's order; and the check interval,
    # how soon the answer can change.
    dependencies_down: Sequence[tuple[str, str]] = ()
    dependency_retry: float = 5.0
    # countAllStarting, countDaemonSets: the other pods starting on the node, the reason's text naming
    # those starting again (`lockd.pods.restarts_named`), and the keys that count them.
    others_starting: int = 0
    others_restarting: str = ""
    others_counted_by: str = "countAllStarting"


NO_GATES = GateInputs()


@dataclass(kw_only=True, slots=True)
class Facts:
    """Everything a check reads for one decision. Never changed once made (not frozen: made on every ask,
    and a frozen dataclass's construction cost more than all the checks)."""

    in_use: int  # slots held: granted, reserved and anonymous
    load: LoadSample
    tokens: float  # the rate limit's tokens now; infinite without one
    sample_grants: int  # grants counted since the sample's cpu, io and memory were read
    loadavg_grants: int  # grants counted since the load average was read
    gates: GateInputs = NO_GATES


class NodeCheck(ABC):
    """One check of the node's decision."""

    name: ClassVar[CheckName]
    clears_by: ClassVar[ClearsBy]

    @classmethod
    @abstractmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> NodeCheck | None:
        """This check as `node_policy` sets it on a node of `cores` CPUs; None when it sets none."""

    @abstractmethod
    def decide(self, facts: Facts) -> Verdict:
        """May one more pod start now?"""

    def reading(self, facts: Facts) -> LoadReading | None:
        """What `/status` shows of this check beyond the policy's numbers (load throttles: the reading)."""
        return None

    @property
    def assumes(self) -> Reading | None:
        """The reading this check assumes load per grant against until it is read anew; None: none."""
        return None


def check_daemonsets(waiting: Sequence[str]) -> Verdict:
    """waitForDaemonSets: no grant while a DaemonSet that should run on the node has no Ready pod here."""
    if not waiting:
        return ALLOWED
    shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
    return Verdict(
        allowed=False,
        reason=f"waiting for this node's DaemonSets: {shown} (waitForDaemonSets)",
        throttle="daemonSets",
        retry_after=DAEMONSET_RETRY_SECONDS,
    )


def check_dependencies(down: Sequence[tuple[str, str]], *, retry_after: float) -> Verdict:
    """dependencies: no grant while one fails; the reason names the first that fails and its error.
    `retry_after` is the check interval: the answer cannot change sooner."""
    if not down:
        return ALLOWED
    name, error = down[0]
    more = f" (and {len(down) - 1} more failing)" if len(down) > 1 else ""
    return Verdict(
        allowed=False,
        reason=f"waiting for dependency {name}: {error}{more}",
        throttle="dependency",
        retry_after=retry_after,
    )


@dataclass(frozen=True)
class DaemonSetsGate(NodeCheck):
    name = "daemonSets"
    clears_by = "time"

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> DaemonSetsGate | None:
        return cls() if node_policy.wait_for_daemonsets else None

    def decide(self, facts: Facts) -> Verdict:
        return check_daemonsets(facts.gates.daemonsets_waiting)


@dataclass(frozen=True)
class DependencyGate(NodeCheck):
    # lockd wakes the waiters when a dependency's result changes.
    name = "dependency"
    clears_by = "event"

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> DependencyGate | None:
        return cls() if node_policy.dependencies else None

    def decide(self, facts: Facts) -> Verdict:
        gates = facts.gates
        return check_dependencies(gates.dependencies_down, retry_after=gates.dependency_retry)


@dataclass(frozen=True)
class ConcurrencyCheck(NodeCheck):
    """maxConcurrent, counting with countAllStarting (countDaemonSets) the other (DaemonSet) pods starting
    on the node."""

    name = "maxConcurrent"
    clears_by = "event"
    limit: int
    # The denial by count in use, made once: a full node is told the same on every ask.
    _full: dict[int, Verdict] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> ConcurrencyCheck | None:
        limit = concurrency_limit(node_policy.throttle, cores=cores)
        return None if limit is None else cls(limit)

    def decide(self, facts: Facts) -> Verdict:
        extra = facts.gates.others_starting
        in_use = facts.in_use + extra
        if in_use < self.limit:
            return ALLOWED
        if extra:
            return Verdict(
                allowed=False,
                reason=(
                    f"{in_use} of {self.limit} slots in use: {facts.in_use} granted + {extra} other pods "
                    f"starting{facts.gates.others_restarting} (maxConcurrent, {facts.gates.others_counted_by})"
                ),
                throttle="maxConcurrent",
                retry_after=SLOT_RETRY_SECONDS,
            )
        full = self._full.get(in_use)
        if full is None:
            if len(self._full) > 64:
                self._full.clear()
            full = self._full[in_use] = check_concurrency(limit=self.limit, in_use=in_use)
        return full


@dataclass(frozen=True)
class RateLimitCheck(NodeCheck):
    name = "rateLimit"
    clears_by = "time"
    limit: policy.RateLimit

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> RateLimitCheck | None:
        rate = node_policy.throttle.rate_limit
        return None if rate is None else cls(rate)

    def decide(self, facts: Facts) -> Verdict:
        return check_rate(limit=self.limit, tokens=facts.tokens)


@dataclass(frozen=True)
class LoadAvgCheck(NodeCheck):
    name = "loadAvg"
    clears_by = "time"
    limit: policy.LoadAvg
    cores: int

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> LoadAvgCheck | None:
        load_avg = node_policy.throttle.load_avg
        return None if load_avg is None else cls(load_avg, cores)

    def decide(self, facts: Facts) -> Verdict:
        return check_load_avg(
            limit=self.limit, load1=facts.load.load1, cores=self.cores, grants=facts.loadavg_grants
        )

    def reading(self, facts: Facts) -> LoadReading:
        load1, grants = facts.load.load1, facts.loadavg_grants
        return LoadReading(
            throttle="loadAvg",
            max_load=self.limit.max_load,
            sampled=None if load1 is None else per_core_load(self.limit, load1=load1, cores=self.cores),
            grants=grants,
            assumed=grants * self.limit.increment_by,
        )

    @property
    def assumes(self) -> Reading | None:
        return "loadavg" if self.limit.increment_by > 0 else None


@dataclass(frozen=True)
class PercentCheck(NodeCheck):
    """A load throttle on a percent read at every sample: `maxLoad` and `incrementBy`."""

    name: ClassVar[PercentThrottle]
    clears_by = "time"
    max_load: float
    increment_by: float

    @abstractmethod
    def sampled(self, sample: LoadSample) -> float | None:
        """This check's number in the sample."""

    def decide(self, facts: Facts) -> Verdict:
        return check_load(
            kind=self.name,
            max_load=self.max_load,
            current=self.sampled(facts.load),
            source=facts.load.source,
            grants=facts.sample_grants,
            increment_by=self.increment_by,
        )

    def reading(self, facts: Facts) -> LoadReading:
        grants = facts.sample_grants
        return LoadReading(
            throttle=self.name,
            max_load=self.max_load,
            sampled=self.sampled(facts.load),
            grants=grants,
            assumed=grants * self.increment_by,
        )

    @property
    def assumes(self) -> Reading | None:
        return "sample" if self.increment_by > 0 else None


@dataclass(frozen=True)
class CpuCheck(PercentCheck):
    name = "cpu"

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> CpuCheck | None:
        config = node_policy.throttle
        max_load = config.cpu_max_load
        return None if max_load is None else cls(max_load, config.cpu_increment_by)

    def sampled(self, sample: LoadSample) -> float | None:
        return sample.cpu_percent


@dataclass(frozen=True)
class IoCheck(PercentCheck):
    name = "io"

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> IoCheck | None:
        config = node_policy.throttle
        max_load = config.io_max_load
        return None if max_load is None else cls(max_load, config.io_increment_by)

    def sampled(self, sample: LoadSample) -> float | None:
        return sample.io_percent


@dataclass(frozen=True)
class MemoryCheck(PercentCheck):
    """memory: no grant while the node's memory pressure (PSI "some avg10") is at or above maxLoad."""

    name = "memory"

    @classmethod
    def from_policy(cls, node_policy: policy.NodePolicy, *, cores: int) -> MemoryCheck | None:
        config = node_policy.throttle
        max_load = config.memory_max_load
        return None if max_load is None else cls(max_load, config.memory_increment_by)

    def sampled(self, sample: LoadSample) -> float | None:
        return sample.memory_percent


# The node's decision, in order. The gates first: while one holds, no throttle's number matters. Then
# concurrency, the most common and most actionable reason; the rate limit before load because its wait is
# exact; then loadAvg, cpu and io, pod-pacemaker's order; memory, stagger's own, last.
ORDER: tuple[type[NodeCheck], ...] = (
    DaemonSetsGate,
    DependencyGate,
    ConcurrencyCheck,
    RateLimitCheck,
    LoadAvgCheck,
    CpuCheck,
    IoCheck,
    MemoryCheck,
)

_CLEARS_BY: dict[str, ClearsBy] = {kind.name: kind.clears_by for kind in ORDER}


def clears_by_event(said_no: str | None) -> bool:
    """Is a waiter held by `said_no` (a `Verdict.throttle`) freed by an event lockd wakes it for? None,
    queued behind others or finishing its grant, is: the waiter is woken when it becomes the head. The
    steps completing a grant (group, api) clear by time."""
    return said_no is None or _CLEARS_BY.get(said_no) == "event"


def checks_for(node_policy: policy.NodePolicy, *, cores: int) -> tuple[NodeCheck, ...]:
    """The checks `node_policy` sets, in `ORDER`."""
    made = (kind.from_policy(node_policy, cores=cores) for kind in ORDER)
    return tuple(check for check in made if check is not None)


class GrantsSince:
    """The grants counted against one reading of a load number: a reading taken at another time starts
    the count over, as pod-pacemaker's monitor replaces `currentLoad` with each fresh sample."""

    __slots__ = ("grants", "taken_at")

    def __init__(self) -> None:
        self.taken_at: float | None = None
        self.grants = 0

    def start_over_if_new(self, taken_at: float) -> None:
        """The reading taken at `taken_at` is the current one: if it is fresh, no grant is counted yet."""
        if taken_at != self.taken_at:
            self.taken_at, self.grants = taken_at, 0

    def count(self, taken_at: float) -> None:
        """Count a grant against the reading taken at `taken_at`."""
        self.start_over_if_new(taken_at)
        self.grants += 1

    def take_back(self, taken_at: float, *, counted_at: float | None) -> None:
        """Uncount a grant counted against the reading of `counted_at`; nothing if a fresh reading has
        started the count over since (the grant is no longer in it)."""
        self.start_over_if_new(taken_at)
        if self.grants > 0 and counted_at == self.taken_at:
            self.grants -= 1


@dataclass(frozen=True)
class Counted:
    """The readings a grant was counted against (`NodeChecks.counted()`), so that its refund takes it
    back from that count only."""

    taken_at: float | None
    load1_taken_at: float | None


class NodeChecks:
    """The checks of one node policy and the throttles' state: the token bucket, and the grants counted
    since each load reading.

    A load throttle with `incrementBy` assumes each grant adds that much load until its number is read
    anew, so a burst of asks between two readings cannot all pass on one low reading. pod-pacemaker keeps
    one `currentLoad` per throttle, each refreshed by its own monitor; here cpu, io and memory come from
    one reading (every sample) and the load average from another (/proc/loadavg, which the kernel updates
    every 5 s), so each has its own count. pod-pacemaker adds a throttle's increment when that throttle
    lets the pod past, even if a later one then holds it; here all are added when the slot is granted.
    """

    def __init__(
        self,
        *,
        node_policy: policy.NodePolicy,
        cores: int,
        clock: Callable[[], float],
        load: Callable[[], LoadSample],
    ) -> None:
        self.node_policy = node_policy
        self.cores = cores
        self._clock = clock
        self._load = load
        self.checks = checks_for(node_policy, cores=cores)
        self.limit = concurrency_limit(node_policy.throttle, cores=cores)
        rate = node_policy.throttle.rate_limit
        self._bucket = (
            TokenBucket(burst=rate.burst, fill_seconds=rate.fill_seconds, now=clock())
            if rate is not None
            else None
        )
        self._sample = GrantsSince()
        self._loadavg = GrantsSince()
        self._assumes = frozenset(check.assumes for check in self.checks if check.assumes is not None)

    def facts(self, *, in_use: int, gates: GateInputs = NO_GATES) -> Facts:
        """The facts of a decision now: `in_use` and `gates` as lockd found them, the rest from here."""
        sample = self._load()
        self._sample.start_over_if_new(sample.taken_at)
        self._loadavg.start_over_if_new(sample.load1_taken_at)
        return Facts(
            in_use=in_use,
            load=sample,
            tokens=math.inf if self._bucket is None else self._bucket.tokens(self._clock()),
            sample_grants=self._sample.grants,
            loadavg_grants=self._loadavg.grants,
            gates=gates,
        )

    def decide(self, *, in_use: int, gates: GateInputs = NO_GATES) -> Verdict:
        """Would one more slot be allowed now? The first check that says no is the answer. Consumes
        nothing."""
        facts = self.facts(in_use=in_use, gates=gates)
        for check in self.checks:
            verdict = check.decide(facts)
            if not verdict.allowed:
                return verdict
        return ALLOWED

    def commit(self) -> None:
        """Record that a slot was granted: it takes a rate-limit token, and counts against the current
        load readings (each load throttle assumes its incrementBy for it until its number is read anew)."""
        if self._bucket is not None:
            self._bucket.take(self._clock())
        sample = self._load()
        self._sample.count(sample.taken_at)
        self._loadavg.count(sample.load1_taken_at)

    def counted(self) -> Counted:
        """The readings the grant committed last was counted against (read right after commit())."""
        return Counted(taken_at=self._sample.taken_at, load1_taken_at=self._loadavg.taken_at)

    def refund(self, *, counted: Counted | None = None) -> None:
        """A committed grant did not happen after all (its group said no): its rate-limit token comes back,
        and so does the load assumed for it, if the reading it was `counted` against is still the current
        one (by default: the current ones)."""
        if self._bucket is not None:
            self._bucket.give_back(self._clock())
        sample = self._load()
        sample_at = sample.taken_at if counted is None else counted.taken_at
        load1_at = sample.load1_taken_at if counted is None else counted.load1_taken_at
        self._sample.take_back(sample.taken_at, counted_at=sample_at)
        self._loadavg.take_back(sample.load1_taken_at, counted_at=load1_at)

    def resets_assumed(self, sample: LoadSample) -> bool:
        """Does this sample end load assumed for earlier grants (a fresh reading of a number that has
        increments counted against it)? Then waiters held by it may go: the sampler wakes them."""
        fresh_sample = self._sample.grants > 0 and sample.taken_at != self._sample.taken_at
        fresh_loadavg = self._loadavg.grants > 0 and sample.load1_taken_at != self._loadavg.taken_at
        return ("sample" in self._assumes and fresh_sample) or ("loadavg" in self._assumes and fresh_loadavg)

    def load_readings(self) -> list[LoadReading]:
        """Each configured load throttle as it stands now (for /status)."""
        facts = self.facts(in_use=0)
        return [reading for check in self.checks if (reading := check.reading(facts)) is not None]

    def seconds_until_token(self) -> float | None:
        return None if self._bucket is None else self._bucket.seconds_until_token(self._clock())

    def carry_over(self, previous: NodeChecks) -> None:
        """Keep the token bucket's level and the grants counted against the current load readings across
        a policy reload, so a reload is not a free burst (pod-pacemaker starts its load throttles afresh)."""
        if self._bucket is not None and previous._bucket is not None:
            self._bucket.refill_to(previous._bucket.tokens(self._clock()), now=self._clock())
        for mine, theirs in ((self._sample, previous._sample), (self._loadavg, previous._loadavg)):
            mine.taken_at, mine.grants = theirs.taken_at, theirs.grants
