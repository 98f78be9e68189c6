"""The slot ledger: who holds a start-up slot on this node and who waits for one, in what order.

Pure data and functions of `now` (a monotonic clock reading passed in by the caller): no I/O, no
asyncio, so the invariants (never more holders than the limit, first come first served, idempotent
re-asks, expiry frees exactly the expired slots) are checked by property tests.

Every operation on the queue is O(log n) in its length: a node may have thousands of waiters (a
careless Job fan-out, or a hostile pod), and each ask, release or wake-up must not cost more because
of them. The queue keeps three views of the same waiters: `queue` (lookup by pod, in arrival order),
`_order` (arrival rank, for positions) and `_eligible` (those not stepping aside for their group and
not finishing a grant: the head of this one is the next to be served).
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from sortedcontainers import SortedList

from stagger.objectnames import PodKey as PodKey
from stagger.throttles import Verdict

_Entry = tuple[int, PodKey]  # (arrival number, pod): the sort key of the queue views


@dataclass
class Slot:
    namespace: str
    name: str
    uid: str
    granted_at: float  # monotonic, for ages and expiry
    granted_wall: float  # epoch seconds, for people and for the API
    expires_at: float  # monotonic
    anonymous: bool = False
    waited: float = 0.0
    # Reserved while lockd finishes the grant (asks the group pacer, records it on the pod): it counts
    # against the limit, but the caller has not been told yes and its waiter keeps its place.
    pending: bool = False
    # Set once the pod is Ready (or gone); the slot ends then, or at minHold after the grant if later.
    release_at: float | None = None
    # Why it ends at `release_at`: the Ready condition, or lockd's own run of the pod's probe.
    release_why: str = "ready"
    # SHA-256 of the release token given with the grant: the token itself is never kept.
    token_hash: str = ""
    # Its pod was told to wait first (a StaggerWaiting Event): the grant gets a StaggerGranted Event.
    announced: bool = False
    # The listener it was asked on: "" lockd's lock port, `lockd.startuplock.VIA` pod-startup-lock's (/status).
    via: str = ""


@dataclass(slots=True)  # one per waiting pod: no __dict__ (tests/benchmarks/waiter_memory_bench.py)
class Waiter:
    namespace: str
    name: str
    uid: str
    first_seen: float
    last_seen: float
    seq: int = 0  # arrival number: the queue's order
    # Long polls in progress: a waiter that is being answered right now is never idle.
    polling: int = 0
    reason: str = ""
    # The group pacer said no: this waiter steps aside (others may go first) until then.
    blocked_until: float = 0.0
    blocked_throttle: str | None = None
    # A StaggerWaiting event was written for this wait (one per wait, never one per poll).
    announced: bool = False

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(slots=True)
class Granted:
    """Yes. A plain dataclass like `Denied` (one per granted or re-asked request), never changed."""

    slot: Slot
    new: bool
    # The release token, only on a new grant (a re-ask is answered without it: it is a secret of the caller
    # that was granted, and namespace/name are not).
    token: str | None = None


@dataclass(slots=True)
class Denied:
    """Not now. Not frozen, never changed: one is made on every denied ask, and a frozen dataclass's
    `__init__` (one `object.__setattr__` per field) cost a measurable share of the 423 path."""

    reason: str
    position: int
    retry_after: float
    throttle: str | None


@dataclass(frozen=True)
class QueueFull:
    """The node's queue is at its bound: a new waiter is turned away (HTTP 429)."""

    limit: int
    retry_after: float


@dataclass(frozen=True)
class Reserved:
    """The node allows this pod now; lockd must `confirm` or `cancel` the reservation."""

    slot: Slot


Outcome = Granted | Denied | QueueFull

# How soon a waiter turned away by a full queue should try again.
QUEUE_FULL_RETRY_SECONDS = 5.0
# The throttle name of a group pacer's "no" (lockd.clusterwatch): such waiters can be woken by the controller.
GROUP_THROTTLE: Final = "group"


def pods(count: int) -> str:
    return f"{count} pod" if count == 1 else f"{count} pods"


