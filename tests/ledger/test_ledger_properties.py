"""The slot ledger's invariants, checked by hypothesis over random sequences of asks, releases and time.

Covers: never more holders than the limit; grants in first-come-first-served order; re-asking while
holding is idempotent; expiry frees exactly the expired slots; idle waiters leave the queue.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lockd.ledger import Denied, Granted, Ledger
from stagger.throttles import check_concurrency

PODS = [("ns", f"pod-{i}") for i in range(8)]


class LedgerMachine(RuleBasedStateMachine):
    @initialize(limit=st.integers(min_value=1, max_value=4), hold=st.floats(min_value=1.0, max_value=50.0))
    def setup(self, limit: int, hold: float) -> None:
        self.limit = limit
        self.hold = hold
        self.now = 0.0
        self.ledger = Ledger(waiter_idle_timeout=30.0)
        # The order in which pods first asked and are still waiting: the FIFO model.
        self.arrivals: list[tuple[str, str]] = []

    def _check(self, in_use: int):
        return check_concurrency(limit=self.limit, in_use=in_use)

    @rule(pod=st.sampled_from(PODS))
    def ask(self, pod: tuple[str, str]) -> None:
        held_before = pod in self.ledger.slots
        count_before = len(self.ledger.slots)
        if not held_before and pod not in self.arrivals:
            self.arrivals.append(pod)
        outcome = self.ledger.ask(
            key=pod, uid="u", now=self.now, wall=1000.0 + self.now, hold_timeout=self.hold, check=self._check
        )
        if held_before:
            assert isinstance(outcome, Granted) and not outcome.new
            assert len(self.ledger.slots) == count_before
            return
        if isinstance(outcome, Granted):
            assert outcome.new
            # First come, first served: only the oldest waiter can be granted.
            assert self.arrivals[0] == pod
            self.arrivals.pop(0)
        else:
            assert isinstance(outcome, Denied)
            assert outcome.position == self.arrivals.index(pod) + 1
            if outcome.position > 1 or count_before >= self.limit:
                return
            raise AssertionError("the head of the queue was denied although a slot was free")

    @precondition(lambda self: bool(self.ledger.slots))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.ledger.slots)))
        assert self.ledger.release(key) is not None
        assert key not in self.ledger.slots
        assert self.ledger.release(key) is None

    @rule(dt=st.floats(min_value=0.0, max_value=20.0))
    def advance(self, dt: float) -> None:
        self.now += dt
        due = {key for key, slot in self.ledger.slots.items() if slot.expires_at <= self.now}
        kept = {key: slot for key, slot in self.ledger.slots.items() if key not in due}
        expired = self.ledger.expire(self.now)
        assert {(s.namespace, s.name) for s in expired} == due
        assert self.ledger.slots == kept
        idle = self.ledger.prune_waiters(self.now)
        for waiter in idle:
            self.arrivals.remove((waiter.namespace, waiter.name))

    @invariant()
    def never_more_holders_than_the_limit(self) -> None:
        if hasattr(self, "ledger"):
            assert len(self.ledger.slots) <= self.limit

    @invariant()
    def queue_is_the_arrival_order(self) -> None:
        if hasattr(self, "ledger"):
            assert list(self.ledger.queue) == self.arrivals
            assert not set(self.ledger.queue) & set(self.ledger.slots)


TestLedger = LedgerMachine.TestCase
TestLedger.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_a_waiter_that_keeps_long_polling_is_never_idle() -> None:
    book = Ledger(waiter_idle_timeout=1.0)
    denied = book.ask(
        key=PODS[1],
        uid="",
        now=0.0,
        wall=0.0,
        hold_timeout=10,
        check=lambda n: check_concurrency(limit=1, in_use=1),
    )
    assert isinstance(denied, Denied)
    book.queue[PODS[1]].polling = 1
    assert book.prune_waiters(100.0) == []
    book.queue[PODS[1]].polling = 0
    assert [w.name for w in book.prune_waiters(100.0)] == ["pod-1"]


def test_anonymous_slot_waits_behind_named_waiters() -> None:
    book = Ledger()
    full = lambda n: check_concurrency(limit=1, in_use=n)  # noqa: E731
    assert isinstance(book.ask(key=PODS[0], uid="", now=0, wall=0, hold_timeout=5, check=full), Granted)
    assert isinstance(book.ask(key=PODS[1], uid="", now=0, wall=0, hold_timeout=5, check=full), Denied)
    book.release(PODS[0])
    anonymous = book.take_anonymous(key=("", "anonymous-1"), now=1, wall=1, duration=5, check=full)
    assert isinstance(anonymous, Denied) and "waiting" in anonymous.reason
    assert isinstance(book.ask(key=PODS[1], uid="", now=1, wall=1, hold_timeout=5, check=full), Granted)
