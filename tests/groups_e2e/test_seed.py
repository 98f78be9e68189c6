"""The seed scenario end to end on the simulated cluster (sim's kubelets, a real lockd per node, real init
clients, the real controller as the mutating webhook), on the API emulator or the real control plane
(`pytest --control-plane`): two Deployments in two namespaces, the same image, 40 pods in one image-pull
group (exponential 4/4/16), in `lock` and in `gate` mode.

Judged from the pods' states over time (sim.cluster.measure.groupwatch): the pods started never exceed the pacer's
allowance for the Ready count at that moment; they reach it (4 started while the allowance is 4, 16 or
more before 16 are Ready); every pod ends Ready, with no container restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cluster.measure.grouprun import run_group
from tests.backends import Backend
from tests.groups_e2e.seed import check_4_then_16_then_all, seed_scenario


@pytest.mark.parametrize("mode", ["lock", "gate"])
async def test_the_seed_group_starts_4_then_16_then_all(mode: str, backend: Backend, tmp_path: Path) -> None:
    async with seed_scenario(backend, mode=mode) as scenario:
        run = await run_group(scenario, api=backend.api, work_dir=tmp_path)
    check_4_then_16_then_all(run)
