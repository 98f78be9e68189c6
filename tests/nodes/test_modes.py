"""Each staggering mode on real nodes, with the session release's group policies (tests/nodes/policies.py:
1 starts, then 3 once it is Ready, then all): a 6-replica Deployment in lock mode, gate mode and evict mode
with each hold (`nodeSelector`: held pods stay Pending; `stub`: held pods are scheduled and idle behind a
blocking init container), and a Job in evict mode. Judged from the pods sampled over time: the pods started
never exceed the pacer's allowance for the pods Ready at that moment, the node limit holds, every pod ends
Ready (or Succeeded) with no restart; pods were held, in gate mode by the scheduling gate, and in evict mode
the held pods were evicted and replaced; the Job completes with no failure counted."""

from __future__ import annotations

import json

import pytest

from stagger import pacers
from stagger.policy import parse_policy_text
from tests.nodes.kube import Herd, Kube, Release, restarts, wait_for, workload
from tests.nodes.policies import MODE_LABEL, MODES, NODE_LIMIT, POLICIES

# The session release's pacer (exponential 1/3/3), read as the controller reads it.
PACER = parse_policy_text(json.dumps(POLICIES)).staggering_policies[0].pacer


def allowance(ready: int) -> int:
    """Pods of the group that may have started with `ready` Ready: 1, then 3 x Ready (3 with 1, 6 with 2),
    then any number once 3 are."""
    limit = pacers.allowance(PACER, ready=ready)
    return 1 << 30 if limit is None else limit


def check_paced(herd: Herd, release: Release) -> None:
    over = [s for s in herd.samples if s.started > allowance(s.ready)]
    assert not over, f"{over[:5]}\n{release.group_diagnostics()}"
    assert any(s.started == 1 and s.ready == 0 for s in herd.samples), herd.samples[:20]
    assert herd.max_starting_per_node() <= NODE_LIMIT


@pytest.mark.parametrize("mode", [pytest.param(key, id=key) for key in MODES])
def test_a_group_is_paced_in_each_mode(mode: str, stagger: Release, kube: Kube) -> None:
    namespace = kube.namespace(f"mode-{mode}")
    try:
        with Herd(kube, namespace, "app=web") as herd:
            kube.apply(workload("web", namespace, replicas=6, cpu_seconds=1.0, labels={MODE_LABEL: mode}))
            herd.wait_ready(6, timeout=180)
        check_paced(herd, stagger)
        pods = kube.pods(namespace, "app=web")
        assert len(pods) == 6 and all(restarts(p) == 0 for p in pods)
        assert herd.held, "no pod was held"
        if mode == "gate":
            assert herd.gated, "no pod carried the scheduling gate"
        if mode.startswith("evict"):
            # Each held pod was evicted once, and its replacement let through against its owner's reservation.
            assert herd.gone() >= herd.held - {p["metadata"]["name"] for p in pods}
            assert herd.gone(), "no held pod was evicted"
    finally:
        kube.delete_namespace(namespace)


def test_a_job_in_evict_mode_completes_without_a_failure(stagger: Release, kube: Kube) -> None:
    namespace = kube.namespace("mode-job")
    try:
        job = workload(
            "batch",
            namespace,
            replicas=5,
            cpu_seconds=1.0,
            labels={MODE_LABEL: "evict-nodeselector"},
            kind="Job",
            exit_after=1.0,
        )
        with Herd(kube, namespace, "app=batch") as herd:
            kube.apply(job)

            def complete() -> dict | None:
                status = kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/batch").get("status", {})
                return status if status.get("succeeded") == 5 else None

            status = wait_for("the Job's 5 completions", complete, timeout=180)
        assert int(status.get("failed") or 0) == 0, status
        check_paced(herd, stagger)
        assert herd.held and herd.gone(), (herd.held, herd.gone())
    finally:
        kube.delete_namespace(namespace)
