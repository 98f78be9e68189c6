"""The controller's own Ready-to-grant latency, `stagger_controller_grant_latency_seconds`: from a pod turning
Ready in the controller's pod watch to the grant that Ready made room for, written into a node's wait answer.

Covers, on the controller process and the API emulator (the seed's image-pull policy, exponential 4/4/16):
two pods turning Ready make room for a held pod a node waits for; the wait's answer grants it and the
histogram counts exactly that one grant, with a value above 0 and below the test's own clock around it;
grants given at once to pods that had room when they asked (in a wait's answer, and over
`POST /v1/groups/grant`) are left out of the histogram (counted in `stagger_controller_grants_total`).

And, in process, the pacing's stamps (webhook.groups.pacing): the pairs a change of a record makes Ready
in (`readied_pairs`, an invariant over every combination); a held pod whose room a Ready made carries that
Ready's stamp until it is taken once; a held pod whose room came from a deletion, that had room when it
came, or whose Ready came with the first list (no stamp) carries none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from stagger.groupbook import PodRecord
from stagger.names import Names
from stagger.policy import MaxConcurrentPacer, StaggeringPolicy
from stagger.selectors import LabelSelector
from stagger.timestamps import format_rfc3339
from tests.groups_api.controller import Api, Controller, controller_on_emulator
from tests.webhook.reviews import enabled, image_policy, pod
from webhook.groups.pacing import Pacing, readied_pairs

HISTOGRAM = "stagger_controller_grant_latency_seconds"


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Api, Controller]]:
    async with controller_on_emulator(tmp_path=tmp_path, policies=image_policy("lock")) as setup:
        yield setup


async def _metrics(controller: Controller) -> dict[str, float]:
    """The samples of the probe port's /metrics, by name (the labelled ones with their labels)."""
    async with controller.session.get(controller.process.probe_url + "/metrics") as response:
        text = await response.text()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return samples


def _wait_body(*names: str, wait: float = 20) -> dict[str, Any]:
    pods = [{"namespace": "default", "name": name} for name in names]
    return {"node": "n1", "wait": wait, "pods": pods, "grant": True}


@pytest.mark.e2e
async def test_a_ready_that_makes_room_is_timed_to_the_grant_in_the_wait_answer(
    setup: tuple[Api, Controller],
) -> None:
    api, controller = setup
    names = [f"web-{i}" for i in range(5)]
    for name in names:
        await api.create_pod(pod(name, labels=enabled(staggerimages="1")))
    await controller.until(lambda groups: groups["pods"] == 5)
    # The oldest four have room: one granted at once in a wait's answer, three over POST /grant.
    status, answer = await controller.post("/v1/groups/wait", _wait_body(names[0]))
    assert status == 200 and answer["granted"] == [{"namespace": "default", "name": names[0]}], answer
    for name in names[1:4]:
        assert (await controller.grant(name))["granted"]
    before = await _metrics(controller)
    assert before[f"{HISTOGRAM}_count"] == 0  # immediate grants: left out
    assert before["stagger_controller_grants_total{basis=paced}"] == 4
    # The fifth waits: four are starting, and the limit is 4 until two are Ready (2 x 4).
    waiting = asyncio.create_task(controller.post("/v1/groups/wait", _wait_body(names[4])))
    await controller.until(lambda groups: groups["waits"] == 1)
    started = time.monotonic()
    await api.make_ready(names[0])
    await api.make_ready(names[1])
    status, answer = await waiting
    elapsed = time.monotonic() - started
    assert status == 200 and answer["granted"] == [{"namespace": "default", "name": names[4]}], answer
    after = await _metrics(controller)
    assert after[f"{HISTOGRAM}_count"] == 1
    # The controller's clock (CLOCK_MONOTONIC, as this process's) ran inside the test's bound.
    assert 0 < after[f"{HISTOGRAM}_sum"] < elapsed
    assert after[f"{HISTOGRAM}_bucket{{le=+Inf}}"] == 1


# --- the pacing's stamps, in process ----------------------------------------------------------------

