"""The book's decisions, functions of the book, the policies and `now`: whether one pod may start now
(`decide`), evict mode's admission (`admit`), and which held pods may go (`grantable`).

A policy whose maxBlockedDuration is "never" (math.inf) holds its pods until their group grants them, but
not for ever: such a pod is released after `max_wait`, the controller's maxWait (the bound its init client
is given at admission), so that a held pod nobody runs an init client for (evict mode) is not stuck."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stagger import pacers
from stagger.durations import format_duration
from stagger.groupbook.book import GroupBook
from stagger.groupbook.records import (
    CLAIM_CONFIRM_SECONDS,
    DENIED_RETRY_SECONDS,
    MIN_RETRY_SECONDS,
    UNKNOWN_RETRY_SECONDS,
    AdmitDecision,
    Counts,
    Decision,
    PodKey,
    PodRecord,
    pair_label,
)
from stagger.matching import Pair
from stagger.policy import NodePolicy, StaggeringPolicy

__all__ = [
    "DEFAULT_MAX_WAIT",
    "NOTHING",
    "PairGrants",
    "admit",
    "decide",
    "grantable",
    "paced_in_full",
    "pair_grants",
    "unpaced",
]

# The controller's maxWait without node policies (a node policy's default maxWait, as
# webhook.admission.max_wait_for's): the bound of a "never" policy's pods when the caller gives none.
DEFAULT_MAX_WAIT: float = NodePolicy.max_wait


def _held_at_most(policy: StaggeringPolicy, *, max_wait: float) -> float:
    """How long `policy` holds a pod: its maxBlockedDuration, or `max_wait` when that is "never"."""
    return policy.max_blocked_duration if math.isfinite(policy.max_blocked_duration) else max_wait


def _max_blocked(
    record: PodRecord, policies: Mapping[str, StaggeringPolicy], *, max_wait: float
) -> tuple[float, str] | None:
    """The shortest hold of the policies the pod waits for (`_held_at_most`), and what sets it."""
    known = [policies[policy] for policy, _ in record.pacer_groups if policy in policies]
    if not known:
        return None
    smallest = min(known, key=lambda policy: _held_at_most(policy, max_wait=max_wait))
    bound = _held_at_most(smallest, max_wait=max_wait)
    if math.isfinite(smallest.max_blocked_duration):
        return bound, f"maxBlockedDuration {_seconds(bound)} ({smallest.name})"
    return bound, f"the controller's maxWait {_seconds(bound)} ({smallest.name}: maxBlockedDuration never)"


def _seconds(value: float) -> str:
    return format_duration(round(max(value, 0.0), 1))


def decide(
    book: GroupBook,
    *,
    policies: Mapping[str, StaggeringPolicy],
    key: PodKey,
    now: float,
    max_wait: float = DEFAULT_MAX_WAIT,
) -> Decision:
    """May the pod `key` start now? Does not reserve: on a grant the caller calls `book.reserve(key)`.

    `policies` maps policy names to the current staggering policies; a pair whose policy is no longer in
    the file does not limit (its pods are not held back by a policy nobody can see any more). `max_wait`:
    the hold of a "never" policy (see the module)."""
    book.expire(now)
    record = book.get(key)
    if record is None:
        return Decision(
            granted=False,
            reason="the controller has not seen this pod yet",
            retry_after=UNKNOWN_RETRY_SECONDS,
            basis="unknown",
        )
    if not record.waiting:
        return Decision(granted=True, reason=_not_held(record), retry_after=0.0, basis="notHeld")
    if book.reserved(key):
        return Decision(granted=True, reason="already granted", retry_after=0.0, basis="reserved")
    # Before maxBlockedDuration and bypass: the reservation it takes is counted already (`book.reserve`),
    # so its owner is never left with a second place for one.
    claim = book.owner_claim(key)
    if claim is not None:
        return Decision(
            granted=True,
            reason=(
                f"its owner's reservation {claim.id}: a held pod of the same owner was evicted to let its "
                "replacement start, and this one was held instead"
            ),
            retry_after=0.0,
            basis="ownerReservation",
        )
    if record.bypassed:
        return Decision(granted=True, reason="bypassed in every policy", retry_after=0.0, basis="bypassed")
    held_for = now - record.created
    blocked = _max_blocked(record, policies, max_wait=max_wait)
    if blocked is not None and held_for >= blocked[0]:
        return Decision(
            granted=True,
            reason=f"held {_seconds(held_for)} >= {blocked[1]}: released regardless",
            retry_after=0.0,
            basis="maxBlocked",
        )
    parts: list[str] = []
    for pair in record.pacer_groups:
        paced = _paced(book, pair, policies=policies, now=now)
        if paced is None:
            parts.append(_no_limit(pair))
            continue
        policy, counts = paced
        room = pacers.room(policy.pacer, ready=counts.ready, starting=counts.starting)
        rank = book.rank(key, pair)
        if room is not None and rank >= room:
            text = pacers.describe(policy.pacer, ready=counts.ready, starting=counts.starting)
            if room > 0:
                text += f"; {rank} {'pod' if rank == 1 else 'pods'} held longer go first"
            until_release = record.created + blocked[0] - now if blocked is not None else DENIED_RETRY_SECONDS
            return Decision(
                granted=False,
                reason=f"{pair_label(pair)}: {text}",
                retry_after=max(MIN_RETRY_SECONDS, min(DENIED_RETRY_SECONDS, until_release)),
                basis="denied",
            )
        parts.append(_with_one_more(pair, policy, counts))
    return Decision(granted=True, reason="; ".join(parts), retry_after=0.0, basis="paced")


def _paced(
    book: GroupBook, pair: Pair, *, policies: Mapping[str, StaggeringPolicy], now: float
) -> tuple[StaggeringPolicy, Counts] | None:
    """The pair's policy and its counts now; None when the policy is no longer in the policy file (a
    reload removed it): the pair then sets no limit."""
    policy = policies.get(pair[0])
    if policy is None:
        return None
    return policy, book._counts(pair, now=now, start_timeout=policy.start_timeout)


def _no_limit(pair: Pair) -> str:
    return f"{pair_label(pair)}: policy {pair[0]} is not in the policy file, no limit"


def _with_one_more(pair: Pair, policy: StaggeringPolicy, counts: Counts) -> str:
    """The pair as it will be with this pod started: a grant's reason."""
    starting = counts.starting + 1
    return f"{pair_label(pair)}: {pacers.describe(policy.pacer, ready=counts.ready, starting=starting)}"


