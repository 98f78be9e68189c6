"""Evict mode's claims lapse on time in the leader's pacing state (webhook.groups.pacing), whether anyone asks
or not: a claim admission took whose pod never shows in the watch lapses at its confirm deadline
(`claim_confirm_timeout`), is counted once (`lapsed`, the controller's metric), and its place is signalled
free at once (`changed` returns: the eviction reconciler and the nodes' waits look again); a pod that shows
in time confirms its claim, and nothing lapses."""

from __future__ import annotations

import time

from stagger.names import Names
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector
from stagger.timestamps import format_rfc3339
from webhook.groups.pacing import Pacing

NAMES = Names()
P = NAMES.prefix
POLICY = StaggeringPolicy(
    name="one", label_selector=LabelSelector(), pacer=MaxConcurrentPacer(value=1), mode="evict"
)
CONFIRM = 0.3


def pacing(lapses: list[int]) -> Pacing:
    return Pacing(
        names=NAMES, policies={POLICY.name: POLICY}, claim_confirm_timeout=CONFIRM, lapsed=lapses.append
    )


def admit(state: Pacing, owner: str = "rs-1") -> str | None:
    decision = state.admit(pacer_groups=[("one", "")], bypassed_groups=[], owner=owner, dry_run=False)
    return decision.ticket if decision.admit else None


async def test_an_unconfirmed_claim_lapses_on_time_and_signals_its_place() -> None:
    lapses: list[int] = []
    state = pacing(lapses)
    assert admit(state) is not None
    assert admit(state, owner="rs-2") is None  # the claim fills the one place
    version = state.version
    began = time.monotonic()
    # Nobody asks anything: the lapse comes by itself, and wakes whoever waits on a change.
    await state.changed(since=version, within=10.0)
    assert time.monotonic() - began < 5.0  # generous: at the 0.3 s deadline, not at `within`
    assert lapses == [1] and state.book.claims() == []
    assert admit(state, owner="rs-2") is not None


async def test_a_claim_whose_pod_shows_in_time_never_lapses() -> None:
    lapses: list[int] = []
    state = pacing(lapses)
    ticket = admit(state)
    assert ticket is not None
    state.pod_changed(
        {
            "metadata": {
                "namespace": "shop",
                "name": "web-1",
                "uid": "u1",
                "creationTimestamp": format_rfc3339(time.time(), digits=0),
                "labels": {f"{P}/enable": "1"},
                "annotations": {f"{P}/group-key": '{"one":""}', f"{P}/ticket": ticket},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": True}],
            }
        }
    )
    assert state.book.claims() == []
    version = state.version
    await state.changed(since=version, within=CONFIRM * 3)  # past the deadline: nothing to lapse
    state.book.expire(time.time())
    assert lapses == [] and state.book.claims_lapsed == 0
