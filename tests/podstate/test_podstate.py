"""stagger.podstate and stagger.objects: the one reading of a pod's phase and of its Ready condition that
lockd, the emulator and the simulated cluster share."""

from __future__ import annotations

from typing import Any

import pytest

from stagger.objects import condition, condition_true
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase, restart_state


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


def with_containers(*statuses: dict[str, Any], ready: bool = False) -> dict[str, Any]:
    subject = pod("Running", [{"type": "Ready", "status": "True" if ready else "False"}])
    subject["status"]["containerStatuses"] = list(statuses)
    return subject


def container(state: dict[str, Any], *, restarts: int = 0, ready: bool = False) -> dict[str, Any]:
    return {"name": "c", "state": state, "restartCount": restarts, "ready": ready}


CRASH_LOOP = {"waiting": {"reason": "CrashLoopBackOff"}}
RUNNING = {"running": {"startedAt": "2026-11-21T10:00:00Z"}}
ERROR = {"terminated": {"exitCode": 1, "reason": "Error"}}


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        pytest.param(pod("Pending"), None, id="no-container-statuses"),
        pytest.param(
            with_containers(container({"waiting": {"reason": "ContainerCreating"}})), None, id="creating"
        ),
        pytest.param(with_containers(container(RUNNING)), None, id="first-run-not-ready"),
        pytest.param(with_containers(container(CRASH_LOOP, restarts=4)), "crashLoopBackOff", id="crash-loop"),
        pytest.param(
            with_containers(container(CRASH_LOOP, restarts=4), ready=True),
            "crashLoopBackOff",
            id="crash-loop-whatever-the-ready-condition",
        ),
        pytest.param(with_containers(container(RUNNING, restarts=1)), "restarting", id="restarted-not-ready"),
        pytest.param(
            with_containers(container(RUNNING, restarts=1, ready=True), ready=True),
            None,
            id="restarted-ready-again",
        ),
        pytest.param(with_containers(container(ERROR, restarts=1)), None, id="terminated-between-restarts"),
        pytest.param(
            with_containers(container({"waiting": {"reason": "PodInitializing"}}, restarts=3)),
            None,
            id="initializing-after-sandbox-restart",
        ),
        pytest.param(
            with_containers(container(RUNNING, restarts=2), container(CRASH_LOOP, restarts=1)),
            "crashLoopBackOff",
            id="crash-loop-wins-over-restarting",
        ),
        pytest.param(with_containers(container(RUNNING, restarts="3")), None, id="junk-count"),
        pytest.param(with_containers("junk"), None, id="junk-status"),
    ],
)
def test_restart_state(subject: dict[str, Any], expected: str | None) -> None:
    assert restart_state(subject) == expected
