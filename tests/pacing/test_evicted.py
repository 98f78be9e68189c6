"""The leader's pacing state around an eviction (webhook.groups.pacing): an evicted pod leaves the book and its
place becomes its owner's reservation; a late watch event of that pod (from before the eviction,
delivered after it) does not bring it back as held, so it cannot be evicted twice for one release; the
DELETED event of the old pod leaves a new pod of the same name (a StatefulSet's) alone; the watch may show
the eviction before its answer (the place goes to the owner then, once), and so may the replacement's
admission (it goes against the reservation then, once); a refused eviction leaves the pod held; admission
in evict mode claims a place and signals the change."""

from __future__ import annotations

from typing import Any

from stagger.groupbook import PodRecord
from stagger.names import Names
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector
from stagger.timestamps import format_rfc3339
from webhook.groups.pacing import Pacing

NAMES = Names()
P = NAMES.prefix
T0 = 1_700_000_000.0
POLICY = StaggeringPolicy(
    name="one", label_selector=LabelSelector(), pacer=MaxConcurrentPacer(value=1), mode="evict"
)


def pod(name: str, uid: str, *, held: bool = False, ready: bool = False) -> dict[str, Any]:
    labels = {f"{P}/enable": "1"}
    annotations = {f"{P}/group-key": '{"one":""}'}
    if held:
        labels[f"{P}/staggered"] = "1"
        annotations[f"{P}/hold"] = "nodeSelector"
    return {
        "metadata": {
            "namespace": "db",
            "name": name,
            "uid": uid,
            "creationTimestamp": format_rfc3339(T0 - 10, digits=0),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"kind": "StatefulSet", "name": "db", "uid": "sts-1", "controller": True}],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pacing() -> Pacing:
    return Pacing(names=NAMES, policies={POLICY.name: POLICY}, clock=lambda: T0)


def evicting(state: Pacing) -> PodRecord:
    """The held pod db-0 granted (reserved) and an eviction of it sent: its record."""
    state.pod_changed(pod("db-0", "old", held=True))
    assert state.grant(namespace="db", name="db-0", uid="old").granted
    record = state.book.get(("db", "db-0"))
    assert record is not None
    state.evicting(record)
    return record


def test_a_late_event_of_an_evicted_pod_is_ignored() -> None:
    state = pacing()
    state.pod_changed(pod("db-0", "old", held=True))
    assert state.grantable() == (("db", "db-0"),)
    assert state.grant(namespace="db", name="db-0", uid="old").granted
    version = state.version
    record = state.book.get(("db", "db-0"))
    assert record is not None
    state.evicting(record)
    claim = state.evicted(record)
    assert claim is not None and claim.owner == "sts-1" and state.version > version
    assert ("db", "db-0") not in state.book
    state.pod_changed(pod("db-0", "old", held=True))  # stale MODIFIED, delivered late
    assert ("db", "db-0") not in state.book and state.grantable() == ()
    # The replacement (same name, new uid) is admitted against the reservation and shows up.
    decision = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="sts-1", dry_run=False)
    assert decision.admit and decision.ticket == claim.id
    replacement = pod("db-0", "new")
    replacement["metadata"]["annotations"][f"{P}/ticket"] = claim.id
    state.pod_changed(replacement)
    assert state.book.get(("db", "db-0")) is not None and state.book.claims() == []
    # The old pod's DELETED event arrives last: the new one stays.
    state.pod_deleted(pod("db-0", "old"))
    current = state.book.get(("db", "db-0"))
    assert current is not None and current.uid == "new"


def test_the_watch_may_show_the_eviction_before_its_answer() -> None:
    """The real API server usually sends the watch event of an evicted pod before the Eviction API's
    answer: the place goes to the owner then, and the answer finds the same reservation."""
    state = pacing()
    record = evicting(state)
    going = pod("db-0", "old", held=True)
    going["metadata"]["deletionTimestamp"] = format_rfc3339(T0, digits=0)
    state.pod_changed(going)  # MODIFIED with deletionTimestamp
    (claim,) = state.book.claims()
    assert claim.owner == "sts-1" and ("db", "db-0") not in state.book
    state.pod_deleted(pod("db-0", "old", held=True))  # then DELETED
    assert state.evicted(record) == claim and state.book.claims() == [claim]
    counts = state.book.counts(("one", ""), now=T0, start_timeouts={"one": 300.0})
    assert counts.starting == 1 and counts.held == 0


def test_a_refused_eviction_leaves_the_pod_held() -> None:
    state = pacing()
    record = evicting(state)
    state.eviction_failed(record)
    state.book.unreserve(("db", "db-0"))
    assert state.book.claims() == [] and state.grantable() == (("db", "db-0"),)
    state.pod_deleted(pod("db-0", "old", held=True))  # deleted later by someone else: just gone
    assert state.book.claims() == [] and state.book.pairs() == []


def test_admission_claims_and_signals() -> None:
    state = pacing()
    version = state.version
    dry = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="rs", dry_run=True)
    assert dry.admit and state.version == version and state.book.claims() == []
    real = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="rs", dry_run=False)
    assert real.admit and state.version > version and len(state.book.claims()) == 1
    assert not state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="rs", dry_run=False).admit


def test_a_replacement_admitted_before_the_eviction_is_known_goes_against_the_reservation() -> None:
    state = pacing()
    record = evicting(state)
    # The owner's replacement asks before the Eviction API's answer and the watch's deletion are in.
    decision = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="sts-1", dry_run=False)
    assert decision.admit and decision.basis == "reserved" and decision.ticket is not None
    assert ("db", "db-0") not in state.book
    # The answer, then the watch, come late: no second reservation is made for the one eviction.
    claim = state.evicted(record)
    assert claim is not None and claim.id == decision.ticket
    state.pod_deleted(pod("db-0", "old", held=True))
    assert state.book.owner_claims("sts-1") == 0


def test_another_owners_admission_does_not_take_an_eviction_in_flight() -> None:
    state = pacing()
    evicting(state)
    decision = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner="other", dry_run=False)
    assert decision.basis != "reserved"
    assert ("db", "db-0") in state.book  # still reserved and in flight
