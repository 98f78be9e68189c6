"""The leader killed mid-herd in `evict` mode: the seed scenario (40 pods, one group, exponential 4/4/16, held
by nodeSelector) on the simulated cluster, on the API emulator or the real control plane
(`pytest --control-plane`), with two controller replicas electing their leader on a Lease (3 s lease, 2 s
renew deadline, 0.5 s retry) behind stand-ins for the chart's Services: admission to any replica (the one
that does not lead asks the leader through `--leader-url`), the eviction reconciler on the leader.

Once the 40 pods are admitted (the first let through, the others held), the leader is killed (SIGKILL: no release, its
reservations lost); the other replica takes over after the lease expires, rebuilds its counts from the pods
and evicts the held pods as the pacer allows. Judged: the herd completes (40 Ready, no restart), the group
never exceeds its allowance, no pod is evicted twice (one `StaggerReleased` Event per pod at most, every
held pod deleted once, and as many Eviction requests as held pods evicted, plus only those the surviving
leader counted refused)."""

from __future__ import annotations

from pathlib import Path

from sim.cluster.measure.grouprun import run_group
from tests.backends import Backend
from tests.groups_e2e.evict import events_by_pod
from tests.groups_e2e.seed import kill_the_leader, seed_scenario


async def test_the_leader_killed_mid_herd_in_evict_mode(backend: Backend, tmp_path: Path) -> None:
    leaders: list[str | None] = []

    verb = "post" if backend.real else "create"
    evictions_before = await backend.requests(verb=verb, resource="pods/eviction")
    async with seed_scenario(backend, mode="evict", controller_replicas=2) as scenario:
        run = await run_group(
            scenario,
            api=backend.api,
            # Every pod of the herd admitted (let through or held) before the kill: pods created while the
            # admission Service still sends some requests to the dead replica are admitted unchanged
            # (failurePolicy Ignore), unpaced, by design.
            during=kill_the_leader(
                leaders,
                once=lambda group: bool(
                    group.timeline and group.timeline[-1].started >= 4 and len(group.pods) >= 40
                ),
            ),
            work_dir=tmp_path,
            controller_lease=(3.0, 2.0, 0.5),
        )
        evictions = await backend.requests(verb=verb, resource="pods/eviction") - evictions_before
        namespaces = sorted({w.namespace for w in scenario.workloads})
        released = await events_by_pod(backend.client, namespaces, reason="StaggerReleased")
    assert len(leaders) == 2 and leaders[0] != leaders[1], leaders
    assert run.all_ready_seconds is not None, f"not all Ready: {run.timeline[-10:]}\n{run.controller_log}"
    assert run.violations == [], run.violations[:5]
    assert run.timeline[-1].ready == 40
    assert run.restarts == 0

    held = run.held()
    assert held, "no pod was held"
    evicted = [t for t in held if t.deleted_at is not None]
    assert len(evicted) == len(held), [t for t in held if t.deleted_at is None][:3]
    twice = {uid: n for uid, n in released.items() if n > 1}
    assert not twice, twice
    assert set(released) <= {t.uid for t in held}, "StaggerReleased on a pod that was not held"
    # One Eviction request per evicted pod; any more were refused (404/409: gone) and counted by the
    # surviving leader (the killed one's counters are lost with it: they may only have been successes).
    refused = sum(
        run.metric("stagger_controller_evictions_total", result=r) for r in ("gone", "throttled", "error")
    )
    assert len(evicted) <= evictions <= len(evicted) + refused, (evictions, len(evicted), refused)
