"""The group book's data: one compact record per pod, the counts and decisions it answers with, evict
mode's claims, and the timing constants its decisions follow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from stagger.matching import Pair
from stagger.objectnames import PodKey
from stagger.policy import Hold

__all__ = [
    "CLAIM_CONFIRM_SECONDS",
    "DEFAULT_START_TIMEOUT",
    "DENIED_RETRY_SECONDS",
    "HOLDS",
    "MIN_RETRY_SECONDS",
    "RESERVATION_SECONDS",
    "UNKNOWN_RETRY_SECONDS",
    "AdmitBasis",
    "AdmitDecision",
    "Basis",
    "Claim",
    "Counts",
    "Decision",
    "PodKey",
    "PodRecord",
    "pair_label",
    "phase_of",
    "started_at",
]


HOLDS: Final = frozenset(get_args(Hold))


"""The hold annotation's values that mark an evict-mode hold: read from the policy's `Hold` type."""


# A grant is counted without being on the pod for at most this long: enough for lockd (or the gate
# reconciler) to patch the pod and for the watch to bring the change back, short enough that a grant
# that was never recorded (lockd's patch failed) does not hold a place for long.
RESERVATION_SECONDS = 60.0


# An admission claim (evict mode: a pod let through, not in the book yet) lapses this long after it was
# made unless the watch brings its pod first. The API server persists the pod right after the webhook
# answers and the watch event follows, well under a second, a few under load; admission itself takes no
# credentials, so a review for a pod that is never created must not hold its group's place for long.
# The controller's --claim-confirm-timeout; this is its default.
CLAIM_CONFIRM_SECONDS = 5.0


# The policy file's default, for a pair whose policy is no longer in the file.
DEFAULT_START_TIMEOUT = 300.0


# How soon a pod told "not yet" should ask again, at most; sooner when its maxBlockedDuration ends first.
DENIED_RETRY_SECONDS = 5.0


# A pod the controller's watch has not delivered yet (it was created a moment ago).
UNKNOWN_RETRY_SECONDS = 2.0


MIN_RETRY_SECONDS = 0.5


Basis = Literal[
    "paced", "bypassed", "maxBlocked", "notHeld", "reserved", "ownerReservation", "denied", "unknown"
]


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
        return phase_of(self) == "waiting"


def phase_of(record: PodRecord) -> _Phase:
    if record.finished:
        return "done"
    if record.ready:
        return "ready"
    # A granted pod still carrying a label or gate (a patch half done by hand) has been granted: it starts.
    if record.held and record.granted_at is None:
        return "waiting"
    return "starting"


def started_at(record: PodRecord) -> float:
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
    asked again), `ownerReservation` (evict mode: a held pod of an owner with a reservation goes against
    it, as admission would have let it through), `denied`, `unknown` (not in the book yet)."""

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
    when the first pod of the chain was held (None: never held). `since`: when it was made or taken.
    `lapses_at`: when it ends unless a pod ends it first: RESERVATION_SECONDS after an eviction made an
    owner's reservation; the confirm timeout (CLAIM_CONFIRM_SECONDS by default) after admission took it,
    as the review that took it may name a pod that is never created (a forged review, or one another
    webhook then refused). `taken_from`: the owner's reservation a taken claim took; when the claim lapses
    unconfirmed the reservation is the owner's again, until its own `lapses_at`. `after`: the book's
    count of evict-mode holds when the evicted pod was reserved (its release began): a pod of the owner
    held after that, while the reservation is not taken, is the replacement admission held for want of
    an answer (`GroupBook.owner_claim`)."""

    id: str
    pairs: tuple[Pair, ...]
    owner: str
    first_held: float | None
    since: float
    taken: bool
    lapses_at: float
    after: int = 0
    taken_from: Claim | None = None


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


def pair_label(pair: Pair) -> str:
    """`image-pull[nginx:1.25]`, or just `everything` for a policy without a grouping key."""
    policy, key = pair
    return f"{policy}[{key}]" if key else policy
