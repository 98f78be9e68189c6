"""The pure core of leader election, `decide`: from the Lease as read (or None), what this replica observed
of it before, its identity, the timings and `now`, what to do (create the Lease, acquire an expired or
released one, renew ours, or follow another holder) and the Lease spec to write. Like client-go, expiry
is judged on this replica's own clock: a holder's lease runs out `leaseDuration` after this replica
first *saw* its current record (`Observed`), never by comparing `renewTime` with the local clock, so
clock differences between replicas do not matter (only clock *rates* do).

Timestamps written are MicroTime (`2026-11-23T10:00:00.000000Z`); `leaseDurationSeconds` is a whole
number, the lease duration rounded up."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from stagger.names import Names
from stagger.timestamps import format_rfc3339, parse_rfc3339

__all__ = [
    "Action",
    "Decision",
    "LeaseRecord",
    "Observed",
    "Timings",
    "decide",
    "leader_label",
    "micro_time",
    "release_record",
]


def leader_label(names: Names) -> str:
    """`<prefix>/leader`: `"1"` on the leading replica's pod only."""
    return f"{names.prefix}/leader"


@dataclass(frozen=True)
class Timings:
    """client-go's defaults: a 15 s lease, a 10 s renew deadline, a try every 2 s."""

    lease_duration: float = 15.0  # followers wait this long after seeing the holder's last renewal
    renew_deadline: float = 10.0  # the leader stops leading when it has not renewed for this long
    retry_period: float = 2.0  # how often the lease is tried (renewed or acquired)

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election timings: need 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period:g}s, {self.renew_deadline:g}s, {self.lease_duration:g}s)"
            )

    @property
    def lease_duration_seconds(self) -> int:
        """`spec.leaseDurationSeconds` as written: whole seconds, rounded up so that it never promises
        others less than we wait ourselves."""
        return max(1, math.ceil(self.lease_duration))


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease spec fields leader election reads and writes (client-go's LeaderElectionRecord)."""

    holder: str = ""  # "" is nobody (a released lease)
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """The record of a Lease object as served; absent or mistyped fields read as their zero value
        (client-go's LeaseSpecToLeaderElectionRecord)."""
        spec = lease.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        acquire, renew = spec.get("acquireTime"), spec.get("renewTime")
        return cls(
            holder=holder if isinstance(holder, str) else "",
            lease_duration_seconds=duration if _is_int(duration) else 0,
            acquire_time=acquire if isinstance(acquire, str) else None,
            renew_time=renew if isinstance(renew, str) else None,
            transitions=transitions if _is_int(transitions) else 0,
        )

    def to_spec(self) -> dict[str, Any]:
        """The Lease spec to write: every field set, as client-go's LeaderElectionRecordToLeaseSpec does
        (`holderIdentity: ""` included)."""
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Observed:
    """A lease record and when this replica first saw it (its own clock): client-go's observedRecord
    and observedTime. The holder of `record` is alive until `at` + the lease duration."""

    record: LeaseRecord
    at: float


class Action(StrEnum):
    CREATE = "create"  # no Lease yet: create it, holding it
    ACQUIRE = "acquire"  # free, released or expired: take it over (leaseTransitions + 1)
    RENEW = "renew"  # ours: write a new renewTime
    FOLLOW = "follow"  # another holder's unexpired lease: write nothing


@dataclass(frozen=True)
class Decision:
    action: Action
    observed: Observed | None  # what to remember for the next decision (None: there is no Lease)
    record: LeaseRecord | None  # what to write; None when following
    expires_at: float | None = None  # when following: when the holder's lease runs out, on our clock

    @property
    def spec(self) -> dict[str, Any] | None:
        return None if self.record is None else self.record.to_spec()


def micro_time(wall: float) -> str:
    """metav1.MicroTime on the wire: `2026-11-23T10:00:00.000000Z`."""
    return format_rfc3339(wall, digits=6)


def decide(
    current: LeaseRecord | None,
    observed: Observed | None,
    *,
    identity: str,
    timings: Timings,
    now: float,
    wall: float | None = None,
) -> Decision:
    """client-go's tryAcquireOrRenew, without the I/O.

    `current` is the Lease's record as just read (None: no Lease), `observed` what this replica
    remembered from its previous decision, `now` its clock (used only to measure how long it has seen
    the same record) and `wall` the epoch seconds written as `acquireTime`/`renewTime` (default `now`).

    The holder's lease runs out `max(lease_duration, its leaseDurationSeconds)` after this replica first
    saw its current record: a record that changed since `observed` (a renewal) starts the count again.
    """
    if not identity:
        raise ValueError("identity: must not be empty (an empty holderIdentity means nobody holds the lease)")
    stamp = micro_time(now if wall is None else wall)
    fresh = LeaseRecord(
        holder=identity,
        lease_duration_seconds=timings.lease_duration_seconds,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=0,
    )
    if current is None:
        return Decision(Action.CREATE, None, fresh)
    if observed is None or observed.record != current:
        observed = Observed(current, now)
    if current.holder == identity:
        renewed = LeaseRecord(
            holder=identity,
            lease_duration_seconds=fresh.lease_duration_seconds,
            acquire_time=current.acquire_time or stamp,
            renew_time=_later(stamp, current.renew_time),
            transitions=current.transitions,
        )
        return Decision(Action.RENEW, observed, renewed)
    if current.holder:
        expires_at = observed.at + max(timings.lease_duration, current.lease_duration_seconds)
        if now < expires_at:
            return Decision(Action.FOLLOW, observed, None, expires_at)
    acquired = LeaseRecord(
        holder=identity,
        lease_duration_seconds=fresh.lease_duration_seconds,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=current.transitions + 1,
    )
    return Decision(Action.ACQUIRE, observed, acquired)


def _later(stamp: str, previous: str | None) -> str:
    """`stamp`, or a microsecond after `previous` when the wall clock has not passed it (stepped back,
    or too coarse): a renewal must change the record, since followers count the lease duration from the
    last change they saw."""
    before = None if previous is None else parse_rfc3339(previous)
    now = parse_rfc3339(stamp)
    if before is None or now is None or now > before:
        return stamp
    return micro_time(before + 0.000001)


def release_record(current: LeaseRecord, *, wall: float) -> LeaseRecord:
    """What a leader writes when it gives the lease up on shutdown. client-go's LeaderElector.release
    (kubernetes/client-go, tools/leaderelection/leaderelection.go) writes a LeaderElectionRecord with
    `LeaderTransitions: le.observedRecord.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now,
    AcquireTime: now` and no HolderIdentity, which LeaderElectionRecordToLeaseSpec turns into
    `holderIdentity: ""`. An empty holder is free at once for every candidate."""
    stamp = micro_time(wall)
    return LeaseRecord(
        holder="",
        lease_duration_seconds=1,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=current.transitions,
    )