def admit(
    book: GroupBook,
    *,
    policies: Mapping[str, StaggeringPolicy],
    pacer_groups: Sequence[Pair],
    bypassed_groups: Sequence[Pair] = (),
    owner: str,
    now: float,
    dry_run: bool = False,
    confirm_within: float = CLAIM_CONFIRM_SECONDS,
) -> AdmitDecision:
    """Evict mode, at admission: may a new pod in `pacer_groups` (counting in `bypassed_groups` too) start
    now, or is it held? On a yes the place is claimed (unless `dry_run`) and its id is the pod's ticket.
    The claim is provisional: unless the pod shows in the book within `confirm_within` seconds it lapses
    (`GroupBook.expire`), so a review for a pod that is never created holds no place for long. Costs
    O(pairs x log n).

    A pod whose owner has a reservation (one of its pods was evicted to let it start) goes against it,
    whatever the pacers say now: a replacement is never held again. Any other pod goes only when every
    pacer has room and no pod of its pairs is held (held pods go first: admission does not jump the
    queue the eviction reconciler works through)."""
    book.expire(now)
    if owner and book.owner_claims(owner):
        reason = "its owner's reservation: a held pod of the same owner was evicted to let it start"
        if dry_run:
            return AdmitDecision(admit=True, reason=reason, basis="reserved")
        claim = book.take_owner_claim(owner, now=now, confirm_within=confirm_within)
        assert claim is not None  # owner_claims said there is one
        return AdmitDecision(
            admit=True, reason=reason, basis="reserved", ticket=claim.id, held_since=claim.first_held
        )
    parts: list[str] = []
    for pair in pacer_groups:
        paced = _paced(book, pair, policies=policies, now=now)
        if paced is None:
            parts.append(_no_limit(pair))
            continue
        policy, counts = paced
        if counts.held:
            held = f"{counts.held} {'pod' if counts.held == 1 else 'pods'}"
            return AdmitDecision(
                admit=False, reason=f"{pair_label(pair)}: {held} held longer go first", basis="denied"
            )
        room = pacers.room(policy.pacer, ready=counts.ready, starting=counts.starting)
        if room is not None and room < 1:
            text = pacers.describe(policy.pacer, ready=counts.ready, starting=counts.starting)
            return AdmitDecision(admit=False, reason=f"{pair_label(pair)}: {text}", basis="denied")
        parts.append(_with_one_more(pair, policy, counts))
    reason = "; ".join(parts)
    if dry_run:
        return AdmitDecision(admit=True, reason=reason, basis="paced")
    claim = book.claim(
        pairs=tuple(pacer_groups) + tuple(bypassed_groups),
        owner="",
        first_held=None,
        now=now,
        taken=True,
        confirm_within=confirm_within,
    )
    return AdmitDecision(admit=True, reason=reason, basis="paced", ticket=claim.id)


