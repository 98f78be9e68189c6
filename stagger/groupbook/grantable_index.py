"""The grantable set kept up to date pair by pair: the answer of `decisions.grantable`, without recomputing
every pair at every change.

At 5,000 nodes and 15,000 groups the leader's book changes some 500 times a second, and recomputing the
set over every group with held pods at each change took a third of the controller's CPU (tests/benchmarks
REPORT.md, section 5). Here a pair is recomputed only when the book marks it changed (a pod of it added,
changed, reserved or gone; a claim counted in it) or when its answer changes with time alone (a start-up
passes startTimeout, a held pod reaches maxBlockedDuration: `PairGrants.due`, kept in a heap). `update`
also says which pods became grantable, so that only the long polls waiting for those are woken.

Pure: data and functions of the book, the policies and `now`; no I/O, no asyncio.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from stagger.groupbook.book import GroupBook
from stagger.groupbook.decisions import (
    DEFAULT_MAX_WAIT,
    NOTHING,
    PairGrants,
    paced_in_full,
    pair_grants,
    unpaced,
)
from stagger.groupbook.records import PodKey
from stagger.matching import Pair
from stagger.policy import StaggeringPolicy

__all__ = ["GrantableIndex"]


class GrantableIndex:
    """The set `decisions.grantable(book, policies, now)` would return, brought up to date by `update`."""

    def __init__(self) -> None:
        self._pairs: dict[Pair, PairGrants] = {}
        self._admitting: dict[PodKey, int] = {}  # pairs whose pacer admits the pod now
        self._releasing: dict[PodKey, int] = {}  # pairs that release it (maxBlockedDuration)
        self._paced: set[PodKey] = set()  # admitted by every pair it waits for, or released by one
        self._unpaced: set[PodKey] = set()  # `decisions.unpaced`
        self._due: dict[Pair, float] = {}
        self._timers: list[tuple[float, Pair]] = []  # (due, pair), with stale entries skipped
        self._sorted: list[PodKey] | None = None

    def __contains__(self, key: object) -> bool:
        return key in self._paced or key in self._unpaced

    def keys(self, book: GroupBook) -> list[PodKey]:
        """The grantable pods, oldest first (as of the last `update`; sorted once per change of the set)."""
        if self._sorted is None:
            records = book._records
            self._sorted = sorted(self._paced | self._unpaced, key=lambda key: (records[key].created, key))
        return list(self._sorted)

    def next_due(self) -> float | None:
        """When the set next changes with time alone, if nothing else changes (None: not by time)."""
        while self._timers and self._due.get(self._timers[0][1]) != self._timers[0][0]:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def update(
        self,
        book: GroupBook,
        *,
        policies: Mapping[str, StaggeringPolicy],
        now: float,
        everything: bool = False,
        max_wait: float = DEFAULT_MAX_WAIT,
    ) -> set[PodKey]:
        """Recompute the pairs the book changed since the last update and those due by `now` (every pair
        with `everything`: after the policies or `max_wait`, the hold of a "never" policy, changed).
        Returns the pods that became grantable."""
        book.expire(now)
        pairs, touched = book.take_changed()  # a pod's pairs may change while each pair's answer stays
        if everything:
            pairs.update(self._pairs, book._pairs)
        while self._timers and self._timers[0][0] <= now:
            due, pair = heapq.heappop(self._timers)
            if self._due.get(pair) == due:
                del self._due[pair]
                pairs.add(pair)
        for pair in pairs:
            self._recompute(
                book, pair, policy=policies.get(pair[0]), now=now, touched=touched, max_wait=max_wait
            )
        became: set[PodKey] = set()
        if touched:
            self._sorted = None  # a pod's creation time may have changed (recreated under its name)
        for key in touched:
            paced = self._releasing.get(key, 0) > 0 or paced_in_full(
                book, key, admitting=self._admitting.get(key, 0)
            )
            if paced and key not in self._paced:
                self._paced.add(key)
                became.add(key)
            elif not paced and key in self._paced:
                self._paced.discard(key)
        extras = unpaced(book)
        if extras != self._unpaced:
            became.update(extras - self._unpaced - self._paced)
            self._unpaced = extras
            self._sorted = None
        if became:
            self._sorted = None
        return became  # (a pod that was grantable already may be among them: waking it again is harmless)

    def _recompute(
        self,
        book: GroupBook,
        pair: Pair,
        *,
        policy: StaggeringPolicy | None,
        now: float,
        touched: set[PodKey],
        max_wait: float,
    ) -> None:
        old = self._pairs.pop(pair, NOTHING)
        new = pair_grants(book, pair, policy=policy, now=now, max_wait=max_wait)
        if new is not NOTHING:
            self._pairs[pair] = new
        for counter, before, after in (
            (self._admitting, old.admitted, new.admitted),
            (self._releasing, old.released, new.released),
        ):
            if before == after:
                continue
            for key in before:
                left = counter[key] - 1
                if left:
                    counter[key] = left
                else:
                    del counter[key]
            for key in after:
                counter[key] = counter.get(key, 0) + 1
            touched.update(before)
            touched.update(after)
        if new.due is None:
            self._due.pop(pair, None)
        elif self._due.get(pair) != new.due:
            self._due[pair] = new.due
            heapq.heappush(self._timers, (new.due, pair))
