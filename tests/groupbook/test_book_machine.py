"""The group book as a state machine (hypothesis): held pods arrive (some bypassed, some in two policies),
are granted through `decide` + `reserve` or through `grantable`, show their grant, turn Ready, finish, are
deleted or recreated, while the clock moves.

Checked against a brute-force model after every step: the counts of every pair (kept incrementally by the
book) equal a recount of every record; no pair is left behind empty. At every grant: a paced grant had
room in each of its pairs and was among the oldest `room` waiting pods there, so a pair's Ready + starting
never goes over its pacer's allowance because of paced grants; pods released by maxBlockedDuration (for
a policy of "never", the controller's maxWait) or bypass are the only ones that may go over, and are
counted separately. `grantable` returns exactly the
pods the model says may go, and `decide` agrees with it. After every step `GrantableIndex`, kept up to date
pair by pair (changed pairs, and those due by time alone), holds the same pods as `grantable` recomputed
over every pair, and its update names every pod that became grantable."""

from __future__ import annotations

import dataclasses
import itertools
import math

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from stagger import groupbook, pacers
from stagger.groupbook import RESERVATION_SECONDS, Counts, GrantableIndex, GroupBook, PodKey, PodRecord
from stagger.policy import ExponentialPacer, LinearPacer, MaxConcurrentPacer
from tests.groupbook.policies import staggering

Pair = tuple[str, str]


POLICIES = {
    policy.name: policy
    for policy in (
        staggering("expo", ExponentialPacer(2, 2.0, 6), max_blocked=400, start_timeout=100),
        staggering("lin", LinearPacer(step=1, max_stagger=3), max_blocked=250, start_timeout=150),
        staggering("conc", MaxConcurrentPacer(value=2), max_blocked=1000, start_timeout=300),
        staggering("never", MaxConcurrentPacer(value=1), max_blocked=math.inf, start_timeout=200),
    )
}
# The controller's maxWait: how long the "never" policy holds a pod at most.
MAX_WAIT = 500.0
START_TIMEOUTS = {name: policy.start_timeout for name, policy in POLICIES.items()}
KEYS = ("x", "y")

memberships = st.lists(
    st.tuples(st.sampled_from(sorted(POLICIES)), st.sampled_from(KEYS), st.booleans()),
    min_size=1,
    max_size=2,
    unique_by=lambda member: member[0],
)


class BookMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.book = GroupBook()
        self.index = GrantableIndex()
        self.indexed: set[PodKey] = set()
        self.now = 1_000_000.0
        self.records: dict[PodKey, PodRecord] = {}
        self.reserved_at: dict[PodKey, float] = {}
        self.names = itertools.count()
        # Grants that may go over a pacer (maxBlockedDuration, bypass), per basis: counted, not limited.
        self.overflow = {"maxBlocked": 0, "bypassed": 0}
        self.paced = 0

    # --- the model ------------------------------------------------------------------------------------

    def phase(self, record: PodRecord) -> str:
        if record.finished:
            return "done"
        if record.ready:
            return "ready"
        if record.held and record.granted_at is None:
            return "waiting"
        return "starting"

    def live_reservation(self, key: PodKey) -> bool:
        reserved_at = self.reserved_at.get(key)
        return reserved_at is not None and self.now - reserved_at < RESERVATION_SECONDS

    def model_counts(self, pair: Pair) -> Counts:
        ready = starting = held = 0
        timeout = START_TIMEOUTS[pair[0]]
        for key, record in self.records.items():
            if pair not in record.pacer_groups + record.bypassed_groups:
                continue
            phase = self.phase(record)
            if phase == "ready":
                ready += 1
            elif phase == "starting":
                began = record.created if record.granted_at is None else record.granted_at
                starting += self.now - began < timeout
            elif phase == "waiting" and self.live_reservation(key):
                starting += 1
            elif phase == "waiting" and pair in record.pacer_groups:
                held += 1
        return Counts(ready=ready, starting=starting, held=held)

    def model_queue(self, pair: Pair) -> list[PodKey]:
        """Waiting, unreserved pods of `pair`, oldest first."""
        waiting = [
            (record.created, key)
            for key, record in self.records.items()
            if pair in record.pacer_groups
            and self.phase(record) == "waiting"
            and not self.live_reservation(key)
        ]
        return [key for _, key in sorted(waiting)]

    def model_room(self, pair: Pair) -> float:
        counts = self.model_counts(pair)
        room = pacers.room(POLICIES[pair[0]].pacer, ready=counts.ready, starting=counts.starting)
        return math.inf if room is None else room

    def model_released(self, key: PodKey) -> str | None:
        record = self.records[key]
        if not record.pacer_groups:
            return "bypassed"
        bounds = [POLICIES[policy].max_blocked_duration for policy, _ in record.pacer_groups]
        smallest = min(MAX_WAIT if bound == math.inf else bound for bound in bounds)
        return "maxBlocked" if self.now - record.created >= smallest else None

    def model_paced(self, key: PodKey) -> bool:
        record = self.records[key]
        return all(self.model_queue(pair).index(key) < self.model_room(pair) for pair in record.pacer_groups)

    def waiting_keys(self) -> list[PodKey]:
        return sorted(
            key
            for key, record in self.records.items()
            if self.phase(record) == "waiting" and not self.live_reservation(key)
        )

    def counted_pairs(self) -> set[Pair]:
        pairs: set[Pair] = set()
        for key, record in self.records.items():
            phase = self.phase(record)
            if phase in ("ready", "starting"):
                pairs.update(record.pacer_groups + record.bypassed_groups)
            elif phase == "waiting":
                pairs.update(record.pacer_groups)
                if self.live_reservation(key):
                    pairs.update(record.bypassed_groups)
        return pairs

    def expire_model(self) -> None:
        for key in [key for key in self.reserved_at if not self.live_reservation(key)]:
            del self.reserved_at[key]

    def put(self, record: PodRecord) -> None:
        old = self.records.get(record.key)
        if record.key in self.reserved_at and (
            self.phase(record) != "waiting" or old is None or old.uid != record.uid
        ):
            del self.reserved_at[record.key]
        self.records[record.key] = record
        self.book.upsert(record)

    # --- grants ---------------------------------------------------------------------------------------

    def grant(self, keys: list[PodKey]) -> None:
        """Check that granting `keys` together is allowed, then reserve them."""
        before = {pair: self.model_counts(pair) for pair in self.counted_pairs()}
        rooms = {pair: self.model_room(pair) for pair in before}
        paced_per_pair: dict[Pair, int] = {}
        overflow_per_pair: dict[Pair, int] = {}
        for key in keys:
            released = self.model_released(key)
            record = self.records[key]
            if released is None:
                assert self.model_paced(key), key  # room in every pair, and among the oldest `room`
                self.paced += 1
                for pair in record.pacer_groups:
                    paced_per_pair[pair] = paced_per_pair.get(pair, 0) + 1
                # Where it is bypassed it counts without asking: over that pacer by bypass.
                for pair in record.bypassed_groups:
                    overflow_per_pair[pair] = overflow_per_pair.get(pair, 0) + 1
            else:
                self.overflow[released] += 1
                for pair in record.pacer_groups + record.bypassed_groups:
                    overflow_per_pair[pair] = overflow_per_pair.get(pair, 0) + 1
        for pair, paced in paced_per_pair.items():
            assert paced <= rooms[pair], (pair, paced, rooms[pair])
        for key in keys:
            assert self.book.reserve(key, now=self.now)
            self.reserved_at[key] = self.now
        # Ready + starting over the allowance only by what was over before and the overflow grants.
        for pair, counts in before.items():
            after = self.model_counts(pair)
            limit = pacers.allowance(POLICIES[pair[0]].pacer, ready=after.ready)
            if limit is not None:
                ceiling = max(limit, counts.ready + counts.starting) + overflow_per_pair.get(pair, 0)
                assert after.ready + after.starting <= ceiling, (pair, after, limit)

    # --- rules ----------------------------------------------------------------------------------------

    @rule(
        member=memberships,
        count=st.integers(1, 4),
        gated=st.booleans(),
        by_hand=st.booleans(),
        back=st.sampled_from([0.0, 0.0, 30.0, 300.0]),
    )
    def arrive(
        self, member: list[tuple[str, str, bool]], count: int, gated: bool, by_hand: bool, back: float
    ) -> None:
        """A burst of `count` pods of one combination (a rollout, a Job fan-out)."""
        waits = tuple((policy, key) for policy, key, bypassed in member if not bypassed)
        only_counted = tuple((policy, key) for policy, key, bypassed in member if bypassed)
        for _ in range(count):
            name = f"p{next(self.names):04}"
            self.put(
                PodRecord(
                    namespace="ns",
                    name=name,
                    uid=f"uid-{name}",
                    pacer_groups=waits,
                    bypassed_groups=only_counted,
                    # Admission holds a pod unless it is bypassed everywhere; `by_hand`: held anyway.
                    held=bool(waits) or by_hand,
                    created=self.now - back,  # a relist may bring pods created a while ago
                    gated=gated and bool(waits),
                )
            )

    @precondition(lambda self: self.waiting_keys())
    @rule(data=st.data())
    def decide_and_reserve(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.waiting_keys()))
        decision = groupbook.decide(self.book, policies=POLICIES, key=key, now=self.now, max_wait=MAX_WAIT)
        self.expire_model()
        released = self.model_released(key)
        expected = released is not None or self.model_paced(key)
        assert decision.granted == expected, (decision, released)
        assert decision.basis == ("denied" if not expected else released or "paced")
        if decision.granted:
            self.grant([key])
        else:
            assert decision.retry_after > 0

    @rule()
    def grant_batch(self) -> None:
        keys = groupbook.grantable(self.book, policies=POLICIES, now=self.now, max_wait=MAX_WAIT)
        self.expire_model()
        expected = [
            key
            for key in self.waiting_keys()
            if self.model_released(key) is not None or self.model_paced(key)
        ]
        assert sorted(keys) == expected
        assert keys == sorted(keys, key=lambda key: (self.records[key].created, key))  # oldest first
        for key in self.waiting_keys():
            assert groupbook.decide(
                self.book, policies=POLICIES, key=key, now=self.now, max_wait=MAX_WAIT
            ).granted == (key in keys)
        self.grant(keys)

    @precondition(lambda self: self.reserved_at)
    @rule(data=st.data())
    def pod_shows_grant(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.reserved_at)))
        record = self.records[key]
        self.put(dataclasses.replace(record, held=False, gated=False, granted_at=self.now))

    @precondition(lambda self: self.records)
    @rule(data=st.data(), change=st.sampled_from(["ready", "unready", "finished", "deleted", "recreated"]))
    def pod_changes(self, data: st.DataObject, change: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.records)))
        record = self.records[key]
        if change == "deleted":
            del self.records[key]
            self.reserved_at.pop(key, None)
            self.book.remove(*key)
        elif change == "recreated":
            self.put(dataclasses.replace(record, uid=record.uid + "+", created=self.now, granted_at=None))
        elif self.phase(record) != "waiting" or change == "finished":
            self.put(dataclasses.replace(record, ready=change == "ready", finished=change == "finished"))

    @rule(seconds=st.sampled_from([0.5, 1.0, 10.0, 59.0, 60.0, 100.0, 250.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.expire_model()

    def teardown(self) -> None:
        # What the run exercised (pytest --hypothesis-show-statistics).
        if hasattr(self, "book"):
            event(f"paced grants: {min(self.paced, 10)}")
            for basis, count in self.overflow.items():
                event(f"{basis} grants: {min(count, 3)}")

    # --- invariants -----------------------------------------------------------------------------------

    @invariant()
    def counts_match_a_recount(self) -> None:
        if not hasattr(self, "book"):
            return
        for pair in self.counted_pairs() | set(self.book.pairs()):
            actual = self.book.counts(pair, now=self.now, start_timeouts=START_TIMEOUTS)
            assert actual == self.model_counts(pair), pair
        assert set(self.book.pairs()) == self.counted_pairs()  # no empty pair left behind
        assert len(self.book) == len(self.records)

    @invariant()
    def index_matches_a_recompute(self) -> None:
        if not hasattr(self, "book"):
            return
        became = self.index.update(self.book, policies=POLICIES, now=self.now, max_wait=MAX_WAIT)
        full = groupbook.grantable(self.book, policies=POLICIES, now=self.now, max_wait=MAX_WAIT)
        assert self.index.keys(self.book) == full
        assert set(full) - self.indexed <= became  # every newly grantable pod is named (to wake its waits)
        self.indexed = set(full)
        due = self.index.next_due()
        assert due is None or due > self.now


BookMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestBookMachine = BookMachine.TestCase
