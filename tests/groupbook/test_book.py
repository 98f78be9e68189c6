"""The group book's counts and grant decisions (stagger.groupbook): counts kept on upsert/remove,
startTimeout, reservations (counted, idempotent, ended by the pod's grant or after 60 s, not carried to a
recreated pod), decide in every case with its reason, grantable (the seed's "4 start, then 16, then all",
oldest first, head of line across pairs, maxBlockedDuration, bypass), a policy of maxBlockedDuration
"never" holding its pods for the controller's maxWait (in `decide`, `grantable` and the index alike, and
never longer than a finite bound of the pod's other policies), and the memory of 10,000 pods."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc

import pytest

from stagger import groupbook
from stagger.groupbook import Counts, GroupBook, PodRecord
from stagger.policy import ExponentialPacer, MaxConcurrentPacer
from tests.groupbook.policies import staggering

T0 = 1_000_000.0
IMG = ("image-pull", "nginx")
NODE = ("per-node", "n1")


SEED = staggering("image-pull", ExponentialPacer(min_initial=4, multiplier=4.0, max_stagger=16))
PER_NODE = staggering("per-node", MaxConcurrentPacer(value=1), max_blocked=60.0)
POLICIES = {policy.name: policy for policy in (SEED, PER_NODE)}
TIMEOUTS = {name: policy.start_timeout for name, policy in POLICIES.items()}


def pod(
    name: str,
    *,
    created: float = T0,
    pairs: tuple[tuple[str, str], ...] = (IMG,),
    bypassed: tuple[tuple[str, str], ...] = (),
    held: bool = True,
    **fields: object,
) -> PodRecord:
    return PodRecord(
        namespace="shop",
        name=name,
        uid=f"uid-{name}",
        pacer_groups=pairs,
        bypassed_groups=bypassed,
        held=held,
        created=created,
        **fields,  # type: ignore[arg-type]
    )


def book_of(*records: PodRecord) -> GroupBook:
    book = GroupBook()
    for record in records:
        book.upsert(record)
    return book


def counts(book: GroupBook, pair: tuple[str, str] = IMG, now: float = T0) -> Counts:
    return book.counts(pair, now=now, start_timeouts=TIMEOUTS)


def test_counts_follow_each_pod_through_its_life() -> None:
    book = book_of(pod("a"), pod("b"))
    assert counts(book) == Counts(ready=0, starting=0, held=2)
    book.upsert(pod("a", held=False, granted_at=T0 + 1))
    assert counts(book) == Counts(ready=0, starting=1, held=1)
    book.upsert(pod("a", held=False, granted_at=T0 + 1, ready=True))
    assert counts(book) == Counts(ready=1, starting=0, held=1)
    book.upsert(pod("a", held=False, granted_at=T0 + 1, ready=False, finished=True))
    assert counts(book) == Counts(ready=0, starting=0, held=1)
    book.remove("shop", "b")
    book.remove("shop", "b")  # unknown: ignored
    assert counts(book) == Counts(ready=0, starting=0, held=0)
    assert book.pairs() == []  # the finished pod counts nowhere, and empty pairs are dropped
    assert len(book) == 1


def test_starting_ends_at_start_timeout() -> None:
    book = book_of(pod("a", held=False, granted_at=T0), pod("b", held=False, granted_at=T0 + 100))
    assert counts(book, now=T0 + 299.9).starting == 2
    assert counts(book, now=T0 + 300).starting == 1  # granted 300 s ago: no longer "less than" 300 s
    assert counts(book, now=T0 + 400).starting == 0
    assert book.counts(IMG, now=T0 + 30, start_timeouts={"image-pull": 30}).starting == 1


def test_never_held_pod_starts_at_creation() -> None:
    book = book_of(pod("a", held=False, created=T0))
    assert counts(book, now=T0 + 10).starting == 1
    assert counts(book, now=T0 + 300).starting == 0


def test_bypassed_pairs_count_but_do_not_queue() -> None:
    book = book_of(pod("a", pairs=(NODE,), bypassed=(IMG,)), pod("b", held=False, pairs=(), bypassed=(IMG,)))
    assert counts(book) == Counts(ready=0, starting=1, held=0)  # b starts; a waits for NODE only
    assert counts(book, NODE) == Counts(ready=0, starting=0, held=1)
    assert book.reserve(("shop", "a"), now=T0)
    assert counts(book) == Counts(ready=0, starting=2, held=0)  # a's grant counts in IMG too
    assert counts(book, NODE) == Counts(ready=0, starting=1, held=0)


def test_reservation_counts_until_the_pod_shows_its_grant() -> None:
    book = book_of(pod("a"), pod("b"))
    assert book.reserve(("shop", "a"), now=T0)
    assert book.reserve(("shop", "a"), now=T0 + 5)  # idempotent
    assert counts(book) == Counts(ready=0, starting=1, held=1)
    book.upsert(pod("a", held=False, granted_at=T0 + 2))
    assert not book.reserved(("shop", "a"))
    assert counts(book) == Counts(ready=0, starting=1, held=1)


def test_reservation_lapses_after_60_seconds_and_is_not_extended_by_asking() -> None:
    book = book_of(pod("a"))
    book.reserve(("shop", "a"), now=T0)
    book.reserve(("shop", "a"), now=T0 + 59)
    assert counts(book, now=T0 + 59.9).starting == 1
    assert counts(book, now=T0 + 60) == Counts(ready=0, starting=0, held=1)
    assert not book.reserved(("shop", "a"))


def test_reservation_survives_an_unrelated_update_but_not_a_new_uid() -> None:
    book = book_of(pod("a"))
    book.reserve(("shop", "a"), now=T0)
    book.upsert(pod("a", gated=False))  # e.g. a label changed: same pod, still waiting
    assert book.reserved(("shop", "a"))
    book.upsert(dataclasses.replace(pod("a"), uid="another"))  # deleted and recreated under the same name
    assert not book.reserved(("shop", "a"))
    assert counts(book) == Counts(ready=0, starting=0, held=1)


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(None, id="unknown"),
        pytest.param(pod("a", held=False, granted_at=T0), id="already-granted"),
        pytest.param(pod("a", ready=True), id="ready"),
    ],
)
def test_only_waiting_pods_are_reserved(record: PodRecord | None) -> None:
    book = book_of(*([record] if record else []))
    assert not book.reserve(("shop", "a"), now=T0)
    assert not book.reserved(("shop", "a"))


def test_removed_reserved_pod_frees_its_place() -> None:
    book = book_of(pod("a"))
    book.reserve(("shop", "a"), now=T0)
    book.remove("shop", "a")
    assert counts(book) == Counts(ready=0, starting=0, held=0)
    assert book.pairs() == []


def decide(book: GroupBook, name: str, now: float = T0) -> groupbook.Decision:
    return groupbook.decide(book, policies=POLICIES, key=("shop", name), now=now)


def test_decide_grants_the_first_four_then_says_why_not() -> None:
    book = book_of(*(pod(f"p{i}", created=T0 + i) for i in range(6)))
    for i in range(4):
        decision = decide(book, f"p{i}", now=T0 + 10)
        assert (decision.granted, decision.basis) == (True, "paced")
        assert decision.reason == f"image-pull[nginx]: {i + 1} of 4 started (exponential 4/4/16, 0 Ready)"
        book.reserve(("shop", f"p{i}"), now=T0 + 10)
    decision = decide(book, "p5", now=T0 + 10)
    assert decision == groupbook.Decision(
        granted=False,
        reason="image-pull[nginx]: 4 of 4 started (exponential 4/4/16, 0 Ready)",
        retry_after=5.0,
        basis="denied",
    )


def test_decide_oldest_first() -> None:
    book = book_of(pod("old", created=T0), pod("young", created=T0 + 1), pod("ready", ready=True, held=False))
    # Room for 2 more (1 Ready: max(4, 4) = 4 started), and "young" is second in line: granted.
    assert decide(book, "young", now=T0 + 2).granted
    book.upsert(pod("s1", held=False, granted_at=T0))
    book.upsert(pod("s2", held=False, granted_at=T0))
    # Now room for 1: only the oldest waiting pod may go.
    assert decide(book, "old", now=T0 + 2).granted
    denied = decide(book, "young", now=T0 + 2)
    assert not denied.granted
    assert denied.reason == (
        "image-pull[nginx]: 3 of 4 started (exponential 4/4/16, 1 Ready); 1 pod held longer go first"
    )


def test_decide_every_pair_must_agree() -> None:
    book = book_of(pod("busy", held=False, granted_at=T0, pairs=(NODE,)), pod("a", pairs=(IMG, NODE)))
    decision = decide(book, "a", now=T0 + 1)
    assert (decision.granted, decision.reason) == (False, "per-node[n1]: 1 of 1 starting (maxConcurrent 1)")
    book.upsert(pod("busy", held=False, granted_at=T0, pairs=(NODE,), ready=True))
    decision = decide(book, "a", now=T0 + 1)
    assert decision.granted
    assert decision.reason == (
        "image-pull[nginx]: 1 of 4 started (exponential 4/4/16, 0 Ready); "
        "per-node[n1]: 1 of 1 starting (maxConcurrent 1)"
    )


def test_decide_max_blocked_duration_releases_regardless() -> None:
    book = book_of(pod("busy", held=False, granted_at=T0, pairs=(NODE,)), pod("a", pairs=(IMG, NODE)))
    assert decide(book, "a", now=T0 + 30).retry_after == 5.0
    assert decide(book, "a", now=T0 + 58).retry_after == 2.0  # ask again when it is released
    decision = decide(book, "a", now=T0 + 60)
    assert decision == groupbook.Decision(
        granted=True,
        reason="held 1m >= maxBlockedDuration 1m (per-node): released regardless",
        retry_after=0.0,
        basis="maxBlocked",
    )


@pytest.mark.parametrize(
    ("record", "granted", "basis", "reason"),
    [
        pytest.param(None, False, "unknown", "the controller has not seen this pod yet", id="unknown"),
        pytest.param(pod("a", held=False, granted_at=T0), True, "notHeld", "already granted", id="granted"),
        pytest.param(pod("a", held=False), True, "notHeld", "not held (bypassed)", id="never-held"),
        pytest.param(pod("a", ready=True), True, "notHeld", "the pod is Ready", id="ready"),
        pytest.param(pod("a", finished=True), True, "notHeld", "the pod has finished", id="finished"),
        pytest.param(
            pod("a", pairs=(), bypassed=(IMG,)), True, "bypassed", "bypassed in every policy", id="bypassed"
        ),
        pytest.param(
            pod("a", pairs=(("gone", "x"),)),
            True,
            "paced",
            "gone[x]: policy gone is not in the policy file, no limit",
            id="policy-removed",
        ),
    ],
)
def test_decide_cases(record: PodRecord | None, granted: bool, basis: str, reason: str) -> None:
    book = book_of(*([record] if record else []), *(pod(f"s{i}", held=False) for i in range(4)))
    decision = decide(book, "a", now=T0 + 1)
    assert (decision.granted, decision.basis, decision.reason) == (granted, basis, reason)


def test_decide_reserved_pod_asking_again_is_granted_once() -> None:
    book = book_of(pod("a"), *(pod(f"s{i}", held=False) for i in range(3)))
    assert decide(book, "a").granted
    book.reserve(("shop", "a"), now=T0)
    again = decide(book, "a", now=T0 + 1)
    assert (again.granted, again.basis) == (True, "reserved")
    assert counts(book, now=T0 + 1).starting == 4


def test_grantable_seed_four_then_sixteen_then_all() -> None:
    book = book_of(*(pod(f"p{i:02}", created=T0 + i) for i in range(40)))
    now = T0 + 100
    waves = []
    while True:
        batch = groupbook.grantable(book, policies=POLICIES, now=now)
        if not batch:
            break
        waves.append(len(batch))
        assert batch == sorted(batch)  # names sort like creation times here: oldest first
        for key in batch:
            book.reserve(key, now=now)
            book.upsert(dataclasses.replace(book.get(key), held=False, granted_at=now, ready=True))  # type: ignore[arg-type]
    assert waves == [4, 12, 24]  # 4 started, then 16 started, then no limit past 16 Ready


def test_grantable_counts_reservations_and_leaves_them_out() -> None:
    book = book_of(*(pod(f"p{i}", created=T0 + i) for i in range(6)))
    first = groupbook.grantable(book, policies=POLICIES, now=T0 + 10)
    assert first == [("shop", f"p{i}") for i in range(4)]
    for key in first[:2]:
        book.reserve(key, now=T0 + 10)
    assert groupbook.grantable(book, policies=POLICIES, now=T0 + 11) == first[2:]
    # The reservations lapse unrecorded after 60 s: the pods are waiting again, first in line.
    assert groupbook.grantable(book, policies=POLICIES, now=T0 + 70) == first


def test_grantable_head_of_line_across_pairs() -> None:
    # The oldest pod waits for IMG and NODE; NODE is busy. IMG's one place is the oldest pod's, so the
    # younger IMG-only pod waits behind it (strict oldest-first) until maxBlockedDuration.
    policies = {"image-pull": staggering("image-pull", MaxConcurrentPacer(1)), "per-node": PER_NODE}
    book = book_of(
        pod("busy", held=False, granted_at=T0, pairs=(NODE,)),
        pod("old", created=T0, pairs=(IMG, NODE)),
        pod("young", created=T0 + 1, pairs=(IMG,)),
    )
    assert groupbook.grantable(book, policies=policies, now=T0 + 10) == []
    assert groupbook.grantable(book, policies=policies, now=T0 + 60) == [("shop", "old")]


def test_grantable_includes_bypassed_and_long_held_pods() -> None:
    book = book_of(
        *(pod(f"s{i}", held=False, granted_at=T0) for i in range(4)),
        pod("held-long", created=T0 - 600),
        pod("held-short", created=T0 - 1),
        pod("bypassed", pairs=(), bypassed=(IMG,), created=T0),
    )
    keys = groupbook.grantable(book, policies=POLICIES, now=T0)
    assert keys == [("shop", "held-long"), ("shop", "bypassed")]


NEVER = staggering("straggler", MaxConcurrentPacer(value=1), max_blocked=math.inf)
NEVER_PAIR = ("straggler", "")


def never_book(*pairs: tuple[str, str]) -> GroupBook:
    """A pod held since T0, behind one that started at T0 + 1000 (starting until T0 + 1300)."""
    return book_of(pod("busy", held=False, granted_at=T0 + 1000, pairs=pairs), pod("a", pairs=pairs))


def test_never_holds_until_the_controllers_max_wait() -> None:
    policies = {NEVER.name: NEVER}
    book = never_book(NEVER_PAIR)
    held = groupbook.decide(book, policies=policies, key=("shop", "a"), now=T0 + 1199, max_wait=1200.0)
    assert (held.granted, held.retry_after) == (False, 1.0)  # asks again when its maxWait ends
    assert groupbook.grantable(book, policies=policies, now=T0 + 1199, max_wait=1200.0) == []
    assert groupbook.decide(book, policies=policies, key=("shop", "a"), now=T0 + 1200, max_wait=1200.0) == (
        groupbook.Decision(
            granted=True,
            reason="held 20m >= the controller's maxWait 20m (straggler: maxBlockedDuration never): "
            "released regardless",
            retry_after=0.0,
            basis="maxBlocked",
        )
    )
    assert groupbook.grantable(book, policies=policies, now=T0 + 1200, max_wait=1200.0) == [("shop", "a")]


def test_never_without_a_bound_given_is_the_default_max_wait() -> None:
    policies = {NEVER.name: NEVER}
    book = never_book(NEVER_PAIR)
    assert groupbook.decide(book, policies=policies, key=("shop", "a"), now=T0 + 599).basis == "denied"
    assert groupbook.decide(book, policies=policies, key=("shop", "a"), now=T0 + 600).basis == "maxBlocked"


def test_never_and_a_finite_bound_release_at_the_finite_one() -> None:
    policies = {NEVER.name: NEVER, PER_NODE.name: PER_NODE}  # per-node: maxBlockedDuration 1m
    book = never_book(NEVER_PAIR, NODE)
    decision = groupbook.decide(book, policies=policies, key=("shop", "a"), now=T0 + 60, max_wait=1200.0)
    assert decision.reason == "held 1m >= maxBlockedDuration 1m (per-node): released regardless"
    assert groupbook.grantable(book, policies=policies, now=T0 + 60, max_wait=1200.0) == [("shop", "a")]


def test_the_index_is_due_at_the_controllers_max_wait_for_never() -> None:
    # A "never" pair has a finite due time: the release does not wait for some unrelated change.
    policies = {NEVER.name: NEVER}
    book = never_book(NEVER_PAIR)
    index = groupbook.GrantableIndex()
    assert index.update(book, policies=policies, now=T0 + 1, max_wait=900.0) == set()
    assert index.next_due() == T0 + 900
    assert index.update(book, policies=policies, now=T0 + 900, max_wait=900.0) == {("shop", "a")}


def test_ten_thousand_pods_fit_in_a_few_megabytes() -> None:
    images = [("image-pull", f"registry.example/app-{i}:1.0") for i in range(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        book = GroupBook()
        for i in range(10_000):
            book.upsert(
                PodRecord(
                    namespace=f"team-{i % 50}",
                    name=f"app-{i % 200}-7f9c5d8b4-{i:05x}",
                    uid=f"8f14e45f-ceea-467f-a0e6-{i:012x}",
                    pacer_groups=(images[i % 200], ("per-node", f"node-{i % 100}")),
                    held=i % 3 == 0,
                    created=T0 + i,
                    granted_at=None if i % 3 == 0 else T0 + i + 1,
                    ready=i % 3 == 1,
                )
            )
        used = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert len(book) == 10_000
    assert used < 30 * 1024 * 1024, used