@dataclass
class Ledger:
    waiter_idle_timeout: float = 30.0
    slots: dict[PodKey, Slot] = field(default_factory=dict)
    # Lookup by pod; dict order is arrival order (FIFO by first ask).
    queue: dict[PodKey, Waiter] = field(default_factory=dict)
    _order: SortedList = field(default_factory=SortedList)
    _eligible: SortedList = field(default_factory=SortedList)
    # (blocked_until, seq, key): waiters stepping aside, back to `_eligible` when their time comes.
    # Entries are dropped lazily: one that no longer matches its waiter is skipped.
    _blocked: list[tuple[float, int, PodKey]] = field(default_factory=list)
    # Waiters that are not long-polling, least recently seen first: the front is the next to go idle.
    _idle: OrderedDict[PodKey, None] = field(default_factory=OrderedDict)
    # Waiters stepping aside because their group pacer said no: the controller's wait stream can wake them.
    _group_aside: dict[PodKey, None] = field(default_factory=dict)
    _arrivals: Iterator[int] = field(default_factory=itertools.count)

    # --- queue views --------------------------------------------------------------------------------

    def position(self, key: PodKey) -> int | None:
        waiter = self.queue.get(key)
        if waiter is None:
            return None
        return int(self._order.index((waiter.seq, key))) + 1

    def waiters(self, limit: int) -> list[Waiter]:
        """The first `limit` waiters in queue order."""
        return [self.queue[key] for _, key in self._order.islice(0, limit)]

    def heads(self, now: float, count: int = 1) -> list[PodKey]:
        """The waiters that would be served next (not stepping aside, not finishing a grant)."""
        self._unblock(now)
        return [key for _, key in self._eligible.islice(0, count)]

    def ahead_of(self, waiter: Waiter, now: float) -> int | None:
        """How many eligible waiters come before this one; None if it is not eligible itself."""
        self._unblock(now)
        entry = (waiter.seq, waiter.key)
        if entry not in self._eligible:
            return None
        return int(self._eligible.bisect_left(entry))

    # --- queue bookkeeping --------------------------------------------------------------------------

    def _unblock(self, now: float) -> None:
        while self._blocked and self._blocked[0][0] <= now:
            until, seq, key = heapq.heappop(self._blocked)
            waiter = self.queue.get(key)
            if waiter is None or waiter.seq != seq or waiter.blocked_until != until:
                continue  # stale: the waiter left, or stepped aside again since
            self._group_aside.pop(key, None)
            held = self.slots.get(key)
            if held is None:
                self._eligible.add((seq, key))

    def _enqueue(self, key: PodKey, uid: str, now: float) -> Waiter:
        waiter = Waiter(
            namespace=key[0], name=key[1], uid=uid, first_seen=now, last_seen=now, seq=next(self._arrivals)
        )
        self.queue[key] = waiter
        entry = (waiter.seq, key)
        self._order.add(entry)
        self._eligible.add(entry)
        self._idle[key] = None
        return waiter

    def _touch(self, waiter: Waiter, now: float) -> None:
        waiter.last_seen = now
        if waiter.polling == 0:
            self._idle[waiter.key] = None
            self._idle.move_to_end(waiter.key)

    def leave_queue(self, key: PodKey) -> Waiter | None:
        waiter = self.queue.pop(key, None)
        if waiter is None:
            return None
        entry = (waiter.seq, key)
        self._order.remove(entry)
        self._eligible.discard(entry)
        self._idle.pop(key, None)
        self._group_aside.pop(key, None)
        return waiter

    def start_polling(self, key: PodKey) -> Waiter | None:
        waiter = self.queue.get(key)
        if waiter is not None:
            waiter.polling += 1
            self._idle.pop(key, None)
        return waiter

    def stop_polling(self, waiter: Waiter, now: float) -> None:
        waiter.polling -= 1
        if waiter.polling <= 0 and self.queue.get(waiter.key) is waiter:
            waiter.polling = 0
            self._touch(waiter, now)

    # --- asking -------------------------------------------------------------------------------------

    def ask(
        self,
        *,
        key: PodKey,
        uid: str,
        now: float,
        wall: float,
        hold_timeout: float,
        verdict: Verdict,
        reserve: bool = False,
        max_queue: int | None = None,
        via: str = "",
    ) -> Outcome | Reserved:
        """One request for a slot, with the node checks' `verdict` on one more slot now (the caller commits
        them when the answer is a new grant or a reservation).

        The oldest waiter that is not stepping aside for its group pacer goes first. With `reserve`,
        a pod the node allows gets a pending slot (counted, not yet granted) to confirm or cancel.
        A new waiter is turned away when `max_queue` pods are already waiting.
        """
        self._unblock(now)
        held = self.slots.get(key)
        if held is not None and not held.pending:
            return Granted(slot=held, new=False)
        waiter = self.queue.get(key)
        if waiter is None:
            if max_queue is not None and len(self.queue) >= max_queue:
                return QueueFull(limit=max_queue, retry_after=QUEUE_FULL_RETRY_SECONDS)
            waiter = self._enqueue(key, uid, now)
        self._touch(waiter, now)
        if uid:
            waiter.uid = uid
        position = int(self._order.index((waiter.seq, key))) + 1
        if held is not None:
            return Denied(reason="finishing the grant", position=position, retry_after=0.5, throttle=None)
        if waiter.blocked_until > now:
            return Denied(
                reason=waiter.reason,
                position=position,
                retry_after=waiter.blocked_until - now,
                throttle=waiter.blocked_throttle,
            )
        ahead = int(self._eligible.bisect_left((waiter.seq, key)))
        if ahead:
            reason = (
                verdict.reason
                if not verdict.allowed
                else f"{pods(ahead)} asked first (first come, first served)"
            )
            waiter.reason = reason
            # Queued behind others: only the head's answer changes with time, so this waiter is woken
            # when it becomes the head (throttle None), not on every load sample or token.
            return Denied(reason=reason, position=position, retry_after=verdict.retry_after, throttle=None)
        if not verdict.allowed:
            waiter.reason = verdict.reason
            return Denied(
                reason=verdict.reason,
                position=position,
                retry_after=verdict.retry_after,
                throttle=verdict.throttle,
            )
        slot = Slot(
            namespace=key[0],
            name=key[1],
            uid=waiter.uid,
            granted_at=now,
            granted_wall=wall,
            expires_at=now + hold_timeout,
            waited=now - waiter.first_seen,
            pending=reserve,
            announced=waiter.announced,
            via=via,
        )
        self.slots[key] = slot
        if reserve:
            # Keeps its place in the queue, but the next waiter is now the head.
            self._eligible.discard((waiter.seq, key))
            return Reserved(slot=slot)
        self.leave_queue(key)
        return Granted(slot=slot, new=True)

    def confirm(self, key: PodKey, *, now: float, wall: float) -> Slot | None:
        """The reservation became a grant; its clock starts now (the group call and patch took time)."""
        slot = self.slots.get(key)
        if slot is None or not slot.pending:
            return None
        slot.pending = False
        slot.expires_at += now - slot.granted_at
        slot.granted_at, slot.granted_wall = now, wall
        waiter = self.leave_queue(key)
        if waiter is not None:
            slot.waited = now - waiter.first_seen
        return slot

    def cancel(
        self, key: PodKey, *, now: float, blocked_until: float, reason: str, throttle: str | None
    ) -> None:
        """The reservation did not become a grant: the slot is freed, the waiter keeps its place but
        steps aside until `blocked_until`."""
        slot = self.slots.get(key)
        if slot is not None and slot.pending:
            del self.slots[key]
        waiter = self.queue.get(key)
        if waiter is not None:
            waiter.reason = reason
            waiter.blocked_until = blocked_until
            waiter.blocked_throttle = throttle
            self._touch(waiter, now)
            entry = (waiter.seq, key)
            if blocked_until <= now:
                self._group_aside.pop(key, None)
                if entry not in self._eligible:
                    self._eligible.add(entry)
            else:
                self._eligible.discard(entry)
                heapq.heappush(self._blocked, (blocked_until, waiter.seq, key))
                if throttle == GROUP_THROTTLE:
                    self._group_aside[key] = None
                else:
                    self._group_aside.pop(key, None)

    def group_aside(self, now: float) -> list[PodKey]:
        """The waiters stepping aside for their group pacer now, in queue order."""
        self._unblock(now)
        return sorted(self._group_aside, key=lambda key: self.queue[key].seq)

    def cap_group_aside(self, until: float) -> None:
        """Every waiter stepping aside for its group asks again by `until` at the latest (the controller's
        wait stream that would have woken them is down)."""
        for key in self._group_aside:
            waiter = self.queue[key]
            if waiter.blocked_until > until:
                waiter.blocked_until = until
                heapq.heappush(self._blocked, (until, waiter.seq, key))

    def wake(self, keys: Iterable[PodKey], *, now: float) -> list[PodKey]:
        """End the step-aside of these waiters (their group has room now, says the controller); keys that
        are not stepping aside for their group are ignored. Returns the waiters woken."""
        woken: list[PodKey] = []
        for key in keys:
            if key not in self._group_aside:
                continue
            del self._group_aside[key]
            waiter = self.queue[key]
            # The heap entry goes stale (its time no longer matches) and is skipped when it comes up.
            waiter.blocked_until = now
            if key not in self.slots:
                self._eligible.add((waiter.seq, key))
            woken.append(key)
        return woken

    def take_anonymous(
        self,
        *,
        key: PodKey,
        now: float,
        wall: float,
        duration: float,
        verdict: Verdict,
        via: str = "",
    ) -> Outcome:
        """pod-startup-lock compatibility: a slot with no identity, only if nobody is queued before it and
        the node checks' `verdict` allows it. `key` is a new name (the service numbers each one): an anonymous
        caller is never answered from a slot it may hold, since callers behind one address are many."""
        if key in self.slots:
            raise ValueError(f"anonymous slot {key[1]!r} is taken already")
        if self.queue:
            return Denied(
                reason=f"{pods(len(self.queue))} waiting (first come, first served)",
                position=len(self.queue) + 1,
                retry_after=verdict.retry_after,
                throttle=verdict.throttle,
            )
        if not verdict.allowed:
            return Denied(
                reason=verdict.reason, position=1, retry_after=verdict.retry_after, throttle=verdict.throttle
            )
        slot = Slot(
            namespace=key[0],
            name=key[1],
            uid="",
            granted_at=now,
            granted_wall=wall,
            expires_at=now + duration,
            anonymous=True,
            via=via,
        )
        self.slots[key] = slot
        return Granted(slot=slot, new=True)

    def restore(self, slot: Slot) -> bool:
        """A slot granted before a restart counts again; False if the pod already holds one."""
        key = (slot.namespace, slot.name)
        if key in self.slots:
            return False
        self.slots[key] = slot
        return True

    def release(self, key: PodKey) -> Slot | None:
        return self.slots.pop(key, None)

    # --- time ---------------------------------------------------------------------------------------

    def due_releases(self, now: float) -> list[Slot]:
        """Ends the slots of pods that became Ready (or went away) once their minimum hold is over."""
        return self._end(lambda s: s.release_at is not None and s.release_at <= now)

    def expire(self, now: float) -> list[Slot]:
        """Ends every slot whose hold timeout has passed; returns exactly those."""
        return self._end(lambda s: s.expires_at <= now)

    def _end(self, over: Callable[[Slot], bool]) -> list[Slot]:
        """Ends the slots that are `over` and returns them; a pending slot (its grant not yet written) is
        never ended here."""
        ended = [slot for slot in self.slots.values() if over(slot) and not slot.pending]
        for slot in ended:
            del self.slots[(slot.namespace, slot.name)]
        return ended

    def prune_waiters(self, now: float) -> list[Waiter]:
        """Drops waiters that have not asked for `waiter_idle_timeout` and are not long-polling.

        Only the front of the idle order is looked at: the cost is the number of waiters dropped."""
        idle: list[Waiter] = []
        finishing: list[PodKey] = []
        while self._idle:
            key = next(iter(self._idle))
            waiter = self.queue[key]
            if now - waiter.last_seen < self.waiter_idle_timeout:
                break
            if key in self.slots:
                # Finishing its grant right now: not idle; looked at again after the others.
                finishing.append(key)
                self._idle.pop(key)
                continue
            idle.append(waiter)
            self.leave_queue(key)
        for key in finishing:
            self._idle[key] = None
        return idle

    def next_deadline(self) -> float | None:
        """The earliest moment something times out on its own (a slot expiring, a waiter going idle)."""
        moments = [slot.expires_at for slot in self.slots.values()]
        moments += [slot.release_at for slot in self.slots.values() if slot.release_at is not None]
        if self._idle:
            oldest = self.queue[next(iter(self._idle))]
            moments.append(oldest.last_seen + self.waiter_idle_timeout)
        return min(moments, default=None)