NAMES = Names()
P = NAMES.prefix
ONE = StaggeringPolicy(
    name="one", label_selector=LabelSelector(), pacer=MaxConcurrentPacer(value=1), mode="lock"
)
PAIR = ("one", "")


def _pod(name: str, *, created: float, held: bool = True, ready: bool = False) -> dict[str, Any]:
    """A pod of the group `one` as the watch delivers it: held (the staggered label), or started."""
    labels = {f"{P}/enable": "1"}
    annotations = {f"{P}/group-key": '{"one":""}'}
    if held:
        labels[NAMES.staggered_label] = "1"
    else:
        annotations[NAMES.granted_at_annotation] = format_rfc3339(created, digits=0)
    conditions = [{"type": "Ready", "status": "True"}] if ready else []
    return {
        "metadata": {
            "namespace": "shop",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": format_rfc3339(created, digits=0),
            "labels": labels,
            "annotations": annotations,
        },
        "status": {"conditions": conditions},
    }


def _pacing() -> Pacing:
    state = Pacing(names=NAMES, policies={ONE.name: ONE})
    now = time.time()
    state.pod_changed(_pod("started", created=now - 30, held=False))
    state.pod_changed(_pod("next", created=now - 20))
    state.pod_changed(_pod("later", created=now - 10))
    assert state.grantable() == ()  # one may start, and one is starting
    return state


async def test_a_ready_that_makes_room_stamps_the_pod_it_frees_once() -> None:
    state = _pacing()
    state.pod_changed(_pod("started", created=time.time() - 30, held=False, ready=True), seen=123.5)
    assert state.grantable() == (("shop", "next"),)
    assert state.take_freed(("shop", "later")) is None  # still held: its turn is after `next`
    assert state.take_freed(("shop", "next")) == 123.5
    assert state.take_freed(("shop", "next")) is None  # taken once


@pytest.mark.parametrize(
    "how",
    [
        pytest.param("deleted", id="room-from-a-deletion"),
        pytest.param("listed", id="ready-in-the-first-list-unstamped"),
    ],
)
async def test_room_that_no_stamped_ready_made_leaves_no_stamp(how: str) -> None:
    state = _pacing()
    started = _pod("started", created=time.time() - 30, held=False, ready=True)
    if how == "deleted":
        state.pod_deleted(started)
    else:
        state.pod_changed(started)  # seen=None: the watch was still listing
    assert state.grantable() == (("shop", "next"),)
    assert state.take_freed(("shop", "next")) is None


async def test_a_pod_that_had_room_when_it_came_has_no_stamp_though_a_ready_came_before() -> None:
    state = Pacing(names=NAMES, policies={ONE.name: ONE})
    now = time.time()
    state.pod_changed(_pod("started", created=now - 30, held=False))
    state.pod_changed(_pod("started", created=now - 30, held=False, ready=True), seen=1.0)
    assert state.grantable() == ()  # the Ready's update: nobody held yet
    state.pod_changed(_pod("new", created=now - 5), seen=2.0)
    assert state.grantable() == (("shop", "new"),)
    assert state.take_freed(("shop", "new")) is None


def _record(*, ready: bool, finished: bool, bypassed: bool = False) -> PodRecord:
    pairs = (PAIR,) if not bypassed else ()
    return PodRecord(
        namespace="shop",
        name="web",
        uid="u",
        pacer_groups=pairs,
        bypassed_groups=(("other", "k"),),
        ready=ready,
        finished=finished,
    )


@given(
    old=st.none() | st.builds(_record, ready=st.booleans(), finished=st.booleans()),
    ready=st.booleans(),
    finished=st.booleans(),
    bypassed=st.booleans(),
)
def test_readied_pairs_are_every_pair_exactly_when_the_pod_turns_ready(
    old: PodRecord | None, ready: bool, finished: bool, bypassed: bool
) -> None:
    new = _record(ready=ready, finished=finished, bypassed=bypassed)
    counted_before = old is not None and old.ready and not old.finished
    turns_ready = ready and not finished and not counted_before
    assert readied_pairs(old, new) == (new.pacer_groups + new.bypassed_groups if turns_ready else ())
