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
  ends when a pod carrying its id (the ticket annotation) is in the book, or when it lapses: an owner's
  reservation RESERVATION_SECONDS after the eviction (an evicted pod not replaced in that time frees its
  place), a claim admission took after the confirm timeout (CLAIM_CONFIRM_SECONDS by default), since
  admission takes no credentials and the review may name a pod that is never created. An owner's
  reservation taken by such a review is the owner's again when the taken claim lapses. A replacement held anyway (admission got no
  answer from the leader) goes against its owner's reservation (`owner_claim`): reserving it takes the
  reservation, and its eviction makes the owner's next one, so a place is never counted twice.

A finished pod counts nowhere; a deleted pod (or one being deleted) is removed from the book. Decisions
follow the pacer semantics of docs/design.md: a waiting pod may go when, for every pair it waits for, the
pacer has room and the pod is among the oldest `room` waiting pods of that pair; or when it has been held
for its maxBlockedDuration (released regardless); or when it is bypassed in every policy it is in.

Times are epoch seconds (`time.time()`), the clock of creationTimestamp and the granted-at annotation.
Pure data and functions of `now`: no I/O, no asyncio.

The parts: the records and constants (`records`), the indexed book (`book`), its decisions (`decisions`),
the grantable set kept up to date pair by pair (`grantable_index`), and reading pods into records (`pods`).
This package's names are their public API.
"""

from __future__ import annotations

from stagger.groupbook.book import GroupBook
from stagger.groupbook.decisions import admit, decide, grantable
from stagger.groupbook.grantable_index import GrantableIndex
from stagger.groupbook.pods import controller_of, controller_uid, record_from_pod
from stagger.groupbook.records import (
    CLAIM_CONFIRM_SECONDS,
    DEFAULT_START_TIMEOUT,
    DENIED_RETRY_SECONDS,
    RESERVATION_SECONDS,
    UNKNOWN_RETRY_SECONDS,
    AdmitDecision,
    Basis,
    Claim,
    Counts,
    Decision,
    PodKey,
    PodRecord,
    pair_label,
)

__all__ = [
    "CLAIM_CONFIRM_SECONDS",
    "DEFAULT_START_TIMEOUT",
    "DENIED_RETRY_SECONDS",
    "RESERVATION_SECONDS",
    "UNKNOWN_RETRY_SECONDS",
    "AdmitDecision",
    "Basis",
    "Claim",
    "Counts",
    "Decision",
    "GrantableIndex",
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
