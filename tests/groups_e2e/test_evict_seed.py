"""The seed scenario in `evict` mode, end to end on the simulated cluster (sim's kubelets, a real lockd per
node, the real controller as the mutating webhook and eviction reconciler), on the API emulator or the real
control plane (`pytest --control-plane`): two Deployments in two namespaces, 40 pods in one image-pull group
(exponential 4/4/16), once with each hold: `nodeSelector` (held pods stay Pending) and `stub` (held pods are
scheduled and idle in their blocking init container).

Judged from the pods over time (sim.cluster.measure.groupwatch) and the controller's counters at the end: the pods
started never exceed the pacer's allowance, and reach it (4, then 16 or more before 16 are Ready); every pod
ends Ready with no restart; every held pod carried its hold and was evicted; holds = evictions = owners'
replacements let through against their reservation (by the pods' annotations and by
`stagger_controller_evictions_total` and `stagger_controller_evict_admissions_total`), no eviction refused,
and no replacement held again; at the end no reservation is left (/status)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cluster.measure.grouprun import run_group
from tests.backends import Backend
from tests.groups_e2e.evict import check_every_hold_released_once, has_its_hold, with_policy
from tests.groups_e2e.seed import check_4_then_16_then_all, seed_scenario


@pytest.mark.parametrize(
    "hold", [pytest.param("nodeSelector", id="nodeSelector"), pytest.param("stub", id="stub")]
)
async def test_the_seed_group_starts_4_then_16_then_all_by_evictions(
    hold: str, backend: Backend, tmp_path: Path
) -> None:
    async with seed_scenario(backend, mode="evict") as scenario:
        run = await run_group(with_policy(scenario, hold=hold), api=backend.api, work_dir=tmp_path)
    check_4_then_16_then_all(run)

    held = run.held()
    # 40 pods, 4 allowed at first: most are held at admission, each with its hold.
    assert len(held) >= 20, len(held)
    assert all(t.staggered and t.hold == hold and has_its_hold(t, hold) for t in held), held[:3]
    check_every_hold_released_once(run)
    # Every pod seen is one of the 40 that end Ready or a held pod evicted for its replacement.
    assert len(run.pod_traces) == 40 + len(held), (len(run.pod_traces), len(held))
    assert sum(1 for t in run.pod_traces.values() if t.ready_at is not None) == 40
    assert all(t.disrupted for t in held), [t for t in held if not t.disrupted][:3]
    (status,) = run.controller_status
    assert status["reservations"]["count"] == 0, status["reservations"]
    assert status["evictions"]["evicted"] == len(held), status["evictions"]
