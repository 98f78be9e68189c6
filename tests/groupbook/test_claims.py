"""Evict mode in the group book (stagger.groupbook): `admit` at admission (room and an empty queue let a
new pod through and claim its place; held pods go first; an owner's reservation lets its replacement
through whatever the pacers say, carrying the chain's first hold), `evicted` (the pod leaves the book, its
place becomes its owner's reservation), claims ended by the pod with the ticket or after 60 s, records
read from pods (owner, hold annotation, held-since); and a hypothesis state machine of a herd of
ReplicaSet pods admitted, held, evicted (or the eviction refused), replaced (or the replacement held:
admission got no answer from the leader) and turning Ready, checked against a model: a pair's Ready +
starting never exceeds the pacer's allowance through paced admissions or evictions, a replacement is
never held by the leader, a held replacement goes against its owner's reservation at the next
reconcile, an owner never has more reservations than pods of it evicted and not replaced, and every
claim ends."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from stagger import groupbook, pacers
from stagger.groupbook import RESERVATION_SECONDS, GroupBook, PodRecord
from stagger.names import Names
from stagger.policy import ExponentialPacer, MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector
from stagger.timestamps import format_rfc3339

T0 = 1_000_000.0
PAIR = ("image-pull", "nginx")
SEED = StaggeringPolicy(
    name="image-pull",
    label_selector=LabelSelector(),
    pacer=ExponentialPacer(min_initial=2, multiplier=2.0, max_stagger=8),
    max_blocked_duration=600.0,
)
POLICIES = {SEED.name: SEED}
TIMEOUTS = {SEED.name: SEED.start_timeout}


def record(
    name: str, *, owner: str = "rs-1", held: bool = False, created: float = T0, **fields: object
) -> PodRecord:
    return PodRecord(
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        pacer_groups=(PAIR,),
        held=held,
        evict_hold=held,
        created=created,
        owner=owner,
        **fields,  # type: ignore[arg-type]
    )


def admit(
    book: GroupBook, *, owner: str = "rs-1", now: float = T0, dry_run: bool = False
) -> groupbook.AdmitDecision:
    return groupbook.admit(
        book, policies=POLICIES, pacer_groups=(PAIR,), owner=owner, now=now, dry_run=dry_run
    )


def starting(book: GroupBook, now: float = T0) -> int:
    return book.counts(PAIR, now=now, start_timeouts=TIMEOUTS).starting


def test_room_lets_new_pods_through_and_claims_their_places() -> None:
    book = GroupBook()
    first, second, third = admit(book), admit(book), admit(book)
    assert first.admit and second.admit and first.basis == "paced" and first.ticket != second.ticket
    assert not third.admit and third.basis == "denied" and "2 of 2 started" in third.reason
    assert starting(book) == 2 and len(book.claims()) == 2
    # The pod shows with its ticket: it counts for itself, the claim ends.
    assert first.ticket is not None
    book.upsert(record("a", ticket=first.ticket))
    assert starting(book) == 2 and len(book.claims()) == 1


def test_dry_run_changes_nothing() -> None:
    book = GroupBook()
    assert admit(book, dry_run=True).admit and admit(book, dry_run=True).ticket is None
    assert book.claims() == [] and starting(book) == 0


def test_held_pods_go_first() -> None:
    book = GroupBook()
    book.upsert(record("old", held=True, created=T0 - 10))
    decision = admit(book)
    assert not decision.admit and "1 pod held longer go first" in decision.reason


def test_an_evicted_pod_s_place_is_its_owner_s() -> None:
    book = GroupBook()
    for name in "ab":
        book.upsert(record(name, ready=True))
    book.upsert(record("c", held=True, created=T0 - 30))
    assert groupbook.grantable(book, policies=POLICIES, now=T0) == [("shop", "c")]
    assert book.reserve(("shop", "c"), now=T0)
    evicted = book.get(("shop", "c"))
    assert evicted is not None
    claim = book.evicted(evicted, now=T0 + 1)
    assert claim is not None and claim.owner == "rs-1" and not claim.taken and claim.first_held == T0 - 30
    assert ("shop", "c") not in book and starting(book, T0 + 1) == 1
    # Another owner's new pod may not take it; the owner's replacement goes through, whatever the pacer.
    assert admit(book, owner="rs-2", now=T0 + 2).admit  # allowance 4 with 2 Ready: room for one more
    assert not admit(book, owner="rs-3", now=T0 + 2).admit
    replacement = admit(book, owner="rs-1", now=T0 + 3)
    assert replacement.admit and replacement.basis == "reserved" and replacement.ticket == claim.id
    assert replacement.held_since == T0 - 30
    assert book.owner_claims("rs-1") == 0 and starting(book, T0 + 3) == 2  # taken: still counted
    book.upsert(record("c2", ticket=claim.id, created=T0 + 3, granted_at=T0 + 3))
    assert starting(book, T0 + 3) == 2 and [c.owner for c in book.claims()] == [""]


def test_a_claim_not_used_in_time_frees_its_place() -> None:
    book = GroupBook()
    book.upsert(record("c", held=True))
    book.evicted(record("c", held=True), now=T0)
    assert starting(book, T0 + RESERVATION_SECONDS - 1) == 1
    assert starting(book, T0 + RESERVATION_SECONDS) == 0
    assert book.claims() == [] and book.pairs() == []
    # The owner's late replacement is a new pod now: admitted by the pacer's room.
    assert admit(book, now=T0 + RESERVATION_SECONDS).basis == "paced"


def test_a_bare_pod_evicted_frees_its_place() -> None:
    book = GroupBook()
    book.upsert(record("c", held=True, owner=""))
    assert book.evicted(record("c", held=True, owner=""), now=T0) is None
    assert book.pairs() == []
    # The watch removed the pod before the eviction's answer: the owner still gets its place.
    claim = book.evicted(record("gone", held=True), now=T0)
    assert claim is not None and starting(book) == 1


NAMES = Names()
P = NAMES.prefix


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            {
                "labels": {f"{P}/staggered": "1"},
                "annotations": {f"{P}/hold": "stub", f"{P}/held-since": format_rfc3339(T0 - 50)},
            },
            {"held": True, "evict_hold": True, "created": T0 - 50},
            id="held-carries-its-chain",
        ),
        pytest.param(
            {"labels": {f"{P}/staggered": "1"}, "annotations": {f"{P}/held-since": format_rfc3339(T0 + 50)}},
            # creationTimestamp has whole seconds: held-since is trusted up to the end of that second.
            {"held": True, "evict_hold": False, "created": T0 + 1},
            id="later-held-since-capped",
        ),
        pytest.param(
            {"annotations": {f"{P}/ticket": "t1", f"{P}/held-since": format_rfc3339(T0 - 50)}},
            {"held": False, "ticket": "t1", "created": T0},
            id="admitted-replacement",
        ),
    ],
)
def test_records_read_from_pods(extra: dict[str, dict[str, str]], expected: dict[str, object]) -> None:
    pod = {
        "metadata": {
            "namespace": "shop",
            "name": "web-1",
            "uid": "u1",
            "creationTimestamp": format_rfc3339(T0, digits=0),
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "web", "uid": "not-controller"},
                {"kind": "ReplicaSet", "name": "web", "uid": "rs-9", "controller": True},
            ],
            "labels": extra.get("labels", {}),
            "annotations": {f"{P}/group-key": '{"image-pull":"nginx"}', **extra.get("annotations", {})},
        },
    }
    got = groupbook.record_from_pod(pod, names=NAMES)
    assert got is not None and got.owner == "rs-9"
    for field, value in expected.items():
        assert getattr(got, field) == value, field


# --- the herd as a state machine -------------------------------------------------------------------------------


class EvictHerd(RuleBasedStateMachine):
    """Owners (ReplicaSets) create pods; admission lets them through or holds them; the reconciler evicts
    what `grantable` allows; an evicted pod's owner creates a replacement; pods turn Ready; time passes."""

    @initialize(pacer=st.sampled_from([ExponentialPacer(2, 2.0, 8), MaxConcurrentPacer(value=3)]))
    def start(self, pacer: ExponentialPacer | MaxConcurrentPacer) -> None:
        self.policy = StaggeringPolicy(
            name="image-pull", label_selector=LabelSelector(), pacer=pacer, max_blocked_duration=1e9
        )
        self.policies = {self.policy.name: self.policy}
        self.book = GroupBook()
        self.now = T0
        self.names = itertools.count()
        self.pending_replacements: list[str] = []  # owners whose pod was evicted, replacement not created yet
        self.held_replacements: set[str] = set()  # replacements held for want of an answer, not evicted yet
        self.admitted_over = 0  # admissions let through by an owner's reservation while over the pacer

    def counts(self) -> groupbook.Counts:
        return self.book.counts(
            PAIR, now=self.now, start_timeouts={self.policy.name: self.policy.start_timeout}
        )

    def create(self, owner: str) -> None:
        before = self.counts()
        reserved = self.book.owner_claims(owner) > 0
        decision = groupbook.admit(
            self.book, policies=self.policies, pacer_groups=(PAIR,), owner=owner, now=self.now
        )
        name = f"p{next(self.names)}"
        if reserved:
            assert decision.admit and decision.basis == "reserved"  # a replacement is never held again
        if decision.admit:
            if decision.basis == "paced":
                room = pacers.room(self.policy.pacer, ready=before.ready, starting=before.starting)
                assert room is None or room >= 1
                assert before.held == 0
            self.book.upsert(
                record(name, owner=owner, ticket=decision.ticket, created=self.now, granted_at=self.now)
            )
        else:
            self.book.upsert(record(name, owner=owner, held=True, created=self.now))

    @rule(owner=st.sampled_from(["rs-1", "rs-2", "rs-3"]))
    def new_pod(self, owner: str) -> None:
        self.create(owner)

    @rule()
    def reconcile(self) -> None:
        for key in groupbook.grantable(self.book, policies=self.policies, now=self.now):
            got = self.book.get(key)
            assert got is not None and got.evict_hold
            before = self.counts()
            assert self.book.reserve(key, now=self.now)
            claim = self.book.evicted(got, now=self.now)
            assert claim is not None and claim.owner == got.owner
            if got.name in self.held_replacements:
                # It went against its owner's reservation (if one was left): counted once, not twice.
                self.held_replacements.discard(got.name)
                assert self.counts().starting <= before.starting + 1
            self.pending_replacements.append(got.owner)
        # No held replacement is left waiting while its owner's reservation fills the group.
        assert self.book.owner_releases() == []

    @rule(data=st.data())
    def refused(self, data: st.DataObject) -> None:
        """The Eviction API refuses (429): the reservation is taken back, the place is as it was."""
        keys = groupbook.grantable(self.book, policies=self.policies, now=self.now)
        if not keys:
            return
        key = data.draw(st.sampled_from(keys))
        before, claims = self.counts(), sorted(c.id for c in self.book.claims())
        assert self.book.reserve(key, now=self.now)
        self.book.unreserve(key)
        assert self.counts() == before and sorted(c.id for c in self.book.claims()) == claims

    @precondition(lambda self: self.pending_replacements)
    @rule(data=st.data())
    def held_replacement(self, data: st.DataObject) -> None:
        """A replacement's admission went to a replica that does not lead, and the leader did not answer
        in time: held, with its own hold time."""
        owner = self.pending_replacements.pop(data.draw(st.integers(0, len(self.pending_replacements) - 1)))
        name = f"p{next(self.names)}"
        self.book.upsert(record(name, owner=owner, held=True, created=self.now))
        self.held_replacements.add(name)

    @precondition(lambda self: self.pending_replacements)
    @rule(data=st.data())
    def replacement(self, data: st.DataObject) -> None:
        owner = self.pending_replacements.pop(data.draw(st.integers(0, len(self.pending_replacements) - 1)))
        self.create(owner)

    @rule(data=st.data())
    def ready(self, data: st.DataObject) -> None:
        starting = [
            k
            for k in self.book._records
            if not self.book._records[k].held and not self.book._records[k].ready
        ]
        if starting:
            key = data.draw(st.sampled_from(sorted(starting)))
            old = self.book._records[key]
            self.book.upsert(dataclasses.replace(old, ready=True))

    @rule(seconds=st.sampled_from([1.0, 10.0, 61.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        if seconds > RESERVATION_SECONDS:
            self.pending_replacements.clear()  # too late: those owners' places lapsed

    @invariant()
    def within_the_allowance(self) -> None:
        if not hasattr(self, "book"):
            return
        counts = self.counts()
        limit = pacers.allowance(self.policy.pacer, ready=counts.ready)
        assert limit is None or counts.ready + counts.starting <= limit, (counts, limit)

    @invariant()
    def one_reservation_per_place(self) -> None:
        """An owner's reservations are for its pods evicted and not replaced: the replacements still to
        come, and the ones held for want of an answer (which take them)."""
        if not hasattr(self, "book"):
            return
        self.book.expire(self.now)
        pending = Counter(self.pending_replacements)
        held = Counter(
            got.owner
            for name in self.held_replacements
            if (got := self.book.get(("shop", name))) is not None and got.waiting
        )
        for owner in ("rs-1", "rs-2", "rs-3"):
            assert self.book.owner_claims(owner) <= pending[owner] + held[owner], owner

    @invariant()
    def claims_are_counted(self) -> None:
        if not hasattr(self, "book"):
            return
        self.book.expire(self.now)
        live = [c for c in self.book.claims() if self.now - c.since < RESERVATION_SECONDS]
        assert len(live) == len(self.book.claims())


EvictHerd.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestEvictHerd = EvictHerd.TestCase
