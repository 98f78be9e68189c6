"""Evict mode's admission claims are provisional (stagger.groupbook): admission takes no credentials, so the
review that made a claim may name a pod that is never created. A claim admission took lapses at its
confirm deadline (`confirm_within` after it was made) unless the pod carrying its ticket shows in the book
first; a lapse is counted (`claims_lapsed`) and the place is the group's again at once; an owner's
reservation taken by a review whose pod never shows is the owner's again (until its own minute is up), so
the real replacement still goes against it. A pod that shows in time confirms its claim: it counts for
itself and nothing lapses. 100 made-up reviews a second for a minute keep at most a confirm window's worth
of claims alive, and none past its deadline (hypothesis: no claim outlives its confirm deadline unless
confirmed, and every lapse is counted once)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagger import groupbook
from stagger.groupbook import CLAIM_CONFIRM_SECONDS, RESERVATION_SECONDS, GroupBook, PodRecord
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector

T0 = 1_000_000.0
PAIR = ("one", "")
CONFIRM = 2.0


def policy(limit: int) -> dict[str, StaggeringPolicy]:
    one = StaggeringPolicy(
        name="one",
        label_selector=LabelSelector(),
        pacer=MaxConcurrentPacer(value=limit),
        max_blocked_duration=600.0,
        mode="evict",
    )
    return {one.name: one}


ONE = policy(1)


def admit(
    book: GroupBook, *, now: float, owner: str = "", policies: dict[str, StaggeringPolicy] = ONE
) -> groupbook.AdmitDecision:
    return groupbook.admit(
        book, policies=policies, pacer_groups=(PAIR,), owner=owner, now=now, confirm_within=CONFIRM
    )


def shows(name: str, *, ticket: str | None, now: float, owner: str = "") -> PodRecord:
    """The pod as the watch brings it: let through at admission, starting (never held)."""
    return PodRecord(
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        pacer_groups=(PAIR,),
        created=now,
        owner=owner,
        ticket=ticket,
    )


def starting(book: GroupBook, now: float) -> int:
    return book.counts(PAIR, now=now, start_timeouts={"one": 300.0}).starting


def test_the_default_confirm_timeout_is_a_few_seconds() -> None:
    assert 1.0 <= CLAIM_CONFIRM_SECONDS <= 10.0 < RESERVATION_SECONDS


@pytest.mark.parametrize(
    ("pod_after", "lapsed"),
    [
        pytest.param(None, True, id="never-created"),
        pytest.param(0.3, False, id="shows-at-once"),
        pytest.param(CONFIRM - 0.01, False, id="shows-just-in-time"),
        pytest.param(CONFIRM, True, id="shows-at-the-deadline-too-late"),
    ],
)
def test_an_admission_claim_lapses_unless_its_pod_shows_in_time(
    pod_after: float | None, lapsed: bool
) -> None:
    book = GroupBook()
    decision = admit(book, now=T0)
    assert decision.admit and decision.ticket is not None
    assert not admit(book, now=T0 + 0.1).admit  # the claim fills the group's one place
    if pod_after is not None:
        book.expire(T0 + pod_after)  # time passes first, as it does before the watch event
        book.upsert(shows("web-1", ticket=decision.ticket, now=T0))
    book.expire(T0 + CONFIRM + 0.01)
    assert book.claims() == []
    assert book.claims_lapsed == (1 if lapsed else 0)
    # The place: the pod's own when it showed (even late: it counts for itself), the group's when not.
    assert starting(book, T0 + CONFIRM + 0.01) == (0 if pod_after is None else 1)
    assert admit(book, now=T0 + CONFIRM + 0.02).admit == (pod_after is None)


def test_a_lapse_frees_the_place_for_a_held_pod() -> None:
    book = GroupBook()
    forged = admit(book, now=T0)
    assert forged.ticket is not None
    book.upsert(
        PodRecord(
            namespace="shop",
            name="real",
            uid="uid-real",
            pacer_groups=(PAIR,),
            held=True,
            evict_hold=True,
            created=T0 + 0.5,
            owner="rs-1",
        )
    )
    assert groupbook.grantable(book, policies=ONE, now=T0 + 1) == []
    assert groupbook.grantable(book, policies=ONE, now=T0 + CONFIRM) == [("shop", "real")]
    assert book.claims_lapsed == 1


def test_an_owner_s_reservation_taken_by_a_review_whose_pod_never_shows_is_the_owner_s_again() -> None:
    book = GroupBook()
    reservation = book.evicted(
        PodRecord(
            namespace="shop", name="old", uid="u-old", pacer_groups=(PAIR,), created=T0 - 30, owner="rs-1"
        ),
        now=T0,
    )
    assert reservation is not None
    forged = admit(book, now=T0 + 1, owner="rs-1")
    assert forged.basis == "reserved" and forged.ticket == reservation.id and book.owner_claims("rs-1") == 0
    book.expire(T0 + 1 + CONFIRM)
    assert (
        book.claims_lapsed == 1 and book.owner_claims("rs-1") == 1 and starting(book, T0 + 1 + CONFIRM) == 1
    )
    # The real replacement goes against it, carrying the chain's first hold; its pod confirms it.
    real = admit(book, now=T0 + 10, owner="rs-1")
    assert real.basis == "reserved" and real.ticket == reservation.id and real.held_since == T0 - 30
    book.upsert(shows("new", ticket=real.ticket, now=T0 + 10, owner="rs-1"))
    book.expire(T0 + 30)
    assert book.claims() == [] and book.claims_lapsed == 1 and starting(book, T0 + 30) == 1


def test_a_reservation_given_back_after_its_minute_is_gone() -> None:
    book = GroupBook()
    reservation = book.evicted(
        PodRecord(namespace="shop", name="old", uid="u-old", pacer_groups=(PAIR,), created=T0, owner="rs-1"),
        now=T0,
    )
    assert reservation is not None
    late = T0 + RESERVATION_SECONDS - 1
    assert admit(book, now=late, owner="rs-1").basis == "reserved"
    book.expire(late + CONFIRM)
    assert book.claims() == [] and book.owner_claims("rs-1") == 0 and book.pairs() == []


def test_a_flood_of_made_up_reviews_keeps_a_confirm_window_of_claims_at_most() -> None:
    """100 reviews a second for a minute, none followed by a pod: with room for all of them, at most the
    last CONFIRM seconds' worth are counted at any time; with room for one, one."""
    for limit, most in ((100_000, int(100 * CONFIRM) + 1), (1, 1)):
        book = GroupBook()
        policies = policy(limit)
        admitted = 0
        for tick in range(6000):
            now = T0 + tick / 100
            admitted += admit(book, now=now, policies=policies).admit
            assert len(book.claims()) <= most
            assert starting(book, now) <= most
        book.expire(T0 + 60 + CONFIRM)
        assert book.claims() == [] and book.pairs() == [] and book.claims_lapsed == admitted


