"""The book itself: every pod's record, indexed per (policy, grouping key) pair so that each question costs
O(log n): Ready pods counted, starting pods ordered by when they started, waiting pods queued oldest
first, reservations, and evict mode's claims."""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from stagger.groupbook.records import (
    CLAIM_CONFIRM_SECONDS,
    DEFAULT_START_TIMEOUT,
    RESERVATION_SECONDS,
    Claim,
    Counts,
    PodKey,
    PodRecord,
    phase_of,
    started_at,
)
from stagger.matching import Pair

__all__ = ["GroupBook"]


class _PairState:
    """The index of one (policy, key) pair. Entries are (time, PodKey) tuples, sorted."""

    __slots__ = ("claimed", "ready", "reserved", "reserved_elsewhere", "starting", "waiting")

    def __init__(self) -> None:
        self.claimed = 0  # claims counted here (evict mode)
        self.ready = 0
        self.starting: Any = SortedList()  # (started, key)
        self.waiting: Any = SortedList()  # (created, key): pods waiting for this pair's pacer
        self.reserved: Any = SortedList()  # (created, key): the reserved ones among `waiting`
        # Reserved pods that count in this pair but wait for other pairs only (bypassed here).
        self.reserved_elsewhere = 0

    def empty(self) -> bool:
        return not (
            self.ready
            or self.starting
            or self.waiting
            or self.reserved
            or self.reserved_elsewhere
            or self.claimed
        )


