"""lockd's reading of the controller's group grant answers, and the unavailability clock (pure parts)."""

from __future__ import annotations

import pytest

from lockd.groups import Availability, parse_answer


@pytest.mark.parametrize(
    ("data", "granted", "retry"),
    [
        pytest.param({"granted": True, "reason": "ok", "retryAfter": 0}, True, 0.0, id="yes"),
        pytest.param({"granted": False, "reason": "full", "retryAfter": 2.5}, False, 2.5, id="no"),
        pytest.param({"granted": False}, False, 1.0, id="default-retry"),
    ],
)
def test_answers(data: dict, granted: bool, retry: float) -> None:
    verdict = parse_answer(data)
    assert (verdict.granted, verdict.retry_after) == (granted, retry)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param([], id="not-an-object"),
        pytest.param({"granted": "yes"}, id="granted-not-bool"),
        pytest.param({"granted": True, "retryAfter": -1}, id="negative-retry"),
        pytest.param({"granted": True, "retryAfter": True}, id="bool-retry"),
    ],
)
def test_malformed_answers_are_errors(data: object) -> None:
    with pytest.raises(ValueError):
        parse_answer(data)


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
