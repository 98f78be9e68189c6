"""Evict mode in the group book (stagger.groupbook): an owner's replacement that was held although its
owner has a reservation (admission asked a leader that did not answer in time, `--admit-timeout`) goes
against that reservation, as admission would have let it through, instead of waiting for the
reservation to lapse with its group full (a minute with nothing started in a group of maxConcurrent 1:
`python -m sim chaos --seed 91`). `grantable` offers it and `decide` grants it (basis
`ownerReservation`); reserving it takes the owner's reservation (the place is counted once), its
eviction makes the one new reservation for its own replacement, and a refused eviction gives the place
back to the owner. Only evict-mode holds of that owner held after the evicted pod's release began go
(its replacements, even when the book got one before the eviction's answer; not the owner's other held
pods), one per reservation in the order the book got them, and only when the reservation counts in every
pair the pod counts in. Two pods of one owner evicted together make two reservations."""

from __future__ import annotations

import dataclasses

import pytest

from stagger import groupbook
from stagger.groupbook import RESERVATION_SECONDS, GroupBook, PodKey, PodRecord
from stagger.matching import Pair
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector

T0 = 1_000_000.0
PAIR: Pair = ("one-at-a-time", "")
OTHER: Pair = ("two-at-a-time", "")


def maxconcurrent(name: str, value: int, *, max_blocked: float = 600.0) -> StaggeringPolicy:
    return StaggeringPolicy(
        name=name,
        label_selector=LabelSelector(),
        pacer=MaxConcurrentPacer(value=value),
        max_blocked_duration=max_blocked,
    )


POLICIES = {policy.name: policy for policy in (maxconcurrent(PAIR[0], 1), maxconcurrent(OTHER[0], 2))}
TIMEOUTS = {name: policy.start_timeout for name, policy in POLICIES.items()}


def held(
    name: str,
    *,
    owner: str = "rs-web",
    created: float = T0,
    pairs: tuple[Pair, ...] = (PAIR,),
    **fields: object,
) -> PodRecord:
    """A pod held at admission in evict mode (the staggered label and the hold annotation)."""
    values: dict[str, object] = {"held": True, "evict_hold": True, **fields}
    return PodRecord(
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        pacer_groups=pairs,
        created=created,
        owner=owner,
        **values,  # type: ignore[arg-type]
    )


def starting(book: GroupBook, now: float, pair: Pair = PAIR) -> int:
    return book.counts(pair, now=now, start_timeouts=TIMEOUTS).starting


def grantable(book: GroupBook, now: float) -> list[PodKey]:
    return groupbook.grantable(book, policies=POLICIES, now=now)


def decide(book: GroupBook, name: str, now: float) -> groupbook.Decision:
    return groupbook.decide(book, policies=POLICIES, key=("shop", name), now=now)


def evict(book: GroupBook, name: str, now: float) -> groupbook.Claim | None:
    """What the eviction reconciler does: reserve the held pod, evict it (its place becomes its owner's)."""
    record = book.get(("shop", name))
    assert record is not None
    assert book.reserve(record.key, now=now)
    return book.evicted(record, now=now)


def evicted_for(book: GroupBook, owner: str = "rs-web") -> groupbook.Claim:
    """P, the owner's held pod, is evicted: the owner has a reservation that fills the group."""
    book.upsert(held("web-p", owner=owner, created=T0 - 30))
    assert grantable(book, T0) == [("shop", "web-p")]
    claim = evict(book, "web-p", T0)
    assert claim is not None and not claim.taken and claim.first_held == T0 - 30
    return claim


