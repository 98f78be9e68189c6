"""A StatefulSet in `evict` mode, end to end on the simulated cluster, on the API emulator (sim's StatefulSet
controller) or the real control plane (`pytest --control-plane`): 4 pods with `podManagementPolicy:
Parallel` (all created at once) in a group that lets one start at a time (maxConcurrent 1, hold by
nodeSelector). One pod is let through; the other three are held, then evicted one by one as the pod
before them is Ready, in the order they were held (oldest first). The StatefulSet recreates each under
the same name (a new uid: the eviction's uid precondition is what keeps the new pod from being evicted in
the old one's place), and admission lets the new pod through against the set's reservation, never held
again. All 4 end Ready, never more than one starting."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.cluster.measure.grouprun import run_group
from sim.cluster.scenario import Scenario, parse_scenario
from stagger.objects import Obj
from tests.backends import Backend
from tests.groups_e2e.evict import check_every_hold_released_once, replacements

POLICIES = {
    "staggeringPolicies": [
        {
            "name": "one-at-a-time",
            "labelSelector": {"matchLabels": {"ordered": "1"}},
            "pacer": {"maxConcurrent": {"value": 1}},
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
            "name": "evict-statefulset",
            "timeScale": 10,
            "deadlineSeconds": 1200,
            "nodes": {"count": 2, "cores": 4, "memory": "16Gi"},
            "stagger": {"enabled": True, "hostPort": 0, "policies": yaml.safe_dump(POLICIES)},
            "workloads": [
                {
                    # Made a StatefulSet by `stateful` below; judged as a Deployment would be (4 Ready).
                    "kind": "Deployment",
                    "name": "db",
                    "namespace": namespace,
                    "replicas": 4,
                    "cpuSeconds": 20,
                    "livenessSeconds": None,
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "labels": {"ordered": "1"},
                }
            ],
        }
    )


def stateful(manifest: Obj) -> Obj:
    spec = manifest["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": manifest["metadata"],
        "spec": {
            "replicas": spec["replicas"],
            "serviceName": manifest["metadata"]["name"],
            "podManagementPolicy": "Parallel",
            "selector": spec["selector"],
            "template": spec["template"],
        },
    }


async def test_a_statefulsets_pods_are_held_and_released_in_order(backend: Backend, tmp_path: Path) -> None:
    run = await run_group(scenario_for(backend.namespace), api=backend.api, edit=stateful, work_dir=tmp_path)
    assert run.all_ready_seconds is not None, f"not all Ready: {run.timeline[-10:]}\n{run.controller_log}"
    assert run.violations == [], run.violations[:5]
    check_every_hold_released_once(run)
    traces = list(run.pod_traces.values())
    held = run.held()
    assert len(held) == 3, traces
    assert all(t.owner_kind == "StatefulSet" for t in traces), traces
    # Released one at a time, oldest hold first.
    by_hold = [t.name for t in sorted(held, key=lambda t: (t.held_since, t.name))]
    by_release = [t.name for t in sorted(held, key=lambda t: t.deleted_at or 0.0)]
    assert by_release == by_hold, (by_release, by_hold)
    # Each held pod came back under its own name, a new pod let through against the reservation.
    replaced = replacements(run)
    assert sorted(t.name for t in replaced) == sorted(t.name for t in held), (replaced, held)
    for old in held:
        (new,) = [t for t in replaced if t.name == old.name]
        assert new.uid != old.uid and new.hold is None and new.ready_at is not None, (old, new)
        assert old.deleted_at is not None and new.seen_at >= old.deleted_at, (old, new)
    # The next pod is released only once the one before it is Ready.
    ready_times = sorted(t.ready_at for t in traces if t.ready_at is not None)
    releases = sorted(t.deleted_at for t in held if t.deleted_at is not None)
    assert len(ready_times) == 4
    assert all(release >= ready for release, ready in zip(releases, ready_times, strict=False)), (
        releases,
        ready_times,
    )
    assert run.restarts == 0
