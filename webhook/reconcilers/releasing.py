"""What the leader's reconcilers share (gate mode: `webhook.reconcilers.gates`, evict mode: `webhook.reconcilers.evictions`): while
this replica grants, whenever the book changes (and every RECHECK_SECONDS, as room also changes with time
alone), the held pods the pacers allow that this reconciler handles are reserved (`Pacing.grant`) and
released, one task per pod, at most MAX_IN_FLIGHT at once, never two for the same pod."""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Callable, Sequence

from stagger.groupbook import PodKey, PodRecord
from webhook.groups.pacing import RECHECK_SECONDS, Pacing

__all__ = ["MAX_IN_FLIGHT", "Releaser"]

# Releases in flight at once: enough to release a large group quickly, few enough to be polite to the API server.
MAX_IN_FLIGHT = 16


class Releaser(abc.ABC):
    """Subclasses say which held pods they release (`handles`) and how (`release`)."""

    verb = "release"  # names the tasks: "<verb> <namespace>/<name>"

    def __init__(self, *, pacing: Pacing, counted: Callable[[str], None]) -> None:
        self._pacing = pacing
        self._counted = counted  # each grant decision, by basis (the grant API's metric)
        self._in_flight: set[PodKey] = set()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()

    @abc.abstractmethod
    def handles(self, record: PodRecord) -> bool:
        """Whether this reconciler releases this held pod (gated, or held for eviction), now."""

    @abc.abstractmethod
    async def release(self, record: PodRecord, reason: str) -> None:
        """Release the reserved pod; on failure, take its reservation back (`book.unreserve`)."""

    async def run(self) -> None:
        pacing = self._pacing
        try:
            while True:
                version = pacing.version
                if pacing.granting:
                    self._start(self._due())
                await pacing.changed(since=version, within=RECHECK_SECONDS)
        finally:
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _due(self) -> list[PodRecord]:
        book = self._pacing.book
        due: list[PodRecord] = []
        for key in self._pacing.grantable():
            record = book.get(key)
            if record is not None and key not in self._in_flight and self.handles(record):
                due.append(record)
        return due

    def _start(self, records: Sequence[PodRecord]) -> None:
        for record in records:
            decision = self._pacing.grant(namespace=record.namespace, name=record.name, uid=record.uid)
            self._counted(decision.basis)
            if not decision.granted:
                continue
            self._in_flight.add(record.key)
            task = asyncio.create_task(
                self._one(record, decision.reason), name=f"{self.verb} {record.namespace}/{record.name}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, record: PodRecord, reason: str) -> None:
        try:
            async with self._slots:
                await self.release(record, reason)
        finally:
            self._in_flight.discard(record.key)