def test_a_held_replacement_goes_against_its_owner_s_reservation() -> None:
    book = GroupBook()
    claim = evicted_for(book)
    # The owner's replacement R was held (admission got no answer): the group is full with the
    # reservation, which is R's own: R must not wait for it to lapse.
    book.upsert(held("web-r", created=T0 + 1))
    assert starting(book, T0 + 1) == 1 and book.owner_claims("rs-web") == 1
    assert grantable(book, T0 + 2) == [("shop", "web-r")]
    decision = decide(book, "web-r", T0 + 2)
    assert decision.granted and decision.basis == "ownerReservation", decision
    assert "reservation" in decision.reason
    # Reserving R takes the reservation: the place is counted once.
    assert book.reserve(("shop", "web-r"), now=T0 + 2)
    assert starting(book, T0 + 2) == 1 and book.owner_claims("rs-web") == 0 and book.claims() == []
    assert book.reserved(("shop", "web-r"))
    assert grantable(book, T0 + 2) == []
    # Its eviction makes the one new reservation, for its own replacement, with the chain's first hold.
    record = book.get(("shop", "web-r"))
    assert record is not None
    again = book.evicted(record, now=T0 + 3)
    assert again is not None and again.id != claim.id and again.first_held == T0 - 30
    assert [c.id for c in book.claims()] == [again.id] and book.owner_claims("rs-web") == 1
    assert starting(book, T0 + 3) == 1
    # R's replacement is let through against it.
    decision2 = groupbook.admit(book, policies=POLICIES, pacer_groups=(PAIR,), owner="rs-web", now=T0 + 4)
    assert decision2.admit and decision2.basis == "reserved" and decision2.ticket == again.id
    assert decision2.held_since == T0 - 30
    assert starting(book, T0 + 4) == 1


def test_another_owner_s_held_pod_waits() -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(held("api-a", owner="rs-api", created=T0 - 60))  # held longer, another owner
    book.upsert(held("web-r", created=T0 + 1))
    assert grantable(book, T0 + 2) == [("shop", "web-r")]
    assert decide(book, "api-a", T0 + 2).basis == "denied"


def test_a_refused_eviction_gives_the_place_back_to_the_owner() -> None:
    book = GroupBook()
    claim = evicted_for(book)
    book.upsert(held("web-r", created=T0 + 1))
    assert book.reserve(("shop", "web-r"), now=T0 + 2)
    book.unreserve(("shop", "web-r"))  # 429, or an error: R stays held
    assert [c.id for c in book.claims()] == [claim.id] and book.owner_claims("rs-web") == 1
    assert starting(book, T0 + 2) == 1
    assert grantable(book, T0 + 3) == [("shop", "web-r")]
    # Given back with its own age: it still lapses RESERVATION_SECONDS after the first eviction.
    assert starting(book, T0 + RESERVATION_SECONDS) == 0 and book.claims() == []
    assert grantable(book, T0 + RESERVATION_SECONDS) == [("shop", "web-r")]  # room now: paced
    assert decide(book, "web-r", T0 + RESERVATION_SECONDS).basis == "paced"


def test_the_reservation_taken_lapses_with_the_pod_s() -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(held("web-r", created=T0 + 1))
    assert book.reserve(("shop", "web-r"), now=T0 + 2)
    assert starting(book, T0 + 2 + RESERVATION_SECONDS - 1) == 1
    assert starting(book, T0 + 2 + RESERVATION_SECONDS) == 0 and book.claims() == []
    assert book.owner_claims("rs-web") == 0


def test_a_reserved_pod_deleted_by_someone_else_frees_the_place() -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(held("web-r", created=T0 + 1))
    assert book.reserve(("shop", "web-r"), now=T0 + 2)
    book.remove("shop", "web-r")  # the watch: gone, not by this eviction
    assert book.claims() == [] and starting(book, T0 + 2) == 0 and book.pairs() == []


def test_one_held_pod_per_reservation_in_the_order_the_book_got_them() -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(held("web-r1", created=T0 + 1))
    book.upsert(held("web-r2", created=T0 + 1))
    assert grantable(book, T0 + 3) == [("shop", "web-r1")]
    assert decide(book, "web-r2", T0 + 3).basis == "denied"
    assert book.reserve(("shop", "web-r1"), now=T0 + 3)
    assert grantable(book, T0 + 3) == [] and decide(book, "web-r2", T0 + 3).basis == "denied"
    assert starting(book, T0 + 3) == 1


