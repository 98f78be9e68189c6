"""`evict` mode: the leader evicts the oldest held pods as their pacers allow, with the Eviction API, so
that their owners create replacements, which admission lets through against the owner's reservation.

One eviction per release: a pod is evicted only while it is reserved for this release (`Pacing.grant`),
never while an eviction of it is in flight, and with `deleteOptions.preconditions.uid` so that a pod
recreated under the same name (a StatefulSet's) is never evicted in its place (409 instead). Once evicted,
the pod leaves the book and its place becomes its owner's reservation (`GroupBook.evicted`); late watch
events for it are ignored (`Pacing.evicted`).

Refusals: 429 (a PodDisruptionBudget, or the API server's own limits) backs off for the Retry-After the
API server names (`details.retryAfterSeconds`), else `--eviction-backoff` doubled per failure up to a
minute; 404 and 409 (the pod is gone or is another one now) free the place at once; other errors back
off likewise. No answer at all (the connection dropped, a timeout) is not a refusal: the eviction may
have been done, so the pod stays reserved and in flight, and the same eviction is sent again after the
back-off until an answer settles it (see `release`). A pod held by nodeSelector is Pending, and so is a
stub pod behind its blocking init container: the Eviction API deletes Pending pods without consulting
budgets (eviction.go canIgnorePDB), so 429s should be rare.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import aiohttp

from stagger.groupbook import Claim, PodKey, PodRecord
from stagger.kube import ApiError, RestClient
from webhook.groups.pacing import Pacing
from webhook.reconcilers.releasing import Releaser

__all__ = ["MAX_BACKOFF_SECONDS", "EvictionReconciler", "EvictionResult"]

logger = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 60.0

EvictionResult = Literal["evicted", "throttled", "gone", "error"]


@dataclass
class _Backoff:
    until: float  # monotonic
    failures: int


class EvictionReconciler(Releaser):
    """Runs while this replica leads: whenever the book changes (and every RECHECK_SECONDS, as room also
    changes with time), the held pods the pacers allow are reserved and evicted (`webhook.reconcilers.releasing`)."""

    verb = "evict"

    def __init__(
        self,
        *,
        client: RestClient,
        pacing: Pacing,
        backoff: float,
        counted: Callable[[str], None] = lambda basis: None,
        result: Callable[[EvictionResult], None] = lambda result: None,
        released: Callable[[PodRecord, str, Claim | None], None] = lambda record, reason, claim: None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(pacing=pacing, counted=counted)
        self._client = client
        self._backoff_base = backoff
        self._result = result  # each eviction, by result
        self._released = released  # an evicted pod (for its Event)
        self._monotonic = monotonic
        self._backoffs: dict[PodKey, _Backoff] = {}
        # Pods (uid -> key) whose eviction got no answer: a 404 or 409 when evicting them again means it
        # was done. They keep their reservation and are evicted again after their back-off (`_due`).
        self._unanswered: dict[str, PodKey] = {}
        # How each eviction ended, for /status: one count per result, the keys read from the type.
        self.stats: dict[EvictionResult, int] = dict.fromkeys(get_args(EvictionResult), 0)

    def _count(self, result: EvictionResult) -> None:
        """One eviction's end, in /status's counts and in the metric (`result`)."""
        self.stats[result] += 1
        self._result(result)

    def backing_off(self) -> int:
        """Held pods waiting out a refused eviction (or one that got no answer, before it is sent again)."""
        now = self._monotonic()
        return sum(1 for backoff in self._backoffs.values() if backoff.until > now)

    def handles(self, record: PodRecord) -> bool:
        if not record.evict_hold:
            return False
        backoff = self._backoffs.get(record.key)
        return backoff is None or backoff.until <= self._monotonic()

    def _due(self) -> list[PodRecord]:
        """The held pods the pacers allow, and the pods whose eviction got no answer once their back-off is
        over: those are still reserved (the pacers no longer offer them), and waiting for the reservation
        to lapse held their group's place for RESERVATION_SECONDS (a minute with nothing started in a
        group of maxConcurrent 1: found by `python -m sim chaos --seed 87`). Evicting again settles it: the
        pod goes now, or a 404 or 409 says the first eviction was done."""
        due = super()._due()
        book = self._pacing.book
        for uid, key in list(self._unanswered.items()):
            record = book.get(key)
            if record is None or record.uid != uid:
                del self._unanswered[uid]  # it left the book: its deletion was seen
            elif key not in self._in_flight and book.reserved(key) and self.handles(record):
                due.append(record)
        return due

    def _back_off(self, key: PodKey, *, retry_after: float | None) -> None:
        previous = self._backoffs.get(key)
        failures = 1 if previous is None else previous.failures + 1
        delay = min(MAX_BACKOFF_SECONDS, self._backoff_base * 2 ** (failures - 1))
        if retry_after is not None and retry_after > 0:
            delay = min(MAX_BACKOFF_SECONDS, retry_after)
        self._backoffs[key] = _Backoff(until=self._monotonic() + delay, failures=failures)

    def _refused(self, key: PodKey, result: EvictionResult, *, retry_after: float | None) -> None:
        # The place is free again at once; no change is signalled, so a pod that keeps being refused is
        # tried again after its back-off, at the next change or recheck, not in a tight loop.
        self._count(result)
        self._pacing.unreserve(key)  # nothing to take back if the watch saw the pod go already
        if result == "gone":
            self._backoffs.pop(key, None)
            return
        self._back_off(key, retry_after=retry_after)

    async def release(self, record: PodRecord, reason: str) -> None:
        key = record.key
        self._pacing.evicting(record)
        try:
            await self._client.evict(namespace=record.namespace, name=record.name, uid=record.uid or None)
        except ApiError as err:
            if err.status in (404, 409) and record.uid in self._unanswered:
                # An earlier eviction of this very pod went unanswered: it was done after all.
                self._unanswered.pop(record.uid, None)
                self._done(record, reason)
                return
            if record.uid in self._unanswered and err.status not in (404, 409):
                # Whether the unanswered eviction was done is still not known: the pod keeps its place
                # (reserved, in flight) and is evicted again after the back-off.
                result: EvictionResult = "throttled" if err.status == 429 else "error"
                self._count(result)
                self._back_off(key, retry_after=_retry_after(err) if err.status == 429 else None)
                logger.info("eviction of %s/%s, unanswered before, refused for now: %s", *key, err)
                return
            self._pacing.eviction_failed(record)
            if err.status in (404, 409):
                self._refused(key, "gone", retry_after=None)
                logger.info("%s/%s not evicted, it is gone or another pod now: %s", *key, err)
            elif err.status == 429:
                self._refused(key, "throttled", retry_after=_retry_after(err))
                logger.info("eviction of %s/%s refused for now: %s", *key, err)
            else:
                self._refused(key, "error", retry_after=None)
                logger.warning("could not evict %s/%s: %s", *key, err)
            return
        except (aiohttp.ClientError, TimeoutError) as err:
            # No answer: the API server may have evicted the pod (the connection dropped after). The pod
            # stays reserved and its eviction in flight, so that its deletion, when the watch shows it,
            # makes its owner's reservation (`Pacing.pod_deleted`); taking the place back would free it
            # for another pod and hold the replacement again (a second eviction for one release: found by
            # `python -m sim chaos`). The same eviction is sent again after the back-off (`_due`): it
            # evicts the pod if nothing happened, and a 404 or 409 then means this one was done after all.
            self._count("error")
            if record.uid:
                self._unanswered[record.uid] = key
                self._back_off(key, retry_after=None)
            logger.warning(
                "eviction of %s/%s got no answer (%s): evicting it again after the back-off unless the "
                "watch shows it was done",
                *key,
                err or type(err).__name__,
            )
            return
        self._unanswered.pop(record.uid, None)
        self._done(record, reason)

    def _done(self, record: PodRecord, reason: str) -> None:
        key = record.key
        self._backoffs.pop(key, None)
        claim = self._pacing.evicted(record)
        self._count("evicted")
        self._released(record, reason, claim)
        logger.info(
            "released %s/%s (evicted; its owner's replacement goes against reservation %s): %s",
            *key,
            claim.id if claim is not None else "none",
            reason,
        )


def _retry_after(err: ApiError) -> float | None:
    details = err.body.get("details")
    value = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
