"""How the controller tells, from a pod alone, that it started without its slot and why
(`webhook.failopens.fail_open_of`), as a table; the same answer from the slim copy the pod watch keeps
(`slim_pod`), whose init client's reason is cut short; and `tally`'s sums."""

from __future__ import annotations

from typing import Any

import pytest

from stagger.contracts.failopen import format_outcome
from tests.webhook.reviews import ENABLE, NAMES
from webhook.failopens import FailOpen, fail_open_of, tally
from webhook.groups.podwatch import REASON_KEPT, slim_pod

INIT = "stagger-wait"


def _pod(
    *,
    enabled: bool = True,
    injected: tuple[str, ...] = (INIT,),
    phase: str = "Running",
    exit_code: int | None = 0,
    message: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        terminated: dict[str, Any] = {"exitCode": exit_code}
        if message is not None:
            terminated["message"] = message
        status["initContainerStatuses"] = [{"name": INIT, "state": {"terminated": terminated}}]
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "labels": {ENABLE: "1"} if enabled else {},
            "annotations": dict(annotations or {}),
        },
        "spec": {"initContainers": [{"name": name} for name in injected], "nodeName": "n1"},
        "status": status,
    }


GRANTED = format_outcome(cause=None)
LOST = format_outcome(cause="lockdUnreachable", reason="could not be reached")


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(_pod(message=GRANTED), None, id="granted"),
        pytest.param(
            _pod(message=LOST), FailOpen("lockdUnreachable", "could not be reached"), id="lockd unreachable"
        ),
        pytest.param(
            _pod(message=format_outcome(cause="badConfig", reason="STAGGER_LOCKD_URL: bad")),
            FailOpen("badConfig", "STAGGER_LOCKD_URL: bad"),
            id="bad configuration",
        ),
        pytest.param(_pod(exit_code=None, phase="Pending"), None, id="init client still waiting"),
        pytest.param(_pod(exit_code=143, message=LOST), None, id="init client stopped by a signal"),
        pytest.param(
            _pod(message=None),
            FailOpen("unknown", "the init client finished without a grant or a reason"),
            id="no outcome, no node slot",
        ),
        pytest.param(
            _pod(message=None, annotations={NAMES.node_slot_annotation: "2026-01-01T00:00:00Z"}),
            None,
            id="an older init client, granted by lockd",
        ),
        pytest.param(
            _pod(message="panic: logs of a failed run"),
            FailOpen("unknown", "the init client finished without a grant or a reason"),
            id="not an outcome",
        ),
        pytest.param(
            _pod(message=GRANTED, annotations={NAMES.failed_open_annotation: "groupPacerNotConfigured"}),
            FailOpen(
                "groupPacerNotConfigured",
                "lockd granted its node slot without the group pacer: lockd has no --controller-url",
            ),
            id="lockd without a controller",
        ),
        pytest.param(
            _pod(message=LOST, annotations={NAMES.started_without_slot_annotation: "lockdUnreachable"}),
            None,
            id="counted already",
        ),
        pytest.param(_pod(enabled=False, message=LOST), None, id="not opted in"),
        pytest.param(
            _pod(injected=(), exit_code=None),
            FailOpen(
                "webhookNotCalled",
                "admitted without stagger's init container: the admission webhook was not called, or failed "
                "(failurePolicy Ignore)",
            ),
            id="not injected, running",
        ),
        pytest.param(
            _pod(injected=(), exit_code=None, phase="Pending"), None, id="not injected, not started"
        ),
        pytest.param(_pod(injected=("stagger-hold",), exit_code=None), None, id="evict mode's stub"),
    ],
)
def test_cause_from_the_pod(pod: dict[str, Any], expected: FailOpen | None) -> None:
    assert fail_open_of(pod, names=NAMES, init_container=INIT) == expected
    slim = slim_pod(pod, names=NAMES, init_container=INIT)
    assert fail_open_of(slim, names=NAMES, init_container=INIT) == expected


def test_the_slim_copy_keeps_the_start_of_a_long_reason() -> None:
    long = "x" * 3000
    pod = _pod(message=format_outcome(cause="maxWait", reason=long))
    found = fail_open_of(slim_pod(pod, names=NAMES, init_container=INIT), names=NAMES, init_container=INIT)
    assert found == FailOpen("maxWait", "x" * REASON_KEPT + " [cut]")


def test_tally_sums_the_marked_pods_by_cause_node_and_group() -> None:
    def marked(cause: str, node: str) -> dict[str, Any]:
        pod = _pod(annotations={NAMES.started_without_slot_annotation: cause})
        pod["spec"]["nodeName"] = node
        return pod

    pods = [marked("maxWait", "n1"), marked("maxWait", "n2"), marked("badConfig", "n1"), _pod(message=LOST)]
    groups = iter([["web"], ["web", "team"], []])
    summed = tally(pods, names=NAMES, groups_of=lambda pod: next(groups))
    assert summed == {
        "pods": 3,
        "byCause": {"badConfig": 1, "maxWait": 2},
        "byNode": {"n1": 2, "n2": 1},
        "byGroup": {"(no group)": 1, "team": 1, "web": 2},
    }