def test_the_owner_s_other_held_pods_are_not_its_replacement() -> None:
    book = GroupBook()
    book.upsert(held("web-p", created=T0 - 30))
    book.upsert(held("web-q", created=T0 - 20))  # held before web-p's release: waits for the pacer
    assert grantable(book, T0) == [("shop", "web-p")]
    claim = evict(book, "web-p", T0)
    assert claim is not None
    assert grantable(book, T0 + 1) == [] and decide(book, "web-q", T0 + 1).basis == "denied"
    assert book.reserve(("shop", "web-q"), now=T0 + 1)  # say, maxBlockedDuration: it takes nothing
    assert book.owner_claims("rs-web") == 1
    book.unreserve(("shop", "web-q"))
    # The replacement, held after the release, goes against it; web-q still waits.
    book.upsert(held("web-r", created=T0 + 1))
    assert grantable(book, T0 + 2) == [("shop", "web-r")]


def test_a_replacement_the_book_got_before_the_eviction_s_answer_goes_against_it() -> None:
    book = GroupBook()
    book.upsert(held("web-p", created=T0 - 30))
    assert book.reserve(("shop", "web-p"), now=T0)  # the eviction is sent
    # A relist brings the replacement (held, no answer) before the watch or the answer shows web-p gone.
    book.upsert(held("web-r", created=T0 + 1))
    record = book.get(("shop", "web-p"))
    assert record is not None
    claim = book.evicted(record, now=T0 + 2)
    assert claim is not None
    assert grantable(book, T0 + 2) == [("shop", "web-r")]
    assert decide(book, "web-r", T0 + 2).basis == "ownerReservation"


def test_two_evicted_in_one_round_make_two_reservations_for_two_held_replacements() -> None:
    book = GroupBook()
    book.upsert(held("web-p1", created=T0 - 30, pairs=(OTHER,)))
    book.upsert(held("web-p2", created=T0 - 20, pairs=(OTHER,)))
    assert grantable(book, T0) == [("shop", "web-p1"), ("shop", "web-p2")]
    first, second = evict(book, "web-p1", T0), evict(book, "web-p2", T0)
    assert first is not None and second is not None and book.owner_claims("rs-web") == 2
    assert starting(book, T0, OTHER) == 2
    for name in ("web-r1", "web-r2"):
        book.upsert(held(name, created=T0 + 1, pairs=(OTHER,)))
    assert grantable(book, T0 + 2) == [("shop", "web-r1"), ("shop", "web-r2")]
    for name in ("web-r1", "web-r2"):
        assert decide(book, name, T0 + 2).basis == "ownerReservation"
        assert evict(book, name, T0 + 2) is not None
        assert starting(book, T0 + 2, OTHER) == 2
    assert book.owner_claims("rs-web") == 2 and len(book.claims()) == 2


@pytest.mark.parametrize(
    ("change", "pairs"),
    [
        pytest.param({"evict_hold": False, "gated": True}, (PAIR,), id="gate-mode-hold"),
        pytest.param({}, (PAIR, OTHER), id="counts-where-the-reservation-does-not"),
        pytest.param({"owner": "rs-api"}, (PAIR,), id="another-owner"),
        pytest.param({"owner": ""}, (PAIR,), id="no-owner"),
    ],
)
def test_only_what_the_reservation_covers_goes_against_it(
    change: dict[str, object], pairs: tuple[Pair, ...]
) -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(dataclasses.replace(held("web-r", created=T0 + 1, pairs=pairs), **change))  # type: ignore[arg-type]
    assert grantable(book, T0 + 2) == []
    assert decide(book, "web-r", T0 + 2).basis == "denied"
    assert book.reserve(("shop", "web-r"), now=T0 + 2)  # say, maxBlockedDuration: it takes nothing
    assert book.owner_claims("rs-web") == 1


def test_held_past_max_blocked_still_takes_the_reservation() -> None:
    book = GroupBook()
    evicted_for(book)
    book.upsert(held("web-r", created=T0 - 700))  # its chain's first hold, long ago
    decision = decide(book, "web-r", T0 + 1)
    assert decision.basis == "ownerReservation"
    assert book.reserve(("shop", "web-r"), now=T0 + 1)
    assert starting(book, T0 + 1) == 1 and book.claims() == []
