"""lockd's group pacer client, its pure parts: the controller's grant answer as lockd decides on it, the
grants pushed in a wait's answer (used once, by the pod of the uid named, only within half their
reservation), and the unavailability clock. The answers' reading is tests/contracts/test_group_bodies.py's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockd.groupclient import Availability, PushedGrants, verdict_of
from stagger.contracts.groups import read_grant_answer


@pytest.mark.parametrize(
    ("data", "granted", "retry"),
    [
        pytest.param({"granted": True, "reason": "ok", "retryAfter": 0}, True, 0.0, id="yes"),
        pytest.param({"granted": False, "reason": "full", "retryAfter": 2.5}, False, 2.5, id="no"),
        pytest.param({"granted": False}, False, 1.0, id="default-retry"),
    ],
)
def test_answers(data: dict[str, object], granted: bool, retry: float) -> None:
    verdict = verdict_of(read_grant_answer(data))
    assert (verdict.granted, verdict.retry_after, verdict.failed_open) == (granted, retry, False)


@pytest.mark.parametrize(("policy", "granted"), [("open", True), ("closed", False)])
def test_unavailable_after_the_grace_then_policy(policy: str, granted: bool) -> None:
    clock = Availability(unavailable_after=30.0, policy=policy)  # type: ignore[arg-type]
    early = clock.failed(now=100.0, error="refused")
    assert not early.granted and "retrying" in early.reason
    assert not clock.failed(now=129.0, error="refused").granted
    late = clock.failed(now=130.0, error="refused")
    assert late.granted is granted
    assert f"groupFailurePolicy {policy}" in late.reason
    clock.succeeded()
    assert not clock.failed(now=200.0, error="refused").granted  # a new outage starts its own clock


def test_a_pushed_grant_is_used_once_by_its_pod_within_half_its_reservation() -> None:
    pushed = PushedGrants()
    pushed.add([(("d", "a"), "uid-a"), (("d", "b"), "uid-b"), (("d", "c"), "")], granted_for=60.0, now=100.0)
    assert pushed.take(("d", "a"), uid="uid-a", now=129.0)
    assert not pushed.take(("d", "a"), uid="uid-a", now=129.0)  # once
    assert not pushed.take(("d", "b"), uid="another-pod", now=110.0)  # a pod recreated under that name
    assert not pushed.take(("d", "c"), uid="uid-c", now=130.0)  # half of 60 s is over
    assert (pushed.received, pushed.used, pushed.lapsed, len(pushed)) == (3, 1, 2, 0)


@given(
    granted_for=st.floats(min_value=0, max_value=120),
    asks=st.lists(st.floats(min_value=0, max_value=200), max_size=6),
)
def test_a_pushed_grant_is_never_used_after_half_its_reservation_nor_twice(
    granted_for: float, asks: list[float]
) -> None:
    pushed = PushedGrants()
    pushed.add([(("d", "p"), "u")], granted_for=granted_for, now=0.0)
    used = [now for now in sorted(asks) if pushed.take(("d", "p"), uid="u", now=now)]
    assert len(used) <= 1
    assert all(now < granted_for / 2 for now in used)
    assert pushed.received == pushed.used + pushed.lapsed + len(pushed)
