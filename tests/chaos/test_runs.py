"""Short chaos runs (`python -m sim chaos --size small`): two seeds whose groups cover every mode (lock,
gate, evict, evict with stub holds), each with about 20 seconds of API faults (errors, 429s, resets, slow
answers, cut and expired watches, a 4 s outage) and two process kills (lockd, the controller leader, or
both), and one node's lockd clock 30 s off; on the API emulator, and the first seed on the real control
plane too (`make test-real`; the fault proxy speaks TLS to it). Each must pass every check of
`sim.chaos.run`: no pacer or node limit exceeded (beyond a counted fail-open), every pod Ready or its Job
complete, no Job failure counted, no replacement held again, no lockd slot left, no traceback in any log.
A failure names the command that replays it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sim.chaos.faults import FaultSettings
from sim.chaos.herd import random_herd
from sim.chaos.run import ChaosSettings, run_chaos
from sim.cli.apis import open_api

pytestmark = pytest.mark.e2e

MINUTES = 0.35
OUTAGE = 4.0


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(1, id="seed-1-evict-stub-and-lock"),
        pytest.param(25, id="seed-25-gate-and-evict"),
    ],
)
async def test_a_short_chaos_run_keeps_every_promise(
    seed: int, control_plane_kind: str, tmp_path: Path
) -> None:
    if control_plane_kind == "real" and seed != 1:
        pytest.skip("one seed on the real control plane keeps make test-real short")
    herd = random_herd(seed, size="small")
    settings = ChaosSettings(
        seed=seed,
        minutes=MINUTES,
        faults=replace(FaultSettings(), outage_seconds=OUTAGE),
        kills=2,
        work_dir=tmp_path,
    )
    async with open_api("real" if control_plane_kind == "real" else "emulator", quiet=True) as api:
        result = await run_chaos(settings, herd=herd, api=api.backend)
    replay = (
        f"python -m sim chaos --seed {seed} --minutes {MINUTES} --outage {OUTAGE:g}s --size small "
        f"--control-plane {control_plane_kind}"
    )
    assert result.ok, f"{result.summary()}\nreplay: {replay}"
    assert sum(result.faults.values()) > 0 and result.kills, result.summary()
    assert result.started >= herd.pods, result.summary()
