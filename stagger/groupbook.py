"""The group book: the controller leader's view of every pod in a staggering group, and its grant decisions.

One compact record per pod (a slotted dataclass of a few fields, never the pod object: 10,000 pods take
a few MB), indexed per (policy, grouping key) pair so that every question costs O(log n), never a scan of
all pods:

- Ready pods of the pair: a counter.
- Starting pods (granted or never held, not Ready, not finished): ordered by when they started (granted-at,
  else creation), so "started less than startTimeout ago" is one bisection whatever the timeout is.
- Waiting pods (held: the staggered label or the scheduling gate, and not granted yet), in the queue of
  every pair they wait for (not the ones they are bypassed in), oldest first.
- Reserved pods: waiting pods granted a moment ago whose grant is not on the pod yet. They count as
  starting, so two asks in a row never both get the last place; a reservation ends when the pod shows
  its grant (granted-at, label or gate gone), or after RESERVATION_SECONDS.

- Claims (evict mode): places counted as starting that no pod in the book holds yet. An owner's
  reservation is made when the leader evicts a held pod: its owner's replacement is let through at
  admission against it (`take_owner_claim`), carrying the first hold time of the chain. An admission
  claim is made when admission lets a new pod through (`admit`) before the watch has brought it. A claim
  ends when a pod carrying its id (the ticket annotation) is in the book, or after RESERVATION_SECONDS:
  an evicted pod not replaced in that time frees its place.

A finished pod counts nowhere; a deleted pod (or one being deleted) is removed from the book. Decisions
follow the pacer semantics of docs/design.md: a waiting pod may go when, for every pair it waits for, the
pacer has room and the pod is among the oldest `room` waiting pods of that pair; or when it has been held
for its maxBlockedDuration (released regardless); or when it is bypassed in every policy it is in.

Times are epoch seconds (`time.time()`), the clock of creationTimestamp and the granted-at annotation.
Pure data and functions of `now`: no I/O, no asyncio.
"""

from __future__ import annotations

import math
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from sortedcontainers import SortedList

from stagger import matching, pacers
from stagger.durations import format_duration
from stagger.matching import Pair
from stagger.names import Names
from stagger.policy import Hold, StaggeringPolicy
from stagger.timestamps import parse_rfc3339

HOLDS: Final = frozenset(get_args(Hold))
"""The hold annotation's values that mark an evict-mode hold: read from the policy's `Hold` type."""

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DENIED_RETRY_SECONDS",
    "RESERVATION_SECONDS",
    "UNKNOWN_RETRY_SECONDS",
    "AdmitDecision",
    "Basis",
    "Claim",
    "Counts",
    "Decision",
    "GroupBook",
    "PodKey",
    "PodRecord",
    "admit",
    "controller_of",
    "controller_uid",
    "decide",
    "grantable",
    "pair_label",
    "record_from_pod",
]

PodKey = tuple[str, str]
"""(namespace, name)."""

# A grant is counted without being on the pod for at most this long: enough for lockd (or the gate
# reconciler) to patch the pod and for the watch to bring the change back, short enough that a grant
# that was never recorded (lockd's patch failed) does not hold a place for long.
RESERVATION_SECONDS = 60.0
# The policy file's default, for a pair whose policy is no longer in the file.
DEFAULT_START_TIMEOUT = 300.0
# How soon a pod told "not yet" should ask again, at most; sooner when its maxBlockedDuration ends first.
DENIED_RETRY_SECONDS = 5.0
# A pod the controller's watch has not delivered yet (it was created a moment ago).
UNKNOWN_RETRY_SECONDS = 2.0
_MIN_RETRY_SECONDS = 0.5

