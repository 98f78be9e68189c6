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
    ) -> Outcome:
        """One request for a slot. `check(in_use)` asks the node throttles; `on_grant` commits them."""
        held = self.slots.get(key)
        if held is not None:
            return Granted(slot=held, new=False)
        waiter = self.queue.get(key)
        if waiter is None:
            waiter = Waiter(namespace=key[0], name=key[1], uid=uid, first_seen=now, last_seen=now)
            self.queue[key] = waiter
        waiter.last_seen = now
        if uid:
            waiter.uid = uid
        verdict = check(len(self.slots))
        head = next(iter(self.queue))
        if head != key:
            position = self.position(key) or len(self.queue)
            reason = (
                verdict.reason
                if not verdict.allowed
                else f"{position - 1} pods asked first (first come, first served)"
            )
            waiter.reason = reason
            return Denied(
                reason=reason, position=position, retry_after=verdict.retry_after, throttle=verdict.throttle
            )
        if not verdict.allowed:
            waiter.reason = verdict.reason
            return Denied(
                reason=verdict.reason, position=1, retry_after=verdict.retry_after, throttle=verdict.throttle
            )
        del self.queue[key]
        on_grant()
        slot = Slot(
            namespace=key[0],
            name=key[1],
            uid=waiter.uid,
            granted_at=now,
            granted_wall=wall,
            expires_at=now + hold_timeout,
            waited=now - waiter.first_seen,
        )
        self.slots[key] = slot
        return Granted(slot=slot, new=True)

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

    def expire(self, now: float) -> list[Slot]:
        """Ends every slot whose hold timeout has passed; returns exactly those."""
        expired = [slot for slot in self.slots.values() if slot.expires_at <= now]
        for slot in expired:
            del self.slots[(slot.namespace, slot.name)]
        return expired

    def prune_waiters(self, now: float) -> list[Waiter]:
        """Drops waiters that have not asked for `waiter_idle_timeout` and are not long-polling."""
        idle = [
            waiter
            for waiter in self.queue.values()
            if waiter.polling == 0 and now - waiter.last_seen >= self.waiter_idle_timeout
        ]
        for waiter in idle:
            del self.queue[(waiter.namespace, waiter.name)]
        return idle

    def next_deadline(self) -> float | None:
        """The earliest moment something times out on its own (a slot expiring, a waiter going idle)."""
        moments = [slot.expires_at for slot in self.slots.values()]
        moments += [w.last_seen + self.waiter_idle_timeout for w in self.queue.values() if w.polling == 0]
        return min(moments, default=None)
