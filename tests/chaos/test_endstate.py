"""What a failed chaos seed says of a pod not Ready at its deadline (sim/chaos/endstate.py): its node,
phase, scheduling gates, init containers' states and Ready condition, in one line."""

from __future__ import annotations

from typing import Any

import pytest

from sim.chaos.endstate import _pod_state


@pytest.mark.parametrize(
    ("pod", "line"),
    [
        pytest.param({"metadata": {}}, "unscheduled, no phase, Ready unknown", id="just created"),
        pytest.param(
            {
                "spec": {"nodeName": "n1", "schedulingGates": [{"name": "x/pacing"}]},
                "status": {"phase": "Pending"},
            },
            "n1, Pending, gates ['x/pacing'], Ready unknown",
            id="gated",
        ),
        pytest.param(
            {
                "spec": {"nodeName": "n1"},
                "status": {
                    "phase": "Pending",
                    "initContainerStatuses": [{"name": "stagger-wait", "state": {"running": {}}}],
                    "conditions": [{"type": "Ready", "status": "False"}],
                },
            },
            "n1, Pending, init stagger-wait running, Ready False",
            id="waiting for its slot",
        ),
        pytest.param(
            {
                "spec": {"nodeName": "n2"},
                "status": {
                    "phase": "Running",
                    "initContainerStatuses": [
                        {"name": "stagger-wait", "state": {"terminated": {"reason": "Completed"}}}
                    ],
                },
            },
            "n2, Running, init stagger-wait terminated Completed, Ready unknown",
            id="started, not Ready",
        ),
        pytest.param(
            {
                "metadata": {"deletionTimestamp": "2026-11-26T10:00:00Z"},
                "spec": {"nodeName": "n1"},
                "status": {
                    "phase": "Pending",
                    "initContainerStatuses": [{"name": "stagger-hold", "state": {"running": {}}}],
                },
            },
            "n1, Pending, terminating since 2026-11-26T10:00:00Z, init stagger-hold running, Ready unknown",
            id="evicted, not gone",
        ),
    ],
)
def test_a_stuck_pod_in_one_line(pod: dict[str, Any], line: str) -> None:
    assert _pod_state(pod) == line
