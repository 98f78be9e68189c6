"""The leader's group pacing state: the group book fed by the watch of enabled pods, the grant decisions
lockd asks for, and the wake-ups that let a node's long poll (`POST /v1/groups/wait`) answer as soon as
one of its held pods may go.

The decisions themselves are `stagger.groupbook` (pure); this module keeps the book between requests,
reserves what it grants, and signals every change. Every question is answered from memory: no API call.

Change signalling: each change of the book bumps `version` and sets the current `asyncio.Event`, which is
then replaced, so a waiter that looked at version N and waits on the event of version N never misses a
change (the reconcilers and the steward wait so). The nodes' long polls do not: at 5,000 nodes, waking
every one of them at each of some 500 changes a second filled the controller's loop (tests/benchmarks
REPORT.md, section 5). The grantable set is kept by `groupbook.GrantableIndex`, recomputed only for the
pairs that changed (once per loop iteration, however many changes it brought), and a long poll is woken
only when one of the pods it names becomes grantable. Pacer room also changes with time alone (a start-up
older than `startTimeout` stops counting, a pod held for `maxBlockedDuration` is released): while anyone
waits, one timer brings the set up to date when the index says it is due, and at least every
`RECHECK_SECONDS`.

Evict mode's claims lapse with time too: a claim admission took lapses unless the watch brings its pod
within `claim_confirm_timeout` (`GroupBook.expire`), and an owner's reservation after
RESERVATION_SECONDS. One timer, armed for the book's next lapse, lets them lapse on time whether anyone
asks or not, and signals the change, so the place goes back to the group at once: a pod held meanwhile is
released (evicted) as soon as the pacer has room. Each claim that lapsed unconfirmed is counted
(`lapsed`: the controller's `stagger_controller_claims_lapsed_total`).

Ready to grant (`stagger_controller_grant_latency_seconds`): the watch stamps each change with the
controller's own clock (`monotonic`); a pod turning Ready stamps its pairs (their allowance grew:
`readied_pairs`). When the index next brings the grantable set up to date, each held pod that became
grantable then, in a pair so stamped since the last update, is remembered with that stamp (the latest
of its pairs'): a Ready made room for it. The wait handler takes the stamp when it grants the pod in an
answer (`take_freed`) and observes the time since. A pod that became grantable otherwise (it had room
when it came, a start-up passed startTimeout, a pod was deleted, a reservation lapsed) has no stamp.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stagger import groupbook, pacers
from stagger.groupbook import AdmitDecision, Claim, Decision, GrantableIndex, GroupBook, PodKey, PodRecord
from stagger.groupbook.decisions import DEFAULT_MAX_WAIT
from stagger.matching import Pair
from stagger.names import Names
from stagger.policy import StaggeringPolicy
from stagger.waiting import wait_event

__all__ = ["RECHECK_SECONDS", "GroupRow", "Pacing", "group_rows", "readied_pairs"]

logger = logging.getLogger(__name__)

# How often the grantable set is brought up to date at least while anyone waits, when nothing changes
# (time-based room: startTimeout, maxBlockedDuration; the index names the next such moment, this bounds it).
RECHECK_SECONDS = 1.0
# How long an evicted pod's uid is remembered, so that a stale watch event (one from before the eviction,
# delivered late) cannot bring it back into the book as held and get it evicted twice.
EVICTED_MEMORY_SECONDS = 600.0


@dataclass(frozen=True)
class GroupRow:
    """One (policy, key) pair as `/status` shows it."""

    policy: str
    key: str
    ready: int
    starting: int
    held: int
    limit: int | None  # pods that may be started (Ready + starting) now; None: no limit
    pacer: str
    mode: str


def group_rows(book: GroupBook, *, policies: Mapping[str, StaggeringPolicy], now: float) -> list[GroupRow]:
    """Every pair of the book with its counts and the pacer's allowance now, by policy then key. Pure."""
    rows: list[GroupRow] = []
    timeouts = {name: policy.start_timeout for name, policy in policies.items()}
    for pair in sorted(book.pairs()):
        counts = book.counts(pair, now=now, start_timeouts=timeouts)
        policy = policies.get(pair[0])
        rows.append(
            GroupRow(
                policy=pair[0],
                key=pair[1],
                ready=counts.ready,
                starting=counts.starting,
                held=counts.held,
                limit=None if policy is None else pacers.allowance(policy.pacer, ready=counts.ready),
                pacer="not in the policy file" if policy is None else pacers.name(policy.pacer),
                mode="?" if policy is None else policy.mode,
            )
        )
    return rows