Basis = Literal["paced", "bypassed", "maxBlocked", "notHeld", "reserved", "denied", "unknown"]
AdmitBasis = Literal["reserved", "paced", "denied", "unknown"]
_Phase = Literal["done", "ready", "waiting", "starting"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRecord:
    """What the book keeps of one pod. `pacer_groups` are the pairs whose pacers it waits for,
    `bypassed_groups` the pairs it only counts in (bypassLabelSelector matched); the two are disjoint."""

    namespace: str
    name: str
    uid: str
    pacer_groups: tuple[Pair, ...]
    bypassed_groups: tuple[Pair, ...] = ()
    held: bool = False  # the staggered label or the scheduling gate is on the pod
    created: float = 0.0  # creationTimestamp, epoch seconds: the queue order and the start of the hold
    granted_at: float | None = None  # the granted-at annotation, epoch seconds
    ready: bool = False
    finished: bool = False  # phase Succeeded or Failed
    gated: bool = False  # the scheduling gate is on the pod (gate mode)
    evict_hold: bool = False  # held at admission in evict mode (the hold annotation): released by eviction
    owner: str = ""  # the uid of its controller (ownerReferences controller=true), "" for none
    ticket: str | None = None  # the claim admission counted for it (evict mode, let through)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def bypassed(self) -> bool:
        """Bypassed in every policy it is in: it never waits, it only counts."""
        return not self.pacer_groups

    @property
    def waiting(self) -> bool:
        """Held and not granted yet: it asks its pacers."""
        return _phase(self) == "waiting"


def _phase(record: PodRecord) -> _Phase:
    if record.finished:
        return "done"
    if record.ready:
        return "ready"
    # A granted pod still carrying a label or gate (a patch half done by hand) has been granted: it starts.
    if record.held and record.granted_at is None:
        return "waiting"
    return "starting"


def _started(record: PodRecord) -> float:
    # A pod never held (bypassed) starts when it is created, as far as the pacer can tell.
    return record.created if record.granted_at is None else record.granted_at


@dataclass(frozen=True)
class Counts:
    """A pair's pods now: Ready, starting (reserved grants included), held (waiting, not reserved)."""

    ready: int
    starting: int
    held: int


@dataclass(frozen=True)
class Decision:
    """The answer to "may this pod start now?" (lockd's POST /v1/groups/grant, the gate reconciler).

    `basis` says why, for metrics and logs: `paced` (every pacer had room), `bypassed`, `maxBlocked`
    (released regardless), `notHeld` (already granted or never held), `reserved` (granted a moment ago,
    asked again), `denied`, `unknown` (not in the book yet)."""

    granted: bool
    reason: str
    retry_after: float
    basis: Basis


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A place counted as starting in `pairs` for a pod the book does not have yet (evict mode).

    `owner` (a controller's uid) and not `taken`: an owner's reservation, made by an eviction, waiting
    for the owner's replacement pod. `taken`: admission let a pod through against it (or took a free
    place for a new pod); it waits for that pod to show in the book with the ticket `id`. `first_held`:
    when the first pod of the chain was held (None: never held). `since`: when it was made or taken; it
    lapses RESERVATION_SECONDS later."""

    id: str
    pairs: tuple[Pair, ...]
    owner: str
    first_held: float | None
    since: float
    taken: bool


@dataclass(frozen=True)
class AdmitDecision:
    """Admission's question in evict mode: let a new pod through now (`admit` True, counted under
    `ticket`), or hold it. `held_since`: the first hold time to carry onto the pod (its chain's, from the
    owner's reservation), None for a new chain."""

    admit: bool
    reason: str
    basis: AdmitBasis
    ticket: str | None = None
    held_since: float | None = None


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


def pair_label(pair: Pair) -> str:
    """`image-pull[nginx:1.25]`, or just `everything` for a policy without a grouping key."""
    policy, key = pair
    return f"{policy}[{key}]" if key else policy


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
        phase = _phase(record)
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
                _change(state.starting, (_started(record), key), add=add)
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


# --- decisions ----------------------------------------------------------------------------------------


def _max_blocked(record: PodRecord, policies: Mapping[str, StaggeringPolicy]) -> tuple[float, str] | None:
    """The smallest maxBlockedDuration of the policies the pod waits for, and that policy's name."""
    known = [policies[policy] for policy, _ in record.pacer_groups if policy in policies]
    if not known:
        return None
    smallest = min(known, key=lambda policy: policy.max_blocked_duration)
    return smallest.max_blocked_duration, smallest.name


def _seconds(value: float) -> str:
    return format_duration(round(max(value, 0.0), 1))


def decide(book: GroupBook, *, policies: Mapping[str, StaggeringPolicy], key: PodKey, now: float) -> Decision:
    """May the pod `key` start now? Does not reserve: on a grant the caller calls `book.reserve(key)`.

    `policies` maps policy names to the current staggering policies; a pair whose policy is no longer in
    the file does not limit (its pods are not held back by a policy nobody can see any more)."""
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
    if record.bypassed:
        return Decision(granted=True, reason="bypassed in every policy", retry_after=0.0, basis="bypassed")
    held_for = now - record.created
    blocked = _max_blocked(record, policies)
    if blocked is not None and held_for >= blocked[0]:
        return Decision(
            granted=True,
            reason=(
                f"held {_seconds(held_for)} >= maxBlockedDuration {_seconds(blocked[0])} ({blocked[1]}): "
                "released regardless"
            ),
            retry_after=0.0,
            basis="maxBlocked",
        )
    parts: list[str] = []
    for pair in record.pacer_groups:
        policy = policies.get(pair[0])
        if policy is None:
            parts.append(f"{pair_label(pair)}: policy {pair[0]} is not in the policy file, no limit")
            continue
        counts = book._counts(pair, now=now, start_timeout=policy.start_timeout)
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
                retry_after=max(_MIN_RETRY_SECONDS, min(DENIED_RETRY_SECONDS, until_release)),
                basis="denied",
            )
        # Described as it will be with this pod started.
        starting = counts.starting + 1
        parts.append(
            f"{pair_label(pair)}: {pacers.describe(policy.pacer, ready=counts.ready, starting=starting)}"
        )
    return Decision(granted=True, reason="; ".join(parts), retry_after=0.0, basis="paced")


