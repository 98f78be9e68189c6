"""The pure core of leader election (webhook.leader.decide), as a table: create a missing Lease, follow
another holder's unexpired lease, acquire a released, empty or expired one (leaseTransitions + 1), renew
our own (acquireTime and transitions kept, renewTime always later than the one read); expiry counted on this replica's clock from when it first saw
the current record (a renewal restarts the count), never from the record's renewTime; the holder's longer
leaseDurationSeconds respected. Also: what a release writes (client-go's), the record read from a Lease
and written back as a spec, MicroTime stamps, and the timing rules."""

from __future__ import annotations

import pytest

from webhook.leader import (
    Action,
    Decision,
    LeaseRecord,
    Observed,
    Timings,
    decide,
    micro_time,
    release_record,
)

T = Timings()  # client-go's defaults: 15 s / 10 s / 2 s
WALL = 1_795_428_000.0  # 2026-11-23T10:00:00Z
STAMP = "2026-11-23T10:00:00.000000Z"
OLD = "2026-11-23T09:00:00.000000Z"  # long ago by the wall clock: must not matter


def held(holder: str, *, transitions: int = 3, renew: str = OLD, seconds: int = 15) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        lease_duration_seconds=seconds,
        acquire_time=OLD,
        renew_time=renew,
        transitions=transitions,
    )


A_LEASE = held("a")


@pytest.mark.parametrize(
    ("current", "observed", "now", "action", "written", "expires_at"),
    [
        pytest.param(
            None, None, 100.0, Action.CREATE,
            LeaseRecord("me", 15, STAMP, STAMP, 0), None,
            id="no-lease-create",
        ),
        pytest.param(
            A_LEASE, None, 100.0, Action.FOLLOW, None, 115.0,
            id="first-sight-follow-however-old-renewTime-is",
        ),
        pytest.param(
            A_LEASE, Observed(A_LEASE, 90.0), 104.9, Action.FOLLOW, None, 105.0,
            id="same-record-not-yet-expired",
        ),
        pytest.param(
            A_LEASE, Observed(A_LEASE, 90.0), 105.0, Action.ACQUIRE,
            LeaseRecord("me", 15, STAMP, STAMP, 4), None,
            id="same-record-expired-acquire",
        ),
        pytest.param(
            held("a", renew=STAMP), Observed(A_LEASE, 0.0), 200.0, Action.FOLLOW, None, 215.0,
            id="renewed-since-seen-count-restarts",
        ),
        pytest.param(
            held("b"), Observed(A_LEASE, 0.0), 200.0, Action.FOLLOW, None, 215.0,
            id="new-holder-count-restarts",
        ),
        pytest.param(
            held("a", seconds=60), Observed(held("a", seconds=60), 0.0), 30.0, Action.FOLLOW, None, 60.0,
            id="holder-longer-lease-respected",
        ),
        pytest.param(
            held("a", seconds=1), Observed(held("a", seconds=1), 0.0), 14.0, Action.FOLLOW, None, 15.0,
            id="holder-shorter-lease-our-duration-wins",
        ),
        pytest.param(
            held(""), None, 100.0, Action.ACQUIRE,
            LeaseRecord("me", 15, STAMP, STAMP, 4), None,
            id="released-acquire-at-once",
        ),
        pytest.param(
            LeaseRecord(), None, 100.0, Action.ACQUIRE,
            LeaseRecord("me", 15, STAMP, STAMP, 1), None,
            id="empty-spec-acquire",
        ),
        pytest.param(
            held("me"), None, 100.0, Action.RENEW,
            LeaseRecord("me", 15, OLD, STAMP, 3), None,
            id="ours-renew-keeps-acquireTime-and-transitions",
        ),
        pytest.param(
            held("me"), Observed(held("me"), 0.0), 1000.0, Action.RENEW,
            LeaseRecord("me", 15, OLD, STAMP, 3), None,
            id="ours-even-when-expired-renew",
        ),
        pytest.param(
            held("me", renew=STAMP), None, 100.0, Action.RENEW,
            LeaseRecord("me", 15, OLD, "2026-11-23T10:00:00.000001Z", 3), None,
            id="ours-wall-clock-not-past-renewTime-a-microsecond-later",
        ),
        pytest.param(
            LeaseRecord(holder="me", lease_duration_seconds=15, renew_time=OLD, transitions=2), None, 1.0,
            Action.RENEW, LeaseRecord("me", 15, STAMP, STAMP, 2), None,
            id="ours-without-acquireTime-gets-one",
        ),
    ],
)  # fmt: skip
def test_decide(
    current: LeaseRecord | None,
    observed: Observed | None,
    now: float,
    action: Action,
    written: LeaseRecord | None,
    expires_at: float | None,
) -> None:
    decision = decide(current, observed, identity="me", timings=T, now=now, wall=WALL)
    assert decision.action is action
    assert decision.record == written
    assert decision.expires_at == expires_at
    if current is None:
        assert decision.observed is None
    else:
        assert decision.observed is not None and decision.observed.record == current
        kept = observed is not None and observed.record == current
        assert decision.observed.at == (observed.at if kept and observed else now)