def readied_pairs(old: PodRecord | None, new: PodRecord) -> tuple[Pair, ...]:
    """The pairs whose Ready count grows when the pod's record goes from `old` to `new` (None: new in
    the book): all the pairs it counts in, when it turns Ready (and has not finished); else none. Pure."""
    if not new.ready or new.finished or (old is not None and old.ready and not old.finished):
        return ()
    return new.pacer_groups + new.bypassed_groups


@dataclass
class Pacing:
    """The book, the policies, and who may be told what. `granting` is False until this replica leads
    and its watch has listed every enabled pod (counts rebuilt from the API); until then every grant
    question is refused by the HTTP layer (503)."""

    names: Names
    policies: dict[str, StaggeringPolicy]
    clock: Callable[[], float] = time.time
    # Evict mode: how long a claim admission took waits for its pod to show in the watch.
    claim_confirm_timeout: float = groupbook.CLAIM_CONFIRM_SECONDS
    # The controller's maxWait (the init clients' bound): how long a "never" policy's pod is held at most.
    max_wait: float = DEFAULT_MAX_WAIT
    # Called with how many claims lapsed unconfirmed (the controller counts them in a metric).
    lapsed: Callable[[int], None] = lambda count: None
    # The controller's own clock for the Ready-to-grant latency (the book's `clock` is the pods' wall time).
    monotonic: Callable[[], float] = time.monotonic
    book: GroupBook = field(default_factory=GroupBook)
    granting: bool = False
    version: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _index: GrantableIndex = field(default_factory=GrantableIndex)
    _rebuild: bool = False  # the policies changed: every pair is recomputed
    _waiters: int = 0
    # The long polls waiting now: each one's event, under every pod it names.
    _waits: set[asyncio.Event] = field(default_factory=set)
    _watchers: dict[PodKey, set[asyncio.Event]] = field(default_factory=dict)
    _refresh_soon: asyncio.Handle | None = None
    _ticker: asyncio.TimerHandle | None = None
    # Evictions in flight (uid -> the record as evicted) and done (uid -> when, and the owner's claim).
    _evicting: dict[str, PodRecord] = field(default_factory=dict)
    _evicted: dict[str, tuple[float, Claim | None]] = field(default_factory=dict)
    # The lapses of claims: the book's count last seen, and the timer armed for the next one (and when).
    _lapsed_seen: int = 0
    _lapse_timer: asyncio.TimerHandle | None = None
    _lapse_at: float | None = None
    # Pairs whose Ready count grew since the index was last brought up to date, with when (`monotonic`);
    # and the held pods a Ready made grantable, with that Ready's stamp, until granted or gone.
    _readied: dict[Pair, float] = field(default_factory=dict)
    _freed: dict[PodKey, float] = field(default_factory=dict)

    # --- the watch ----------------------------------------------------------------------------------

    def pod_changed(self, pod: Mapping[str, Any], *, seen: float | None = None) -> None:
        """A pod from the watch (ADDED, MODIFIED): its record replaces the old one, or it leaves the
        book when it no longer belongs there (being deleted, no group-key annotation). `seen`: when the
        watch delivered it (`monotonic`), for the Ready-to-grant latency; None: not a change to time
        (the first list, a policy reload)."""
        record = groupbook.record_from_pod(pod, names=self.names, policies=self.policies)
        if record is None or (record.uid and record.uid in self._evicted):
            self.pod_deleted(pod)
            return
        old = self.book.get(record.key)
        if old == record:
            return
        if seen is not None:
            for pair in readied_pairs(old, record):
                self._readied[pair] = seen
        self.book.upsert(record)
        if not record.waiting:
            self._freed.pop(record.key, None)
        self._bump()

    def pod_deleted(self, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        evicting = self._evicting.get(str(metadata.get("uid") or ""))
        if evicting is not None:
            # The watch shows the eviction (deletionTimestamp, or the pod gone) before the Eviction API's
            # answer came: the real API server usually sends it first. The place goes to the owner now,
            # so it is never free in between.
            self._hand_to_owner(evicting)
            return
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        known = self.book.get(key)
        if known is not None and metadata.get("uid") and known.uid != metadata.get("uid"):
            return  # an older pod of that name (evicted, say): the one in the book is another
        if key in self.book:
            self.book.remove(*key)
            self._freed.pop(key, None)
            self._bump()

    def replace_policies(
        self,
        policies: Sequence[StaggeringPolicy],
        pods: Iterable[Mapping[str, Any]],
        *,
        max_wait: float | None = None,
    ) -> None:
        """A reloaded policy file: bypass selectors may have changed, so every record is read again.
        `max_wait`: the controller's maxWait for it (None: unchanged)."""
        self.policies = {policy.name: policy for policy in policies}
        if max_wait is not None:
            self.max_wait = max_wait
        self._rebuild = True
        for pod in pods:
            self.pod_changed(pod)
        self._bump()

    # --- questions ----------------------------------------------------------------------------------

    def grant(self, *, namespace: str, name: str, uid: str) -> Decision:
        """lockd asks for one pod: the decision, and on a grant of a held pod its reservation, so that
        the next ask (from any node) already counts it."""
        key = (namespace, name)
        now = self.clock()
        known = self.book.get(key)
        if known is not None and uid and known.uid != uid:
            # Same name, another pod (a StatefulSet pod recreated): the new one is not in the book yet.
            decision = Decision(
                granted=False,
                reason="the controller has not seen this pod yet (another pod of that name is in the book)",
                retry_after=groupbook.UNKNOWN_RETRY_SECONDS,
                basis="unknown",
            )
        else:
            decision = groupbook.decide(
                self.book, policies=self.policies, key=key, now=now, max_wait=self.max_wait
            )
        if decision.granted and self.book.reserve(key, now=now):
            self._bump()
        self._settle()
        return decision

    def granted_already(self, keys: Sequence[PodKey], *, uids: Mapping[PodKey, str]) -> dict[PodKey, float]:
        """The pods among `keys` granted but not started yet, with the seconds their reservations have left: a
        node that names such a pod in its wait never read the answer that granted it (the wait was replaced
        as it came), and gets the same grant again instead of the pod's place being held for nobody."""
        now = self.clock()
        again: dict[PodKey, float] = {}
        for key in keys:
            left = self.book.reservation_left(key, now=now)
            record = self.book.get(key)
            if left is not None and record is not None and uids.get(key, record.uid) == record.uid:
                again[key] = left
        return again

    def admit(
        self,
        *,
        pacer_groups: Sequence[Pair],
        bypassed_groups: Sequence[Pair],
        owner: str,
        dry_run: bool,
    ) -> AdmitDecision:
        """Evict mode, at admission: let a new pod through now (its place claimed) or hold it.

        A pod of an owner whose held pod is being evicted, with neither the Eviction API's answer nor the
        watch's deletion in yet, is that pod's replacement: its owner's controller makes one only once the
        pod is going. The eviction counts as done now, so the replacement goes against its owner's
        reservation instead of being decided by the pacers (on a busy leader the replacement's admission
        can come first: decided as a new pod it would pass too, and the owner's reservation would then hold
        a place nobody uses until it lapses)."""
        if owner and not dry_run and not self.book.owner_claims(owner):
            going = next((r for r in self._evicting.values() if r.owner == owner), None)
            if going is not None:
                self._hand_to_owner(going)
        decision = groupbook.admit(
            self.book,
            policies=self.policies,
            pacer_groups=pacer_groups,
            bypassed_groups=bypassed_groups,
            owner=owner,
            now=self.clock(),
            dry_run=dry_run,
            confirm_within=self.claim_confirm_timeout,
        )
        if decision.admit and not dry_run:
            self._bump()
        self._settle()
        return decision

    def unreserve(self, key: PodKey) -> None:
        """Take back a grant that could not be put on its pod (`GroupBook.unreserve`): its place is free again
        at once, and the waits for the pods that may now go are woken."""
        self.book.unreserve(key)
        self._bump()

    def evicting(self, record: PodRecord) -> None:
        """An eviction of this pod is about to be sent (the pod is reserved)."""
        if record.uid:
            self._evicting[record.uid] = record

    def eviction_failed(self, record: PodRecord) -> None:
        """The Eviction API refused (or could not be reached). If the watch already showed the pod going,
        its place stays its owner's reservation."""
        self._evicting.pop(record.uid, None)

    def evicted(self, record: PodRecord) -> Claim | None:
        """The Eviction API evicted the pod: its place is now its owner's reservation (see
        GroupBook.evicted), made here or already when the watch showed the pod going; and the pod is never
        taken back into the book, whatever late event arrives for it."""
        done = self._evicted.get(record.uid)
        if done is not None:
            self._evicting.pop(record.uid, None)
            return done[1]
        return self._hand_to_owner(record)

    def _hand_to_owner(self, record: PodRecord) -> Claim | None:
        """The evicted pod's place becomes its owner's claim (`GroupBook.evicted`), remembered by the pod's
        uid for `EVICTED_MEMORY_SECONDS` so that a late event of the pod does not take it back."""
        now = self.clock()
        self._evicting.pop(record.uid, None)
        for uid, (when, _) in list(self._evicted.items()):
            if when > now - EVICTED_MEMORY_SECONDS:
                break  # insertion order is time order
            del self._evicted[uid]
        claim = self.book.evicted(record, now=now)
        self._freed.pop(record.key, None)
        if record.uid:
            self._evicted[record.uid] = (now, claim)
        self._bump()
        return claim

    def take_freed(self, key: PodKey) -> float | None:
        """When the Ready that made this held pod grantable was seen (`monotonic`), forgotten as it is
        read: call it once the pod is granted. None when no Ready made its room (see the module)."""
        return self._freed.pop(key, None)

    def grantable(self) -> tuple[PodKey, ...]:
        """The held pods that may go now, oldest first."""
        return tuple(self._current().keys(self.book))

    def _current(self) -> GrantableIndex:
        """The index, brought up to date if the book changed or time-based room is due."""
        due = self._index.next_due()
        # The book marks every change it takes (GroupBook.has_changes); time alone is the index's due.
        if self._rebuild or self.book.has_changes() or (due is not None and due <= self.clock()):
            self._refresh()
        return self._index

    def _refresh(self) -> None:
        if self._refresh_soon is not None:
            self._refresh_soon.cancel()  # done now (a no-op when this is that call)
            self._refresh_soon = None
        everything, self._rebuild = self._rebuild, False
        readied, self._readied = self._readied, {}  # the Readies this update takes in
        became = self._index.update(
            self.book, policies=self.policies, now=self.clock(), everything=everything, max_wait=self.max_wait
        )
        for key in became:
            self._note_freed(key, readied)
            for event in self._watchers.get(key, ()):
                event.set()

    def _note_freed(self, key: PodKey, readied: Mapping[Pair, float]) -> None:
        """Remember when the Ready that made `key` grantable was seen: the latest of the pairs it waits
        for that turned a pod Ready since the last update (the one whose room it waited for last, as a
        rule). Forgotten when none did: its room came otherwise."""
        record = self.book.get(key)
        stamps = [readied[pair] for pair in record.pacer_groups if pair in readied] if record else []
        if stamps and record is not None and record.waiting:
            self._freed[key] = max(stamps)
        else:
            self._freed.pop(key, None)

    async def wait_grantable(self, keys: Sequence[PodKey], *, within: float) -> list[PodKey]:
        """The pods among `keys` that may go now; if none, waits (at most `within` seconds) until one may.
        Returns [] when that time is up, or as soon as this replica stops granting. Woken only when one of
        `keys` becomes grantable (or granting stops), not at every change of the book."""
        deadline = time.monotonic() + within
        event = asyncio.Event()
        self._waiters += 1
        self._waits.add(event)
        for key in keys:
            self._watchers.setdefault(key, set()).add(event)
        self._tick_soon()
        try:
            while self.granting:
                event.clear()
                index = self._current()
                found = [key for key in keys if key in index]
                if found:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                await wait_event(event, within=remaining)
            return []
        finally:
            self._waiters -= 1
            self._waits.discard(event)
            for key in keys:
                watching = self._watchers.get(key)
                if watching is not None:
                    watching.discard(event)
                    if not watching:
                        del self._watchers[key]

    def _tick_soon(self) -> None:
        """While anyone waits, bring the set up to date when time alone changes it (at least every
        RECHECK_SECONDS): one update for all the waiters, which wakes only those whose pods may go."""
        if self._ticker is not None or not self._waits:
            return
        due = self._index.next_due()
        # At least 10 ms: a due time a float's rounding away from now must not spin the loop.
        delay = RECHECK_SECONDS if due is None else min(RECHECK_SECONDS, max(0.01, due - self.clock()))
        self._ticker = asyncio.get_running_loop().call_later(delay, self._tick)

    def _tick(self) -> None:
        self._ticker = None
        if self._waits:
            self._refresh()
            self._tick_soon()

    @property
    def waiters(self) -> int:
        """Long polls waiting now (one per node with held pods, usually)."""
        return self._waiters

    def set_granting(self, granting: bool) -> None:
        if granting != self.granting:
            self.granting = granting
            self._bump()
            for event in self._waits:
                event.set()  # they answer [] at once

    def rows(self) -> list[GroupRow]:
        return group_rows(self.book, policies=self.policies, now=self.clock())

    # --- signalling ---------------------------------------------------------------------------------

    def _bump(self) -> None:
        self.version += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        if self._watchers and self._refresh_soon is None:
            # Once per loop iteration, however many changes it brings (a watch event, a grant).
            self._refresh_soon = asyncio.get_running_loop().call_soon(self._refresh)
        self._arm_lapse()

    def _settle(self) -> None:
        """Count the claims the book let lapse unconfirmed since the last look (any question may have
        let them lapse), and signal the places they gave back."""
        lapsed = self.book.claims_lapsed - self._lapsed_seen
        if lapsed:
            self._lapsed_seen = self.book.claims_lapsed
            logger.debug("%d claims lapsed: their pods never showed in the watch", lapsed)
            self.lapsed(lapsed)
            self._bump()

    def _arm_lapse(self) -> None:
        """Arm the timer for the book's next lapse, unless one is armed for it or earlier. O(1)."""
        due = self.book.next_lapse()
        if due is None or (
            self._lapse_timer is not None and self._lapse_at is not None and self._lapse_at <= due
        ):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test of the state alone): nobody waits to be woken
        if self._lapse_timer is not None:
            self._lapse_timer.cancel()
        self._lapse_at = due
        # At least 10 ms: a due time a float's rounding away from now must not spin the loop.
        self._lapse_timer = loop.call_later(max(0.01, due - self.clock()), self._lapse_due)

    def _lapse_due(self) -> None:
        self._lapse_timer = self._lapse_at = None
        self.book.expire(self.clock())
        self._settle()
        # An owner's reservation that lapsed is not counted (it was not a review's), but its place is free.
        self._bump()

    async def changed(self, *, since: int, within: float) -> None:
        """Returns when the book has changed since `since` (a `version` read before), or after `within` seconds."""
        if self.version != since:
            return
        await wait_event(self._changed, within=within)