def admit(
    book: GroupBook,
    *,
    policies: Mapping[str, StaggeringPolicy],
    pacer_groups: Sequence[Pair],
    bypassed_groups: Sequence[Pair] = (),
    owner: str,
    now: float,
    dry_run: bool = False,
) -> AdmitDecision:
    """Evict mode, at admission: may a new pod in `pacer_groups` (counting in `bypassed_groups` too) start
    now, or is it held? On a yes the place is claimed (unless `dry_run`) and its id is the pod's ticket.

    A pod whose owner has a reservation (one of its pods was evicted to let it start) goes against it,
    whatever the pacers say now: a replacement is never held again. Any other pod goes only when every
    pacer has room and no pod of its pairs is held (held pods go first: admission does not jump the
    queue the eviction reconciler works through)."""
    book.expire(now)
    if owner and book.owner_claims(owner):
        reason = "its owner's reservation: a held pod of the same owner was evicted to let it start"
        if dry_run:
            return AdmitDecision(admit=True, reason=reason, basis="reserved")
        claim = book.take_owner_claim(owner, now=now)
        assert claim is not None  # owner_claims said there is one
        return AdmitDecision(
            admit=True, reason=reason, basis="reserved", ticket=claim.id, held_since=claim.first_held
        )
    parts: list[str] = []
    for pair in pacer_groups:
        policy = policies.get(pair[0])
        if policy is None:
            parts.append(f"{pair_label(pair)}: policy {pair[0]} is not in the policy file, no limit")
            continue
        counts = book._counts(pair, now=now, start_timeout=policy.start_timeout)
        if counts.held:
            held = f"{counts.held} {'pod' if counts.held == 1 else 'pods'}"
            return AdmitDecision(
                admit=False, reason=f"{pair_label(pair)}: {held} held longer go first", basis="denied"
            )
        room = pacers.room(policy.pacer, ready=counts.ready, starting=counts.starting)
        if room is not None and room < 1:
            text = pacers.describe(policy.pacer, ready=counts.ready, starting=counts.starting)
            return AdmitDecision(admit=False, reason=f"{pair_label(pair)}: {text}", basis="denied")
        starting = counts.starting + 1
        parts.append(
            f"{pair_label(pair)}: {pacers.describe(policy.pacer, ready=counts.ready, starting=starting)}"
        )
    reason = "; ".join(parts)
    if dry_run:
        return AdmitDecision(admit=True, reason=reason, basis="paced")
    claim = book.claim(
        pairs=tuple(pacer_groups) + tuple(bypassed_groups), owner="", first_held=None, now=now, taken=True
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


def grantable(book: GroupBook, *, policies: Mapping[str, StaggeringPolicy], now: float) -> list[PodKey]:
    """Every waiting pod that `decide` would grant now, oldest first (the gate-mode reconciler removes
    the gates of the gated ones). Does not reserve: reserve each pod you act on.

    Granting all of them together never over-grants: a pair admits only its oldest `room` unreserved
    waiting pods, so at most `room` paced grants land in any pair (pods released by maxBlockedDuration
    or bypass come on top, as they do one by one). Costs O(room + released) per pair with waiting pods,
    O(waiting) for pairs without a limit."""
    book.expire(now)
    reservations = book._reservations
    chosen = {key for key in book._unqueued if key not in reservations}
    admitted: dict[PodKey, int] = {}
    for pair, state in book._pairs.items():
        if not state.waiting:
            continue
        policy = policies.get(pair[0])
        limit: int | None = None
        if policy is not None:
            counts = book._counts(pair, now=now, start_timeout=policy.start_timeout)
            limit = pacers.room(policy.pacer, ready=counts.ready, starting=counts.starting)
            # A pod's own maxBlockedDuration is the smallest of its policies', so whatever has been held
            # this policy's long is released, and every released pod is found in the queue of the
            # policy whose deadline it passed.
            deadline = now - policy.max_blocked_duration
            for created, key in state.waiting:
                if created > deadline:
                    break
                if key not in reservations:
                    chosen.add(key)
        taken = 0
        for _, key in state.waiting:
            if limit is not None and taken >= limit:
                break
            if key in reservations:
                continue
            admitted[key] = admitted.get(key, 0) + 1
            taken += 1
    # Admitted by every pair it waits for.
    chosen.update(key for key, count in admitted.items() if count == len(book._records[key].pacer_groups))
    return sorted(chosen, key=lambda key: (book._records[key].created, key))


# --- reading pods ---------------------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def record_from_pod(
    pod: Mapping[str, Any],
    *,
    names: Names,
    policies: Mapping[str, StaggeringPolicy] | None = None,
) -> PodRecord | None:
    """The book's record of a pod as the API returns it, or None when it does not belong in the book
    (no valid group-key annotation, being deleted, no name or creation time): remove it then.

    The pairs come from the `<prefix>/group-key` annotation admission wrote (the `<prefix>/policies`
    annotation is for people). With `policies`, a pair whose policy's bypassLabelSelector matches the
    pod's labels is one it only counts in; without them, the pod waits for every pair (the safe side).
    With `policies`, a pair is kept only when its policy is in the file and selects the pod's labels:
    a pod cannot join another team's group by writing the annotation itself (admission leaves the
    annotations of a pod no policy matches alone; docs/SECURITY.md)."""
    metadata = _mapping(pod.get("metadata"))
    if metadata.get("deletionTimestamp"):
        return None
    labels = matching.pod_labels(pod)
    annotations = _mapping(metadata.get("annotations"))
    pairs = matching.parse_group_key(annotations.get(names.group_key_annotation))
    namespace, name, uid = metadata.get("namespace"), metadata.get("name"), metadata.get("uid")
    created_text = metadata.get("creationTimestamp")
    created = parse_rfc3339(created_text) if isinstance(created_text, str) else None
    if not pairs or not isinstance(namespace, str) or not isinstance(name, str) or created is None:
        return None
    waits: list[Pair] = []
    bypassed: list[Pair] = []
    for policy_name, key in pairs.items():
        # Interned: the same policy names and keys (images, say) recur on thousands of pods.
        pair = (sys.intern(policy_name), sys.intern(key))
        policy = policies.get(policy_name) if policies is not None else None
        if policies is not None and (policy is None or not policy.label_selector.matches(labels)):
            continue  # a claim no policy backs (forged, or the pod's labels changed since admission)
        bypass = policy.bypass_label_selector if policy is not None else None
        (bypassed if bypass is not None and bypass.matches(labels) else waits).append(pair)
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    gates = spec.get("schedulingGates")
    gated = isinstance(gates, Sequence) and any(
        isinstance(gate, Mapping) and gate.get("name") == names.scheduling_gate for gate in gates
    )
    granted_text = annotations.get(names.granted_at_annotation)
    held = labels.get(names.staggered_label) == "1" or gated
    if held:
        # Evict mode: a replacement held again keeps the first hold time of its chain.
        since_text = annotations.get(names.held_since_annotation)
        since = parse_rfc3339(since_text) if isinstance(since_text, str) else None
        # creationTimestamp has whole seconds; held-since (written by admission, which overwrites any
        # the pod came with) is finer, and earlier for a chain. Never later than creation's second.
        if since is not None:
            created = min(since, created + 1.0)
    ticket = annotations.get(names.ticket_annotation)
    conditions = status.get("conditions")
    ready = isinstance(conditions, Sequence) and any(
        isinstance(condition, Mapping)
        and condition.get("type") == "Ready"
        and condition.get("status") == "True"
        for condition in conditions
    )
    return PodRecord(
        namespace=sys.intern(namespace),
        name=name,
        uid=uid if isinstance(uid, str) else "",
        pacer_groups=tuple(waits),
        bypassed_groups=tuple(bypassed),
        held=held,
        created=created,
        granted_at=parse_rfc3339(granted_text) if isinstance(granted_text, str) else None,
        ready=ready,
        finished=status.get("phase") in ("Succeeded", "Failed"),
        gated=gated,
        evict_hold=held and annotations.get(names.hold_annotation) in HOLDS,
        owner=sys.intern(controller_uid(metadata)),
        ticket=ticket if isinstance(ticket, str) and ticket else None,
    )


def controller_uid(metadata: Mapping[str, Any]) -> str:
    """The uid of the object's controller (the ownerReference with controller: true), or ""."""
    owner = controller_of(metadata)
    return "" if owner is None else str(owner.get("uid") or "")


def controller_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with `controller: true`, or None."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, Sequence):
        return None
    for reference in references:
        if isinstance(reference, Mapping) and reference.get("controller") is True:
            return reference
    return None
