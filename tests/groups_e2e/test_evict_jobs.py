"""Jobs and bare pods in `evict` mode, end to end on the simulated cluster, on the API emulator or the real
control plane (`pytest --control-plane`). One group (label `batch: "1"`, at most 4 starting at once) holds:

* a Job with `backoffLimit: 0`, 30 completions, 6 at a time: the jobs webhook (`POST /mutate/jobs`) gives it
  the `Ignore` rule for DisruptionTarget and marks its template evictable; admission holds the pods the
  pacer has no room for, the leader evicts them as it has, the Job controller replaces them, and the Job
  completes with no failure counted (Complete, `status.failed` 0, 30 succeeded), every hold released once;
* a Job whose own podFailurePolicy fails the Job on DisruptionTarget: the jobs webhook leaves it alone with
  an admission warning, its pods' admission warns too, and they are never held: paced by their init client
  (lock mode, granted by lockd), and the Job completes;
* a bare pod (no controller owner): an admission warning, never held, paced by its init client, Ready.

Throughout, the pods started never exceed the pacer's allowance (finished pods no longer count)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import yaml

from sim.cluster.measure.grouprun import run_group
from sim.cluster.measure.groupwatch import GroupWatch
from sim.cluster.scenario import Workload, parse_scenario, pod_template, workload_manifest
from sim.cluster.simcluster import SimCluster
from stagger.kube import JOBS, PODS
from stagger.objects import Obj, condition_true
from tests.backends import Backend
from tests.groups_e2e.evict import (
    NAMES,
    check_every_hold_released_once,
    create_with_warnings,
    never_held,
)

POLICIES = {
    "staggeringPolicies": [
        {
            "name": "batch",
            "labelSelector": {"matchLabels": {"batch": "1"}},
            "pacer": {"maxConcurrent": {"value": 4}},
            "mode": "evict",
        }
    ],
    "nodePolicies": [
        {"name": "roomy", "throttleConfig": {"maxConcurrent": {"value": 16}}, "holdTimeout": "2m"}
    ],
}
POD = {"cpuSeconds": 4, "livenessSeconds": None, "requests": {"cpu": "100m", "memory": "64Mi"}}
STRICT_RULE = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}
# Few more than the pacer lets start: the real Job controller delays new pods by 10 s, doubling per pod
# failed since the last success (up to 6 min), ignored failures (an eviction matching the Ignore rule)
# included (kubernetes/kubernetes#119434, #130881), and replaces an evicted pod only once it is Failed
# (podReplacementPolicy Failed, implied by a podFailurePolicy): with 10 at a time, 6 held pods evicted at
# once stall the Job for minutes.
PARALLELISM = 6
WITHIN = 120.0  # wall seconds for the strict Job and the bare pod (they take a few)


def scenario_for(namespace: str) -> Any:
    return parse_scenario(
        {
            "name": "evict-jobs",
            "timeScale": 10,
            "deadlineSeconds": 1200,
            "nodes": {"count": 2, "cores": 4, "memory": "16Gi"},
            "stagger": {"enabled": True, "hostPort": 0, "policies": yaml.safe_dump(POLICIES)},
            "workloads": [
                {
                    "kind": "Job",
                    "name": "work",
                    "namespace": namespace,
                    "parallelism": PARALLELISM,
                    "completions": 30,
                    "backoffLimit": 0,
                    "runSeconds": 2,
                    "labels": {"batch": "1"},
                    **POD,
                }
            ],
        }
    )


def enabled_job(manifest: Obj) -> Obj:
    """The jobs webhook selects Jobs by the enable label on the Job itself (as the chart registers it)."""
    if manifest["kind"] == "Job":
        manifest["metadata"]["labels"][NAMES.enable_label] = "1"
    return manifest


async def test_jobs_and_bare_pods_in_evict_mode(backend: Backend, tmp_path: Path) -> None:
    namespace = backend.namespace
    scenario = scenario_for(namespace)
    side: dict[str, Any] = {}

    async def strict_job_and_bare_pod(sim: SimCluster, group: GroupWatch) -> None:
        stagger = sim.settings.stagger
        strict = Workload(
            kind="Job",
            name="strict",
            namespace=namespace,
            replicas=2,
            completions=2,
            backoff_limit=0,
            run_seconds=2,
            cpu_seconds=4,
            liveness_seconds=None,
            labels={"batch": "1"},
            pod_failure_policy={"rules": [STRICT_RULE]},
        )
        manifest = enabled_job(workload_manifest(strict, stagger=stagger))
        loner = Workload(
            kind="Deployment", name="loner", namespace=namespace, cpu_seconds=4, labels={"batch": "1"}
        )
        template = pod_template(loner, stagger=stagger)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": "loner"}}
        pod["spec"] = template["spec"]
        async with aiohttp.ClientSession() as session:
            job, side["job warnings"] = await create_with_warnings(
                backend.api, session, JOBS, manifest, namespace=namespace
            )
            _, side["pod warnings"] = await create_with_warnings(
                backend.api, session, PODS, pod, namespace=namespace
            )
        side["strict uid"] = job["metadata"]["uid"]
        side["strict template"] = job["spec"]["template"]

        def done() -> bool:
            strict_pods = [t for t in group.pods.values() if t.owner == side["strict uid"]]
            loner_ready = any(t.name == "loner" and t.ready_at is not None for t in group.pods.values())
            return loner_ready and sum(1 for t in strict_pods if t.finished == "Succeeded") == 2

        assert await group.wait_until(done, within=WITHIN), [
            t for t in group.pods.values() if t.owner == side["strict uid"] or t.name == "loner"
        ]

    run = await run_group(
        scenario, api=backend.api, during=strict_job_and_bare_pod, edit=enabled_job, work_dir=tmp_path
    )
    assert run.all_ready_seconds is not None, (
        f"the Job did not finish: {run.timeline[-10:]}\n{run.controller_log}"
    )
    assert run.violations == [], run.violations[:5]

    # The Job staggered by evictions completes with no failure counted.
    work = await backend.client.get(JOBS, name="work", namespace=namespace)
    rules = work["spec"]["podFailurePolicy"]["rules"]
    assert [_pattern(r) for r in rules] == [("Ignore", "DisruptionTarget")], rules
    assert work["spec"]["template"]["metadata"]["annotations"].get(NAMES.evictable_annotation) == "1"
    assert condition_true(work, "Complete"), work["status"]
    assert not condition_true(work, "Failed"), work["status"]
    assert int(work["status"].get("failed") or 0) == 0, work["status"]
    assert work["status"]["succeeded"] == 30, work["status"]
    work_pods = [t for t in run.pod_traces.values() if t.owner == work["metadata"]["uid"]]
    held = [t for t in work_pods if t.hold is not None]
    assert held, "no pod of the Job was held: nothing was staggered by evictions"
    # Evicted while held: never ran (on the real control plane PodGC marks them Failed, ignored by the Job).
    assert all(t.disrupted and t.finished != "Succeeded" and t.granted_at is None for t in held), held[:3]
    assert sum(1 for t in work_pods if t.finished == "Succeeded") == 30
    let_through = [t for t in work_pods if t.hold is None]
    assert all(t.finished == "Succeeded" for t in let_through), let_through
    check_every_hold_released_once(run)

    # The Job with its own DisruptionTarget rule: warned, left alone, its pods paced by lockd, never held.
    assert any("DisruptionTarget" in w for w in side["job warnings"]), side["job warnings"]
    assert NAMES.evictable_annotation not in (side["strict template"]["metadata"].get("annotations") or {})
    strict = await backend.client.get(JOBS, name="strict", namespace=namespace)
    strict_rules = strict["spec"]["podFailurePolicy"]["rules"]
    assert [_pattern(r) for r in strict_rules] == [("FailJob", "DisruptionTarget")], strict_rules
    assert condition_true(strict, "Complete"), strict["status"]
    strict_pods = [t for t in run.pod_traces.values() if t.owner == side["strict uid"]]
    assert len(strict_pods) == 2 and all(never_held(t) and t.granted_at is not None for t in strict_pods), (
        strict_pods
    )

    # The bare pod: warned, never held, paced by its init client.
    assert any("bare pod" in w and "lock mode" in w for w in side["pod warnings"]), side["pod warnings"]
    (loner,) = [t for t in run.pod_traces.values() if t.name == "loner"]
    assert (
        never_held(loner)
        and loner.owner == ""
        and loner.granted_at is not None
        and loner.ready_at is not None
    )
    assert loner.deleted_at is None, loner


def _pattern(rule: Obj) -> tuple[str, str]:
    """A podFailurePolicy rule as (action, the condition type it matches, with status True, the API
    server's default)."""
    (pattern,) = rule["onPodConditions"]
    assert pattern.get("status", "True") == "True", rule
    return rule["action"], pattern["type"]
