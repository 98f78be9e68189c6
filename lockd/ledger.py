"""The slot ledger: who holds a start-up slot on this node and who waits for one, in what order.

Pure data and functions of `now` (a monotonic clock reading passed in by the caller): no I/O, no
asyncio, so the invariants (never more holders than the limit, first come first served, idempotent
re-asks, expiry frees exactly the expired slots) are checked by property tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stagger.throttles import Verdict

PodKey = tuple[str, str]  # (namespace, name)


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


@dataclass
class Waiter:
    namespace: str
    name: str
    uid: str
    first_seen: float
    last_seen: float
    # Long polls in progress: a waiter that is being answered right now is never idle.
    polling: int = 0
    reason: str = ""
    # The group pacer said no: this waiter steps aside (others may go first) until then.
    blocked_until: float = 0.0
    blocked_throttle: str | None = None
    # A StaggerWaiting event was written for this wait (one per wait, never one per poll).
    announced: bool = False


@dataclass(frozen=True)
class Granted:
    slot: Slot
    new: bool


@dataclass(frozen=True)
class Denied:
    reason: str
    position: int
    retry_after: float
    throttle: str | None


@dataclass(frozen=True)
class Reserved:
    """The node allows this pod now; lockd must `confirm` or `cancel` the reservation."""

    slot: Slot


Outcome = Granted | Denied


@dataclass
class Ledger:
    waiter_idle_timeout: float = 30.0
    slots: dict[PodKey, Slot] = field(default_factory=dict)
    # dict keeps insertion order: the queue is FIFO by first ask.
    queue: dict[PodKey, Waiter] = field(default_factory=dict)

    def position(self, key: PodKey) -> int | None:
        for index, queued in enumerate(self.queue):
            if queued == key:
                return index + 1
        return None

    def _eligible(self, waiter: Waiter, now: float) -> bool:
        held = self.slots.get((waiter.namespace, waiter.name))
        return waiter.blocked_until <= now and held is None

    def ask(
        self,
        *,
        key: PodKey,
        uid: str,
        now: float,
        wall: float,
        hold_timeout: float,
        check: Callable[[int], Verdict],
        on_grant: Callable[[], None] = lambda: None,
        reserve: bool = False,
    ) -> Outcome | Reserved:
        """One request for a slot. `check(in_use)` asks the node throttles; `on_grant` commits them.

        The oldest waiter that is not stepping aside for its group pacer goes first. With `reserve`,
        a pod the node allows gets a pending slot (counted, not yet granted) to confirm or cancel.
        """
        held = self.slots.get(key)
        if held is not None and not held.pending:
            return Granted(slot=held, new=False)
        waiter = self.queue.get(key)
        if waiter is None:
            waiter = Waiter(namespace=key[0], name=key[1], uid=uid, first_seen=now, last_seen=now)
            self.queue[key] = waiter
        waiter.last_seen = now
        if uid:
            waiter.uid = uid
        position = self.position(key) or len(self.queue)
        if held is not None:
            return Denied(reason="finishing the grant", position=position, retry_after=0.5, throttle=None)
        if waiter.blocked_until > now:
            return Denied(
                reason=waiter.reason,
                position=position,
                retry_after=waiter.blocked_until - now,
                throttle=waiter.blocked_throttle,
            )
        verdict = check(len(self.slots))
        head = next((k for k, w in self.queue.items() if self._eligible(w, now)), key)
        if head != key:
            ahead = 0
            for other, queued in self.queue.items():
                if other == key:
                    break
                ahead += self._eligible(queued, now)
            reason = (
                verdict.reason
                if not verdict.allowed
                else f"{ahead} pods asked first (first come, first served)"
            )
            waiter.reason = reason
            return Denied(
                reason=reason, position=position, retry_after=verdict.retry_after, throttle=verdict.throttle
            )
        if not verdict.allowed:
            waiter.reason = verdict.reason
            return Denied(
                reason=verdict.reason,
                position=position,
                retry_after=verdict.retry_after,
                throttle=verdict.throttle,
            )
        on_grant()
        slot = Slot(
            namespace=key[0],
            name=key[1],
            uid=waiter.uid,
            granted_at=now,
            granted_wall=wall,
            expires_at=now + hold_timeout,
            waited=now - waiter.first_seen,
            pending=reserve,
        )
        self.slots[key] = slot
        if reserve:
            return Reserved(slot=slot)
        del self.queue[key]
        return Granted(slot=slot, new=True)

    def confirm(self, key: PodKey, *, now: float, wall: float) -> Slot | None:
        """The reservation became a grant; its clock starts now (the group call and patch took time)."""
        slot = self.slots.get(key)
        if slot is None or not slot.pending:
            return None
        slot.pending = False
        slot.expires_at += now - slot.granted_at
        slot.granted_at, slot.granted_wall = now, wall
        waiter = self.queue.pop(key, None)
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
            waiter.last_seen = now

    def take_anonymous(
        self,
        *,
        key: PodKey,
        now: float,
        wall: float,
        duration: float,
        check: Callable[[int], Verdict],
        on_grant: Callable[[], None] = lambda: None,
    ) -> Outcome:
        """pod-startup-lock compatibility: a slot with no identity, only if nobody is queued before it."""
        verdict = check(len(self.slots))
        if self.queue:
            return Denied(
                reason=f"{len(self.queue)} pods are waiting (first come, first served)",
                position=len(self.queue) + 1,
                retry_after=verdict.retry_after,
                throttle=verdict.throttle,
            )
        if not verdict.allowed:
            return Denied(
                reason=verdict.reason, position=1, retry_after=verdict.retry_after, throttle=verdict.throttle
            )
        on_grant()
        slot = Slot(
            namespace=key[0],
            name=key[1],
            uid="",
            granted_at=now,
            granted_wall=wall,
            expires_at=now + duration,
            anonymous=True,
        )
        self.slots[key] = slot
        return Granted(slot=slot, new=True)

    def release(self, key: PodKey) -> Slot | None:
        return self.slots.pop(key, None)

    def leave_queue(self, key: PodKey) -> Waiter | None:
        return self.queue.pop(key, None)

    def due_releases(self, now: float) -> list[Slot]:
        """Ends the slots of pods that became Ready (or went away) once their minimum hold is over."""
        due = [
            s
            for s in self.slots.values()
            if s.release_at is not None and s.release_at <= now and not s.pending
        ]
        for slot in due:
            del self.slots[(slot.namespace, slot.name)]
        return due

    def expire(self, now: float) -> list[Slot]:
        """Ends every slot whose hold timeout has passed; returns exactly those."""
        expired = [slot for slot in self.slots.values() if slot.expires_at <= now and not slot.pending]
        for slot in expired:
            del self.slots[(slot.namespace, slot.name)]
        return expired

    def prune_waiters(self, now: float) -> list[Waiter]:
        """Drops waiters that have not asked for `waiter_idle_timeout` and are not long-polling."""
        idle = [
            waiter
            for waiter in self.queue.values()
            if waiter.polling == 0
            and now - waiter.last_seen >= self.waiter_idle_timeout
            and (waiter.namespace, waiter.name) not in self.slots
        ]
        for waiter in idle:
            del self.queue[(waiter.namespace, waiter.name)]
        return idle

    def next_deadline(self) -> float | None:
        """The earliest moment something times out on its own (a slot expiring, a waiter going idle)."""
        moments = [slot.expires_at for slot in self.slots.values()]
        moments += [slot.release_at for slot in self.slots.values() if slot.release_at is not None]
        moments += [w.last_seen + self.waiter_idle_timeout for w in self.queue.values() if w.polling == 0]
        return min(moments, default=None)