# --- the invariant ---------------------------------------------------------------------------------------------

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.sampled_from(["", "rs-1"])),
        st.tuples(st.just("confirm"), st.integers(0, 20)),
        st.tuples(st.just("evict"), st.just("rs-1")),
        st.tuples(st.just("tick"), st.sampled_from([0.1, 0.5, 1.0, CONFIRM, 30.0])),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps=STEPS, limit=st.sampled_from([1, 3, 1000]))
def test_no_claim_outlives_its_confirm_deadline_unless_confirmed(
    steps: list[tuple[str, object]], limit: int
) -> None:
    """Admissions (new pods, or an owner's replacements), pods showing with a ticket admission gave,
    evictions making reservations, time passing: after every step, each claim admission took is younger
    than its confirm window, and `claims_lapsed` counts exactly the takings whose pods never showed and
    whose window ended (an owner's reservation may be taken, given back and taken again: each taking
    counts)."""
    book = GroupBook()
    policies = policy(limit)
    now = T0
    takings: list[list[object]] = []  # [ticket, taken at, confirmed], in order
    for number, (step, arg) in enumerate(steps):
        if step == "admit":
            decision = admit(book, now=now, owner=str(arg), policies=policies)
            if decision.ticket is not None:
                takings.append([decision.ticket, now, False])
        elif step == "confirm" and takings:
            taking = takings[int(str(arg)) % len(takings)]
            live = {claim.id for claim in book.claims() if claim.taken}
            if taking[0] in live and taking is [t for t in takings if t[0] == taking[0]][-1]:
                book.upsert(shows(f"pod-{number}", ticket=str(taking[0]), now=now))
                taking[2] = True
        elif step == "evict":
            gone = PodRecord(namespace="shop", name=f"e{number}", uid=f"e{number}", pacer_groups=(PAIR,))
            book.evicted(dataclasses.replace(gone, owner=str(arg)), now=now)
        elif step == "tick":
            now += float(str(arg))
        book.expire(now)
        for claim in book.claims():
            assert claim.lapses_at > now
            if claim.taken:
                assert now - claim.since < CONFIRM
        expected = sum(1 for _, taken, done in takings if not done and float(str(taken)) + CONFIRM <= now)
        assert book.claims_lapsed == expected
