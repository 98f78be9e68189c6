"""The slot ledger's invariants, checked by hypothesis over random sequences of asks, reservations
(confirmed, or cancelled with the pod stepping aside for its group), releases and time.

Covers (also with the controller's wait stream waking pods that step aside, or capping their step-aside
when it fails): never more holders (granted or reserved) than the limit; grants in first-come-first-served order
among pods not stepping aside; re-asking while holding is idempotent; expiry frees exactly the expired
slots; idle waiters leave the queue; waiters leaving from any place; the queue's indexes (positions, the
head to wake) always agree with the arrival order.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from lockd.ledger import Denied, Granted, Ledger, Reserved
from stagger.throttles import Verdict, check_concurrency

PODS = [("ns", f"pod-{i}") for i in range(8)]


class LedgerMachine(RuleBasedStateMachine):
    @initialize(limit=st.integers(min_value=1, max_value=4), hold=st.floats(min_value=1.0, max_value=50.0))
    def setup(self, limit: int, hold: float) -> None:
        self.limit = limit
        self.hold = hold
        self.now = 0.0
        self.ledger = Ledger(waiter_idle_timeout=30.0)
        # The FIFO model: pods in the order they first asked, still waiting (a reserved pod keeps its place).
        self.arrivals: list[tuple[str, str]] = []
        # Pods stepping aside for their group pacer, until when.
        self.blocked: dict[tuple[str, str], float] = {}

    def _verdict(self):
        return check_concurrency(limit=self.limit, in_use=len(self.ledger.slots))

    def _eligible(self) -> list[tuple[str, str]]:
        return [
            pod
            for pod in self.arrivals
            if self.blocked.get(pod, -1.0) <= self.now and pod not in self.ledger.slots
        ]

    @rule(pod=st.sampled_from(PODS), reserve=st.booleans())
    def ask(self, pod: tuple[str, str], reserve: bool) -> None:
        held = self.ledger.slots.get(pod)
        count_before = len(self.ledger.slots)
        if held is None and pod not in self.arrivals:
            self.arrivals.append(pod)
        eligible_before = self._eligible()
        outcome = self.ledger.ask(
            key=pod,
            uid="u",
            now=self.now,
            wall=1000.0 + self.now,
            hold_timeout=self.hold,
            verdict=self._verdict(),
            reserve=reserve,
        )
        assert len(self.ledger.slots) >= count_before
        if held is not None and not held.pending:
            # Re-asking while holding is idempotent.
            assert isinstance(outcome, Granted) and not outcome.new
            assert len(self.ledger.slots) == count_before
            return
        if held is not None:
            assert isinstance(outcome, Denied)
            return
        if isinstance(outcome, Granted | Reserved):
            # First come, first served among the pods not stepping aside.
            assert eligible_before[0] == pod
            if isinstance(outcome, Granted):
                assert outcome.new
                self.arrivals.remove(pod)
            return
        assert isinstance(outcome, Denied)
        assert outcome.position == self.arrivals.index(pod) + 1
        if eligible_before and eligible_before[0] == pod and count_before < self.limit:
            raise AssertionError("the first eligible waiter was denied although a slot was free")

    @precondition(lambda self: any(s.pending for s in self.ledger.slots.values()))
    @rule(data=st.data(), confirm=st.booleans(), aside=st.floats(min_value=0.1, max_value=30.0))
    def finish_reservation(self, data: st.DataObject, confirm: bool, aside: float) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, s in self.ledger.slots.items() if s.pending)))
        if confirm:
            slot = self.ledger.confirm(key, now=self.now, wall=1000.0 + self.now)
            assert slot is not None and not slot.pending
            self.arrivals.remove(key)
        else:
            self.ledger.cancel(
                key, now=self.now, blocked_until=self.now + aside, reason="group", throttle="group"
            )
            assert key not in self.ledger.slots
            self.blocked[key] = self.now + aside

    @precondition(lambda self: bool(self.arrivals))
    @rule(data=st.data())
    def controller_wakes(self, data: st.DataObject) -> None:
        """The controller's wait stream says these pods' groups have room: their step-aside ends now."""
        keys = data.draw(st.lists(st.sampled_from(self.arrivals), max_size=3, unique=True))
        aside = {key for key, until in self.blocked.items() if until > self.now}
        woken = self.ledger.wake(keys, now=self.now)
        # Exactly the named pods that were stepping aside (for their group) are woken.
        assert set(woken) == aside & set(keys)
        for key in woken:
            self.blocked[key] = self.now
        assert set(self.ledger.group_aside(self.now)) == {k for k, u in self.blocked.items() if u > self.now}

    @rule(within=st.floats(min_value=0.0, max_value=10.0))
    def stream_down(self, within: float) -> None:
        """The stream fails: every pod stepping aside asks again within `within` at the latest."""
        until = self.now + within
        self.ledger.cap_group_aside(until)
        for key, blocked in self.blocked.items():
            if blocked > until:
                self.blocked[key] = until

    @precondition(lambda self: any(not s.pending for s in self.ledger.slots.values()))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, s in self.ledger.slots.items() if not s.pending)))
        assert self.ledger.release(key) is not None
        assert key not in self.ledger.slots
        assert self.ledger.release(key) is None

    @rule(dt=st.floats(min_value=0.0, max_value=20.0))
    def advance(self, dt: float) -> None:
        self.now += dt
        due = {
            key for key, slot in self.ledger.slots.items() if slot.expires_at <= self.now and not slot.pending
        }
        kept = {key: slot for key, slot in self.ledger.slots.items() if key not in due}
        expired = self.ledger.expire(self.now)
        # Expiry frees exactly the expired slots.
        assert {(s.namespace, s.name) for s in expired} == due
        assert self.ledger.slots == kept
        idle = self.ledger.prune_waiters(self.now)
        for waiter in idle:
            self.arrivals.remove((waiter.namespace, waiter.name))

    @precondition(lambda self: bool(self.arrivals))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A waiter hangs up or asks to leave (DELETE): it leaves the queue, whatever its place."""
        key = data.draw(st.sampled_from(self.arrivals))
        if key in self.ledger.slots:
            return  # finishing its grant: the service never removes such a waiter
        assert self.ledger.leave_queue(key) is not None
        self.arrivals.remove(key)
        # Asking again later is a new wait: no place kept, no stepping aside carried over.
        self.blocked.pop(key, None)
        assert self.ledger.position(key) is None

    @invariant()
    def the_head_is_the_oldest_eligible_waiter(self) -> None:
        if hasattr(self, "ledger"):
            eligible = self._eligible()
            assert self.ledger.heads(self.now) == eligible[:1]
            for index, pod in enumerate(self.arrivals, start=1):
                assert self.ledger.position(pod) == index

    @invariant()
    def never_more_holders_than_the_limit(self) -> None:
        if hasattr(self, "ledger"):
            assert len(self.ledger.slots) <= self.limit

    @invariant()
    def queue_is_the_arrival_order(self) -> None:
        if hasattr(self, "ledger"):
            assert list(self.ledger.queue) == self.arrivals
            granted = {k for k, s in self.ledger.slots.items() if not s.pending}
            assert not set(self.ledger.queue) & granted


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
        verdict=check_concurrency(limit=1, in_use=1),
    )
    assert isinstance(denied, Denied)
    waiter = book.start_polling(PODS[1])
    assert waiter is not None
    assert book.prune_waiters(100.0) == []
    book.stop_polling(waiter, 50.0)
    assert book.prune_waiters(50.5) == []
    assert [w.name for w in book.prune_waiters(100.0)] == ["pod-1"]


def test_anonymous_slot_waits_behind_named_waiters() -> None:
    book = Ledger()

    def full() -> Verdict:
        return check_concurrency(limit=1, in_use=len(book.slots))

    assert isinstance(book.ask(key=PODS[0], uid="", now=0, wall=0, hold_timeout=5, verdict=full()), Granted)
    assert isinstance(book.ask(key=PODS[1], uid="", now=0, wall=0, hold_timeout=5, verdict=full()), Denied)
    book.release(PODS[0])
    anonymous = book.take_anonymous(key=("", "anonymous-1"), now=1, wall=1, duration=5, verdict=full())
    assert isinstance(anonymous, Denied) and "waiting" in anonymous.reason
    assert isinstance(book.ask(key=PODS[1], uid="", now=1, wall=1, hold_timeout=5, verdict=full()), Granted)
