"""The book itself: every pod's record, indexed per (policy, grouping key) pair so that each question costs
O(log n): Ready pods counted, starting pods ordered by when they started, waiting pods queued oldest
first, reservations, and evict mode's claims."""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from stagger.groupbook.records import (
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
    expire; every method that takes `now` first lets reservations older than RESERVATION_SECONDS lapse."""

    _records: dict[PodKey, PodRecord] = field(default_factory=dict, init=False)
    _pairs: dict[Pair, _PairState] = field(default_factory=dict, init=False)
    _reservations: dict[PodKey, float] = field(default_factory=dict, init=False)
    _reservation_order: Any = field(default_factory=SortedList, init=False)  # (reserved_at, key)
    # Waiting pods with no pair to wait for (held by hand although bypassed everywhere): in no queue.
    _unqueued: dict[PodKey, None] = field(default_factory=dict, init=False)
    _claims: dict[str, Claim] = field(default_factory=dict, init=False)
    _claim_order: Any = field(default_factory=SortedList, init=False)  # (since, id)
    _owner_claims: dict[str, list[str]] = field(default_factory=dict, init=False)  # untaken, oldest first

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
        """Every claim, oldest first (for /status)."""
        return [self._claims[claim_id] for _, claim_id in self._claim_order]

    def owner_claims(self, owner: str) -> int:
        """Reservations of `owner` not taken yet."""
        return len(self._owner_claims.get(owner, ()))

    def waiting_in(self, pair: Pair) -> list[PodKey]:
        """The waiting, unreserved pods of `pair`, oldest first (for /status; O(held))."""
        state = self._pairs.get(pair)
        if state is None:
            return []
        return [key for _, key in state.waiting if key not in self._reservations]

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

    def reserve(self, key: PodKey, *, now: float) -> bool:
        """Count a grant of a waiting pod as starting until the pod shows it (or RESERVATION_SECONDS pass).

        Idempotent: a pod already reserved keeps its first reservation (asking again never extends it).
        False when there is nothing to reserve: an unknown pod, or one that is not waiting."""
        self.expire(now)
        record = self._records.get(key)
        if record is None or not record.waiting:
            return False
        if key in self._reservations:
            return True
        self._unindex(record, reserved=False)
        self._reservations[key] = now
        self._reservation_order.add((now, key))
        self._index(record, reserved=True)
        return True

    def unreserve(self, key: PodKey) -> None:
        """Take back a reservation whose grant could not be recorded on the pod (the gate reconciler's
        patch failed): the place is free again at once, not after RESERVATION_SECONDS."""
        reserved_at = self._reservations.get(key)
        if reserved_at is None:
            return
        record = self._records[key]
        self._unindex(record, reserved=True)
        self._forget_reservation(key, reserved_at)
        self._index(record, reserved=False)

    def expire(self, now: float) -> None:
        """Let reservations and claims made RESERVATION_SECONDS or more before `now` lapse."""
        order = self._reservation_order
        while order and order[0][0] <= now - RESERVATION_SECONDS:
            reserved_at, key = order[0]
            record = self._records[key]
            self._unindex(record, reserved=True)
            self._forget_reservation(key, reserved_at)
            self._index(record, reserved=False)
        claims = self._claim_order
        while claims and claims[0][0] <= now - RESERVATION_SECONDS:
            self._drop_claim(claims[0][1])

    def claim(
        self,
        *,
        pairs: Sequence[Pair],
        owner: str,
        first_held: float | None,
        now: float,
        taken: bool,
        claim_id: str | None = None,
    ) -> Claim:
        """Count a place in `pairs` for a pod not in the book yet (see `Claim`). A new random id unless
        `claim_id` is given."""
        self.expire(now)
        claim = Claim(
            id=claim_id or secrets.token_hex(8),
            pairs=tuple(dict.fromkeys(pairs)),
            owner=owner,
            first_held=first_held,
            since=now,
            taken=taken,
        )
        self._add_claim(claim)
        return claim

    def take_owner_claim(self, owner: str, *, now: float) -> Claim | None:
        """The oldest reservation of `owner`, now taken by a pod admission lets through (it counts until
        that pod shows in the book, RESERVATION_SECONDS at most from now); None when it has none."""
        self.expire(now)
        waiting = self._owner_claims.get(owner)
        if not waiting:
            return None
        old = self._claims[waiting[0]]
        self._drop_claim(old.id)
        taken = Claim(
            id=old.id, pairs=old.pairs, owner=old.owner, first_held=old.first_held, since=now, taken=True
        )
        self._add_claim(taken)
        return taken

    def evicted(self, record: PodRecord, *, now: float) -> Claim | None:
        """The held pod of `record` was evicted: it leaves the book (if the book still has it: the watch
        may have removed it first), and its place becomes a reservation for its owner's replacement,
        carrying when the pod's hold began. A pod without an owner frees its place (None)."""
        current = self._records.get(record.key)
        if current is not None and current.uid == record.uid:
            self.remove(*record.key)
        if not record.owner:
            return None
        return self.claim(
            pairs=record.pacer_groups + record.bypassed_groups,
            owner=record.owner,
            first_held=record.created,
            now=now,
            taken=False,
        )

    def _add_claim(self, claim: Claim) -> None:
        self._claims[claim.id] = claim
        self._claim_order.add((claim.since, claim.id))
        if not claim.taken:
            self._owner_claims.setdefault(claim.owner, []).append(claim.id)
        for pair in claim.pairs:
            state = self._pairs.get(pair)
            if state is None:
                state = self._pairs[pair] = _PairState()
            state.claimed += 1

    def _drop_claim(self, claim_id: str) -> None:
        claim = self._claims.pop(claim_id)
        self._claim_order.remove((claim.since, claim_id))
        if not claim.taken:
            waiting = self._owner_claims[claim.owner]
            waiting.remove(claim_id)
            if not waiting:
                del self._owner_claims[claim.owner]
        for pair in claim.pairs:
            state = self._pairs[pair]
            state.claimed -= 1
            if state.empty():
                del self._pairs[pair]

    # --- the indexes --------------------------------------------------------------------------------

    def _forget_reservation(self, key: PodKey, reserved_at: float) -> None:
        del self._reservations[key]
        self._reservation_order.remove((reserved_at, key))

    def _index(self, record: PodRecord, *, reserved: bool) -> None:
        self._apply(record, reserved=reserved, add=True)

    def _unindex(self, record: PodRecord, *, reserved: bool) -> None:
        self._apply(record, reserved=reserved, add=False)

    def _apply(self, record: PodRecord, *, reserved: bool, add: bool) -> None:
        phase = phase_of(record)
        key = record.key
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
