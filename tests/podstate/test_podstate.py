"""stagger.podstate and stagger.objects: the one reading of a pod's phase and of its Ready condition that
lockd, the emulator and the simulated cluster share."""

from __future__ import annotations

from typing import Any

import pytest

from stagger.objects import condition, condition_true
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase


def pod(phase: str | None = None, conditions: list[Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if conditions is not None:
        status["conditions"] = conditions
    return {"metadata": {"name": "p"}, "status": status}


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        (None, False),
        ([], False),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "PodScheduled", "status": "True"}], False),
        (["junk", {"type": "Ready", "status": "True"}], True),
        (
            [{"type": "Ready", "status": "False"}, {"type": "Ready", "status": "True"}],
            False,
        ),  # the first counts
    ],
)
def test_ready_is_the_first_ready_condition_being_true(conditions: list[Any] | None, ready: bool) -> None:
    assert is_pod_ready(pod("Running", conditions)) is ready


def test_a_pod_without_status_is_pending_and_not_ready() -> None:
    bare: dict[str, Any] = {"metadata": {"name": "p"}}
    assert pod_phase(bare) == "Pending" and not is_pod_ready(bare) and not is_pod_finished(bare)


@pytest.mark.parametrize(("phase", "finished"), [("Succeeded", True), ("Failed", True), ("Running", False)])
def test_finished_means_a_terminal_phase(phase: str, finished: bool) -> None:
    assert is_pod_finished(pod(phase)) is finished


def test_conditions_of_any_object() -> None:
    job = {"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}}
    assert condition(job, "Complete") == job["status"]["conditions"][0]
    assert condition_true(job, "Complete") and not condition_true(job, "Failed")
    assert condition({}, "Complete") is None