def test_the_spec_written_has_every_field_as_client_go_writes_it() -> None:
    decision = decide(None, None, identity="me", timings=T, now=5.0, wall=WALL)
    assert decision == Decision(Action.CREATE, None, LeaseRecord("me", 15, STAMP, STAMP, 0))
    assert decision.spec == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": STAMP,
        "renewTime": STAMP,
        "leaseTransitions": 0,
    }
    assert decide(A_LEASE, None, identity="me", timings=T, now=5.0).spec is None


def test_wall_defaults_to_now_and_stamps_are_microtime() -> None:
    assert micro_time(WALL + 0.25) == "2026-11-23T10:00:00.250000Z"
    assert micro_time(WALL + 0.0000015) == "2026-11-23T10:00:00.000001Z"
    decision = decide(None, None, identity="me", timings=T, now=WALL + 1.5)
    assert decision.record is not None and decision.record.renew_time == "2026-11-23T10:00:01.500000Z"


def test_a_fractional_lease_duration_is_written_rounded_up() -> None:
    timings = Timings(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2)
    assert timings.lease_duration_seconds == 2
    decision = decide(None, None, identity="me", timings=timings, now=0.0, wall=WALL)
    assert decision.spec is not None and decision.spec["leaseDurationSeconds"] == 2


def test_release_writes_what_client_go_writes() -> None:
    released = release_record(held("me", transitions=7), wall=WALL)
    assert released == LeaseRecord(
        holder="", lease_duration_seconds=1, acquire_time=STAMP, renew_time=STAMP, transitions=7
    )
    assert released.to_spec() == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": STAMP,
        "renewTime": STAMP,
        "leaseTransitions": 7,
    }
    # Nobody holds it: every candidate acquires it at once, with one more transition.
    decision = decide(released, None, identity="b", timings=T, now=0.0, wall=WALL)
    assert decision.action is Action.ACQUIRE and decision.record is not None
    assert decision.record.transitions == 8


@pytest.mark.parametrize(
    ("lease", "record"),
    [
        pytest.param({}, LeaseRecord(), id="no-spec"),
        pytest.param({"spec": None}, LeaseRecord(), id="null-spec"),
        pytest.param(
            {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": OLD, "renewTime": STAMP,
                      "leaseTransitions": 2, "strategy": "OldestEmulationVersion"}},
            LeaseRecord("a", 15, OLD, STAMP, 2),
            id="full",
        ),
        pytest.param(
            {"spec": {"holderIdentity": None, "leaseDurationSeconds": True, "leaseTransitions": "2",
                      "renewTime": 5}},
            LeaseRecord(),
            id="mistyped-read-as-zero",
        ),
    ],
)  # fmt: skip
def test_record_from_lease(lease: dict[str, object], record: LeaseRecord) -> None:
    assert LeaseRecord.from_lease(lease) == record


def test_a_record_round_trips_through_its_spec() -> None:
    record = LeaseRecord("a", 15, OLD, STAMP, 2)
    assert LeaseRecord.from_lease({"spec": record.to_spec()}) == record


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [
        pytest.param(10.0, 10.0, 2.0, id="renew-not-below-lease"),
        pytest.param(15.0, 2.0, 2.0, id="retry-not-below-renew"),
        pytest.param(15.0, 10.0, 0.0, id="retry-zero"),
    ],
)
def test_timings_rules(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        Timings(lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_an_empty_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="identity"):
        decide(None, None, identity="", timings=T, now=0.0)