@dataclass
class GroupBook:
    """Every pod of every staggering group, by pair. Mutated only through upsert, remove, reserve, unreserve and
    expire; every method that takes `now` first lets reservations older than RESERVATION_SECONDS, and
    claims past their `lapses_at`, lapse. `claims_lapsed` counts the claims admission took that lapsed
    before their pod showed (a caller compares it with the count it saw last)."""

    _records: dict[PodKey, PodRecord] = field(default_factory=dict, init=False)
    _pairs: dict[Pair, _PairState] = field(default_factory=dict, init=False)
    _reservations: dict[PodKey, float] = field(default_factory=dict, init=False)
    _reservation_order: Any = field(default_factory=SortedList, init=False)  # (reserved_at, key)
    # Waiting pods with no pair to wait for (held by hand although bypassed everywhere): in no queue.
    _unqueued: dict[PodKey, None] = field(default_factory=dict, init=False)
    _claims: dict[str, Claim] = field(default_factory=dict, init=False)
    _claim_order: Any = field(default_factory=SortedList, init=False)  # (lapses_at, id)
    claims_lapsed: int = field(default=0, init=False)
    _owner_claims: dict[str, list[str]] = field(default_factory=dict, init=False)  # untaken, oldest first
    # Evict-mode holds of pods with an owner (waiting, reserved or not), numbered in the order the book
    # got them: key -> (owner, uid, arrival), and by owner (arrival, key).
    _arrivals: int = field(default=0, init=False)
    _holds: dict[PodKey, tuple[str, str, int]] = field(default_factory=dict, init=False)
    _owner_holds: dict[str, Any] = field(default_factory=dict, init=False)
    # Reservations of evict-mode holds: the arrival count when made, and the owner's reservation taken.
    _evict_reservations: dict[PodKey, tuple[int, Claim | None]] = field(default_factory=dict, init=False)
    # Pairs whose counts or queues changed, and pods whose records changed, since `take_changed` was last
    # called (GrantableIndex's work).
    _changed: set[Pair] = field(default_factory=set, init=False)
    _changed_keys: set[PodKey] = field(default_factory=set, init=False)

    # --- reading ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def get(self, key: PodKey) -> PodRecord | None:
        return self._records.get(key)

    def reservations(self) -> int:
        """Grants counted but not on their pods yet."""
        return len(self._reservations)

    def reserved(self, key: PodKey) -> bool:
        """A grant of this pod is counted but not on the pod yet (as of the last `now` seen)."""
        return key in self._reservations

    def reservation_left(self, key: PodKey, *, now: float) -> float | None:
        """Seconds until this pod's reservation lapses; None when it has none (or it has lapsed)."""
        reserved_at = self._reservations.get(key)
        if reserved_at is None:
            return None
        left = reserved_at + RESERVATION_SECONDS - now
        return left if left > 0 else None

    def pairs(self) -> list[Pair]:
        """Every pair with at least one pod in it."""
        return list(self._pairs)

    def counts(self, pair: Pair, *, now: float, start_timeouts: Mapping[str, float]) -> Counts:
        """Ready, starting and held pods of `pair`; `start_timeouts` maps policy names to startTimeout."""
        self.expire(now)
        return self._counts(pair, now=now, start_timeout=start_timeouts.get(pair[0], DEFAULT_START_TIMEOUT))

    def _counts(self, pair: Pair, *, now: float, start_timeout: float) -> Counts:
        state = self._pairs.get(pair)
        if state is None:
            return Counts(ready=0, starting=0, held=0)
        # Started strictly less than start_timeout ago. The probe (t,) sorts before every (t, key), so this
        # counts the entries that started at or before now - start_timeout.
        too_old = state.starting.bisect_left((math.nextafter(now - start_timeout, math.inf),))
        recent = len(state.starting) - int(too_old)
        return Counts(
            ready=state.ready,
            starting=recent + len(state.reserved) + state.reserved_elsewhere + state.claimed,
            held=len(state.waiting) - len(state.reserved),
        )

    def rank(self, key: PodKey, pair: Pair) -> int:
        """How many waiting, unreserved pods of `pair` were created before this one (0: it is next)."""
        record = self._records[key]
        state = self._pairs[pair]
        entry = (record.created, key)
        return int(state.waiting.bisect_left(entry)) - int(state.reserved.bisect_left(entry))

    def claims(self) -> list[Claim]:
        """Every claim, the first to lapse first (for /status)."""
        return [self._claims[claim_id] for _, claim_id in self._claim_order]

    def next_lapse(self) -> float | None:
        """When the first claim lapses unless its pod shows first (None: no claims). O(1)."""
        order = self._claim_order
        return float(order[0][0]) if order else None

    def owner_claims(self, owner: str) -> int:
        """Reservations of `owner` not taken yet."""
        return len(self._owner_claims.get(owner, ()))

    def owner_claim(self, key: PodKey) -> Claim | None:
        """The owner's reservation this held pod goes against, if any (as of the last `now` seen).

        A pod of an owner held after one of the owner's held pods was released (reserved, then evicted:
        `Claim.after`) while the owner has that reservation is its replacement, held only because
        admission had no answer (a replica that does not lead asked the leader within --admit-timeout):
        admission would have let it through against the reservation. Such holds, in the order the book
        got them, are matched one to one with the owner's reservations; a pod goes against its match
        when that reservation counts in every pair the pod counts in (so the swap never adds to a pair).
        A pod held before the release (one of the owner's other held pods) waits for the pacers: it is
        not a replacement, and taking the reservation would leave the replacement to be held again."""
        record = self._records.get(key)
        if record is None or not record.owner:
            return None
        return dict(self._owner_matches(record.owner)).get(key)

    def owner_releases(self) -> list[tuple[PodKey, Claim]]:
        """Every held pod that goes against its owner's reservation (`owner_claim`), with it. Costs
        O(reservations + the holds that arrived after the oldest) per owner with reservations."""
        return [match for owner in self._owner_claims for match in self._owner_matches(owner)]

    def _owner_matches(self, owner: str) -> list[tuple[PodKey, Claim]]:
        claim_ids = self._owner_claims.get(owner)
        holds = self._owner_holds.get(owner)
        if not claim_ids or not holds:
            return []
        claims = sorted((self._claims[claim_id] for claim_id in claim_ids), key=lambda c: (c.after, c.since))
        matches: list[tuple[PodKey, Claim]] = []
        # Holds in arrival order against reservations in release order: a hold goes against the first
        # reservation left whose release came before it (a later one's came later still).
        for arrival, key in holds.irange(minimum=(claims[0].after + 1,)):
            if len(matches) == len(claims):
                break
            claim = claims[len(matches)]
            if arrival <= claim.after or key in self._reservations:
                continue
            record = self._records[key]
            if set(record.pacer_groups).union(record.bypassed_groups) <= set(claim.pairs):
                matches.append((key, claim))
        return matches

    def has_changes(self) -> bool:
        """Whether anything changed since `take_changed` was last called."""
        return bool(self._changed or self._changed_keys)

    def take_changed(self) -> tuple[set[Pair], set[PodKey]]:
        """The pairs whose counts, queues or reservations changed since the last call (gone ones too), and
        the pods whose records or reservations changed."""
        changed, self._changed = self._changed, set()
        keys, self._changed_keys = self._changed_keys, set()
        return changed, keys

    # --- changing -----------------------------------------------------------------------------------

    def upsert(self, record: PodRecord) -> None:
        """Add or replace the pod's record (from the watch). A reservation survives only while the same
        pod (same uid) is still waiting: once it shows its grant, the record itself counts it."""
        key = record.key
        old = self._records.get(key)
        reserved_at = self._reservations.get(key)
        if old is not None:
            self._unindex(old, reserved=reserved_at is not None)
        self._records[key] = record
        keep = reserved_at is not None and record.waiting and old is not None and old.uid == record.uid
        if reserved_at is not None and not keep:
            self._forget_reservation(key, reserved_at)
        self._index(record, reserved=keep)
        self._track_hold(key, record)
        if record.ticket is not None and record.ticket in self._claims:
            self._drop_claim(record.ticket)  # the pod counts for itself now

    def remove(self, namespace: str, name: str) -> None:
        """The pod is gone (deleted, or no longer in any staggering group); unknown pods are ignored."""
        key = (namespace, name)
        old = self._records.pop(key, None)
        if old is None:
            return
        reserved_at = self._reservations.get(key)
        self._unindex(old, reserved=reserved_at is not None)
        if reserved_at is not None:
            self._forget_reservation(key, reserved_at)
        self._track_hold(key, None)

    def reserve(self, key: PodKey, *, now: float) -> bool:
        """Count a grant of a waiting pod as starting until the pod shows it (or RESERVATION_SECONDS pass).

        A held pod that goes against its owner's reservation (`owner_claim`) takes it: the place was
        counted already, and is counted once, now for this pod (`evicted` makes the owner's next one,
        `unreserve` gives it back). Idempotent: a pod already reserved keeps its first reservation (asking
        again never extends it). False when there is nothing to reserve: an unknown pod, or one that is
        not waiting."""
        self.expire(now)
        record = self._records.get(key)
        if record is None or not record.waiting:
            return False
        if key in self._reservations:
            return True
        if record.evict_hold:
            claim = self.owner_claim(key)
            if claim is not None:
                self._drop_claim(claim.id)
            self._evict_reservations[key] = (self._arrivals, claim)
        self._unindex(record, reserved=False)
        self._reservations[key] = now
        self._reservation_order.add((now, key))
        self._index(record, reserved=True)
        return True

    def unreserve(self, key: PodKey) -> None:
        """Take back a reservation whose grant could not be recorded on the pod (the gate reconciler's
        patch failed, an eviction was refused): the place is free again at once, not after
        RESERVATION_SECONDS; or, when the reservation took its owner's, the owner's again (as old as it
        was: it lapses when it would have)."""
        reserved_at = self._reservations.get(key)
        if reserved_at is None:
            return
        record = self._records[key]
        _, claim = self._evict_reservations.get(key, (0, None))
        self._unindex(record, reserved=True)
        self._forget_reservation(key, reserved_at)
        self._index(record, reserved=False)
        if claim is not None:
            self._add_claim(claim)

    def expire(self, now: float) -> None:
        """Let reservations made RESERVATION_SECONDS or more before `now`, and claims whose `lapses_at`
        is not after `now`, lapse. A claim admission took lapses unconfirmed: counted in
        `claims_lapsed`, and the owner's reservation it took, if any, is the owner's again (a review
        that names a pod never created does not use up the reservation of the real replacement).
        O(log n) per lapse."""
        order = self._reservation_order
        while order and order[0][0] <= now - RESERVATION_SECONDS:
            reserved_at, key = order[0]
            record = self._records[key]
            self._unindex(record, reserved=True)
            self._forget_reservation(key, reserved_at)
            self._index(record, reserved=False)
        claims = self._claim_order
        while claims and claims[0][0] <= now:
            claim = self._claims[claims[0][1]]
            self._drop_claim(claim.id)
            if claim.taken:
                self.claims_lapsed += 1
                if claim.taken_from is not None and claim.taken_from.lapses_at > now:
                    self._add_claim(claim.taken_from)

    def claim(
        self,
        *,
        pairs: Sequence[Pair],
        owner: str,
        first_held: float | None,
        now: float,
        taken: bool,
        claim_id: str | None = None,
        after: int = 0,
        confirm_within: float = CLAIM_CONFIRM_SECONDS,
    ) -> Claim:
        """Count a place in `pairs` for a pod not in the book yet (see `Claim`). A new random id unless
        `claim_id` is given. A `taken` claim (admission's) lapses `confirm_within` seconds from `now`
        unless its pod shows first; an owner's reservation, RESERVATION_SECONDS from `now`."""
        self.expire(now)
        claim = Claim(
            id=claim_id or secrets.token_hex(8),
            pairs=tuple(dict.fromkeys(pairs)),
            owner=owner,
            first_held=first_held,
            since=now,
            taken=taken,
            lapses_at=now + (confirm_within if taken else RESERVATION_SECONDS),
            after=after,
        )
        self._add_claim(claim)
        return claim

    def take_owner_claim(
        self, owner: str, *, now: float, confirm_within: float = CLAIM_CONFIRM_SECONDS
    ) -> Claim | None:
        """The oldest reservation of `owner`, now taken by a pod admission lets through (it counts until
        that pod shows in the book); None when it has none. Unconfirmed `confirm_within` seconds from now,
        it is the owner's reservation again (see `expire`)."""
        self.expire(now)
        waiting = self._owner_claims.get(owner)
        if not waiting:
            return None
        old = self._claims[waiting[0]]
        self._drop_claim(old.id)
        taken = dataclasses.replace(
            old, since=now, taken=True, lapses_at=now + confirm_within, taken_from=old
        )
        self._add_claim(taken)
        return taken

    def evicted(self, record: PodRecord, *, now: float) -> Claim | None:
        """The held pod of `record` was evicted: it leaves the book (if the book still has it: the watch
        may have removed it first), and its place becomes a reservation for its owner's replacement,
        carrying when the pod's hold began (its chain's first, when it went against its owner's
        reservation: that one was taken by its own, so the owner has one reservation per pod evicted and
        not replaced). Pods of the owner held after the pod's release began are its replacement
        (`owner_claim`). A pod without an owner frees its place (None)."""
        first_held = record.created
        after = self._arrivals  # the release's start, when the book no longer knows it: now
        current = self._records.get(record.key)
        if current is not None and current.uid == record.uid:
            after, taken = self._evict_reservations.get(record.key, (after, None))
            if taken is not None and taken.first_held is not None:
                first_held = min(first_held, taken.first_held)
            self.remove(*record.key)
        if not record.owner:
            return None
        return self.claim(
            pairs=record.pacer_groups + record.bypassed_groups,
            owner=record.owner,
            first_held=first_held,
            now=now,
            taken=False,
            after=after,
        )

    def _add_claim(self, claim: Claim) -> None:
        self._claims[claim.id] = claim
        self._claim_order.add((claim.lapses_at, claim.id))
        if not claim.taken:
            waiting = self._owner_claims.setdefault(claim.owner, [])
            # Oldest first; a claim given back (`unreserve`) may be older than the newest.
            at = len(waiting)
            while at and self._claims[waiting[at - 1]].since > claim.since:
                at -= 1
            waiting.insert(at, claim.id)
        self._changed.update(claim.pairs)
        for pair in claim.pairs:
            state = self._pairs.get(pair)
            if state is None:
                state = self._pairs[pair] = _PairState()
            state.claimed += 1

    def _drop_claim(self, claim_id: str) -> None:
        claim = self._claims.pop(claim_id)
        self._claim_order.remove((claim.lapses_at, claim_id))
        if not claim.taken:
            waiting = self._owner_claims[claim.owner]
            waiting.remove(claim_id)
            if not waiting:
                del self._owner_claims[claim.owner]
        self._changed.update(claim.pairs)
        for pair in claim.pairs:
            state = self._pairs[pair]
            state.claimed -= 1
            if state.empty():
                del self._pairs[pair]

    # --- the indexes --------------------------------------------------------------------------------

    def _track_hold(self, key: PodKey, record: PodRecord | None) -> None:
        """Keep the evict-mode holds of pods with an owner numbered in the order the book got them (a pod
        that stops being one leaves; one that becomes one, or another pod under that name, gets the next
        number)."""
        old = self._holds.get(key)
        hold = record is not None and record.waiting and record.evict_hold and bool(record.owner)
        if old is not None:
            if record is not None and hold and old[:2] == (record.owner, record.uid):
                return
            del self._holds[key]
            holds = self._owner_holds[old[0]]
            holds.remove((old[2], key))
            if not holds:
                del self._owner_holds[old[0]]
        if record is not None and hold:
            self._arrivals += 1
            self._holds[key] = (record.owner, record.uid, self._arrivals)
            holds = self._owner_holds.get(record.owner)
            if holds is None:
                holds = self._owner_holds[record.owner] = SortedList()
            holds.add((self._arrivals, key))

    def _forget_reservation(self, key: PodKey, reserved_at: float) -> None:
        del self._reservations[key]
        self._reservation_order.remove((reserved_at, key))
        self._evict_reservations.pop(key, None)  # the owner's reservation it took, if any, ends with it

    def _index(self, record: PodRecord, *, reserved: bool) -> None:
        self._apply(record, reserved=reserved, add=True)

    def _unindex(self, record: PodRecord, *, reserved: bool) -> None:
        self._apply(record, reserved=reserved, add=False)

    def _apply(self, record: PodRecord, *, reserved: bool, add: bool) -> None:
        phase = phase_of(record)
        key = record.key
        self._changed_keys.add(key)
        if phase == "done":
            return  # a finished pod counts nowhere
        if phase == "waiting" and not record.pacer_groups:
            if add:
                self._unqueued[key] = None
            else:
                self._unqueued.pop(key, None)
        for pair, waits in [(pair, True) for pair in record.pacer_groups] + [
            (pair, False) for pair in record.bypassed_groups
        ]:
            if phase == "waiting" and not waits and not reserved:
                continue  # waiting for other pairs: nothing to count here yet
            state = self._pairs.get(pair)
            if state is None:
                if not add:
                    continue
                state = self._pairs[pair] = _PairState()
            self._changed.add(pair)
            if phase == "ready":
                state.ready += 1 if add else -1
            elif phase == "starting":
                _change(state.starting, (started_at(record), key), add=add)
            elif waits:
                _change(state.waiting, (record.created, key), add=add)
                if reserved:
                    _change(state.reserved, (record.created, key), add=add)
            else:
                state.reserved_elsewhere += 1 if add else -1
            if not add and state.empty():
                del self._pairs[pair]


def _change(entries: Any, entry: tuple[float, PodKey], *, add: bool) -> None:
    if add:
        entries.add(entry)
    else:
        entries.remove(entry)