def _not_held(record: PodRecord) -> str:
    if record.finished:
        return "the pod has finished"
    if record.ready:
        return "the pod is Ready"
    if record.granted_at is not None:
        return "already granted"
    return "not held (bypassed)"


@dataclass(frozen=True)
class PairGrants:
    """What one pair lets go now: the waiting pods its pacer admits (its oldest `room` unreserved ones;
    all of them without a limit), those held there for the policy's maxBlockedDuration (released whatever
    the pacer says), and when this answer next changes with time alone (None: not before the pair itself
    changes): the moment a counted start-up passes startTimeout, or the next held pod reaches
    maxBlockedDuration."""

    admitted: tuple[PodKey, ...]
    released: tuple[PodKey, ...]
    due: float | None


NOTHING = PairGrants(admitted=(), released=(), due=None)


def pair_grants(
    book: GroupBook,
    pair: Pair,
    *,
    policy: StaggeringPolicy | None,
    now: float,
    max_wait: float = DEFAULT_MAX_WAIT,
) -> PairGrants:
    """`PairGrants` of one pair (call `book.expire(now)` first); `max_wait`: the hold of a "never" policy.
    Costs O(room + released + log n)."""
    state = book._pairs.get(pair)
    if state is None or not state.waiting:
        return NOTHING
    reservations = book._reservations
    released: list[PodKey] = []
    limit: int | None = None
    due: float | None = None
    if policy is not None:
        counts = book._counts(pair, now=now, start_timeout=policy.start_timeout)
        limit = pacers.room(policy.pacer, ready=counts.ready, starting=counts.starting)
        # A pod's own maxBlockedDuration is the smallest of its policies', so whatever has been held
        # this policy's long is released, and every released pod is found in the queue of the
        # policy whose deadline it passed. ("never" is max_wait here and in `decide` alike.)
        held_at_most = _held_at_most(policy, max_wait=max_wait)
        deadline = now - held_at_most
        for created, key in state.waiting:
            if created > deadline:
                due = created + held_at_most
                break
            if key not in reservations:
                released.append(key)
        counted = state.starting.bisect_left((math.nextafter(now - policy.start_timeout, math.inf),))
        if counted < len(state.starting):
            ends = state.starting[counted][0] + policy.start_timeout
            due = ends if due is None else min(due, ends)
    admitted: list[PodKey] = []
    for _, key in state.waiting:
        if limit is not None and len(admitted) >= limit:
            break
        if key not in reservations:
            admitted.append(key)
    return PairGrants(admitted=tuple(admitted), released=tuple(released), due=due)


def unpaced(book: GroupBook) -> set[PodKey]:
    """The waiting pods that go whatever the pacers say: those held by hand although bypassed everywhere
    (in no queue), and those that go against their owner's reservation (`GroupBook.owner_claim`); never
    a reserved one. Small: O(such pods + the owners with reservations)."""
    reservations = book._reservations
    keys = {key for key in book._unqueued if key not in reservations}
    keys.update(key for key, _ in book.owner_releases())
    return keys


def paced_in_full(book: GroupBook, key: PodKey, *, admitting: int) -> bool:
    """Whether a pod admitted by `admitting` of its pairs is admitted by every pair it waits for."""
    record = book._records.get(key)
    return record is not None and bool(record.pacer_groups) and admitting == len(record.pacer_groups)


def grantable(
    book: GroupBook,
    *,
    policies: Mapping[str, StaggeringPolicy],
    now: float,
    max_wait: float = DEFAULT_MAX_WAIT,
) -> list[PodKey]:
    """Every waiting pod that `decide` would grant now, oldest first (the gate-mode reconciler removes
    the gates of the gated ones). Does not reserve: reserve each pod you act on. Recomputes every pair:
    `GrantableIndex` keeps the same answer up to date pair by pair.

    Granting all of them together never over-grants: a pair admits only its oldest `room` unreserved
    waiting pods, so at most `room` paced grants land in any pair (pods released by maxBlockedDuration
    or bypass come on top, as they do one by one; pods that go against their owner's reservation come
    on top too, but each takes its reservation, a place counted already). Costs O(room + released) per
    pair with waiting pods, O(waiting) for pairs without a limit."""
    book.expire(now)
    chosen = unpaced(book)
    admitted: dict[PodKey, int] = {}
    for pair in book._pairs:
        grants = pair_grants(book, pair, policy=policies.get(pair[0]), now=now, max_wait=max_wait)
        chosen.update(grants.released)
        for key in grants.admitted:
            admitted[key] = admitted.get(key, 0) + 1
    # Admitted by every pair it waits for.
    chosen.update(key for key, count in admitted.items() if paced_in_full(book, key, admitting=count))
    return sorted(chosen, key=lambda key: (book._records[key].created, key))
