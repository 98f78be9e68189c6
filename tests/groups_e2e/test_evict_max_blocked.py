"""`maxBlockedDuration` in `evict` mode, end to end on the simulated cluster, on the API emulator or the real
control plane (`pytest --control-plane`): a Deployment of 3 slow pods (100 CPU-seconds to start) in a group
whose pacer lets one start at a time (maxConcurrent 1) with `maxBlockedDuration: 3s`. The first pod is let
through; the other two are held, and the pacer would have no room for them until the first is Ready (about
10 s). They are evicted once held for 3 s, well before that, regardless of the pacer; their owner's
replacements are let through against its reservation (a ticket, the chain's held-since carried over), not
held again; all three end Ready. The pacer is exceeded only by those two released pods (3 started while it
allows 1, then 2 once the first is Ready)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.cluster.measure.grouprun import run_group
from sim.cluster.scenario import Scenario, parse_scenario
from tests.backends import Backend
from tests.groups_e2e.evict import check_every_hold_released_once, replacements, seconds

TIME_SCALE = 10.0
MAX_BLOCKED = 3.0  # wall seconds, as the controller counts
POLICIES = {
    "staggeringPolicies": [
        {
            "name": "one-at-a-time",
            "labelSelector": {"matchLabels": {"slow": "1"}},
            "pacer": {"maxConcurrent": {"value": 1}},
            "maxBlockedDuration": f"{MAX_BLOCKED:g}s",
            "mode": "evict",
        }
    ],
    "nodePolicies": [
        {"name": "roomy", "throttleConfig": {"maxConcurrent": {"value": 8}}, "holdTimeout": "5m"}
    ],
}


def scenario_for(namespace: str) -> Scenario:
    return parse_scenario(
        {
            "name": "evict-max-blocked",
            "timeScale": TIME_SCALE,
            "deadlineSeconds": 900,
            "nodes": {"count": 1, "cores": 4, "memory": "16Gi"},
            "stagger": {"enabled": True, "hostPort": 0, "policies": yaml.safe_dump(POLICIES)},
            "workloads": [
                {
                    "kind": "Deployment",
                    "name": "slow",
                    "namespace": namespace,
                    "replicas": 3,
                    "cpuSeconds": 100,
                    "livenessSeconds": None,
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "labels": {"slow": "1"},
                }
            ],
        }
    )


async def test_a_pod_held_for_max_blocked_duration_is_evicted_and_its_replacement_goes(
    backend: Backend, tmp_path: Path
) -> None:
    run = await run_group(scenario_for(backend.namespace), api=backend.api, work_dir=tmp_path)
    assert run.all_ready_seconds is not None, f"not all Ready: {run.timeline[-10:]}\n{run.controller_log}"
    check_every_hold_released_once(run)
    traces = list(run.pod_traces.values())
    held = run.held()
    assert len(held) == 2, traces
    first_ready = min(t.ready_at for t in traces if t.ready_at is not None)
    for trace in held:
        assert trace.deleted_at is not None, trace
        blocked = (trace.deleted_at - trace.seen_at) / TIME_SCALE
        # Held its maxBlockedDuration (less the moment between admission and the watch seeing it) ...
        assert blocked >= MAX_BLOCKED - 0.5, (blocked, trace)
        # ... and released then, not when the pacer had room (once the first pod was Ready).
        assert trace.deleted_at < first_ready, (trace, first_ready)
    replaced = replacements(run)
    assert len(replaced) == 2, traces
    chain_start = min(seconds(t.held_since) for t in held)
    for trace in replaced:
        # Let through against the reservation, carrying when the chain's hold began; never held.
        assert trace.hold is None and not trace.staggered, trace
        assert abs(seconds(trace.held_since) - chain_start) <= 1.0, (trace, chain_start)
        assert trace.ready_at is not None, trace
    assert run.metric("stagger_controller_evict_admissions_total", outcome="admit", basis="paced") == 1
    assert sum(1 for t in traces if t.ready_at is not None) == 3
    # Only the two pods released by maxBlockedDuration went over the pacer.
    assert max(p.started for p in run.timeline) <= 3, run.timeline
    assert all(p.allowance is not None and p.started - p.allowance <= 2 for p in run.violations), (
        run.violations
    )
    assert run.restarts == 0
