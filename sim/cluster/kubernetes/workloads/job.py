"""The Job controller's decisions: run pods up to ``parallelism`` until ``completions`` succeeded, count
failures against ``backoffLimit`` through the ``podFailurePolicy``, and the Job's status."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sim.cluster.kubernetes.workloads.actions import (
    BURST_REPLICAS,
    Action,
    Create,
    controlled_by,
    delete_pods,
    deletion_rank,
    pod_from_template,
    status_patch,
)
from sim.cluster.objects import is_terminating, name_of, namespace_of, set_condition, uid_of
from stagger.kube import JOBS, PODS
from stagger.objects import Obj, condition, condition_true
from stagger.podstate import is_pod_finished, is_pod_ready, pod_phase
from stagger.timestamps import format_rfc3339

DEFAULT_BACKOFF_LIMIT = 6


PodOutcome = Literal["succeeded", "failed", "ignored", "failjob"]


@dataclass(frozen=True)
class JobMemory:
    """Outcomes of a Job's pods that are gone from the API (the pods still there are counted from their
    phase). The real controller keeps this on the Job with finalizers; the sim keeps it in memory."""

    outcomes: Mapping[str, PodOutcome] = field(default_factory=dict)


def _exit_codes(pod: Mapping[str, Any], container_name: str | None) -> list[int]:
    codes = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if container_name and status.get("name") != container_name:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated and terminated["exitCode"] != 0:
            codes.append(int(terminated["exitCode"]))
    return codes


def _rule_matches(rule: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    on_codes = rule.get("onExitCodes")
    if on_codes:
        values = set(on_codes.get("values") or [])
        codes = _exit_codes(pod, on_codes.get("containerName"))
        if on_codes.get("operator") == "NotIn":
            return any(c not in values for c in codes)
        return any(c in values for c in codes)
    for pattern in rule.get("onPodConditions") or []:
        cond = condition(pod, str(pattern.get("type")))
        if cond is not None and cond.get("status") == (pattern.get("status") or "True"):
            return True
    return False


def pod_outcome(
    job: Mapping[str, Any], pod: Mapping[str, Any], *, deleted: bool = False
) -> PodOutcome | None:
    """How a Job counts this pod; None while it is still running (and not gone).

    A failed pod (or one deleted before it finished) goes through ``podFailurePolicy``: a matching
    ``Ignore`` rule (e.g. ``onPodConditions: DisruptionTarget`` after an eviction) means it is not
    counted towards ``backoffLimit``, ``FailJob`` fails the Job, ``Count`` (or no match) counts it.
    """
    phase = pod_phase(pod)
    if phase == "Succeeded":
        return "succeeded"
    if phase != "Failed" and not deleted:
        return None
    for rule in ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []:
        if _rule_matches(rule, pod):
            action = rule.get("action")
            if action == "Ignore":
                return "ignored"
            if action == "FailJob":
                return "failjob"
            return "failed"
    return "failed"


def observe_job_pod(
    memory: JobMemory, job: Mapping[str, Any], pod: Mapping[str, Any], *, deleted: bool
) -> JobMemory:
    """Remember the outcome of a pod that is leaving the API (only ``deleted`` pods need remembering)."""
    if not deleted or uid_of(pod) in memory.outcomes:
        return memory
    outcome = pod_outcome(job, pod, deleted=True)
    if outcome is None:
        return memory
    return JobMemory(outcomes={**memory.outcomes, uid_of(pod): outcome})


def job_finished(job: Mapping[str, Any]) -> bool:
    return condition_true(job, "Complete") or condition_true(job, "Failed")


@dataclass(frozen=True)
class JobPods:
    """A Job's pods as its controller counts them."""

    outcomes: Mapping[str, PodOutcome]
    """Every pod's outcome by uid, the pods gone from the API included; running pods have none."""
    active: Sequence[Obj]
    """Pods not finished and not terminating (with ``podReplacementPolicy: Failed``, the default with a
    ``podFailurePolicy``: terminating ones too, which are replaced only once they have failed)."""
    terminating: int

    @property
    def succeeded(self) -> int:
        return sum(1 for o in self.outcomes.values() if o == "succeeded")

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes.values() if o in ("failed", "failjob"))


def count_job_pods(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], memory: JobMemory) -> JobPods:
    owned = controlled_by(pods, job)
    outcomes: dict[str, PodOutcome] = dict(memory.outcomes)
    for pod in owned:
        outcome = pod_outcome(job, pod)
        if outcome is not None:
            outcomes[uid_of(pod)] = outcome
    wait_for_terminal = only_replace_failed_pods(job)
    running = [p for p in owned if not is_pod_finished(p)]
    return JobPods(
        outcomes=outcomes,
        active=[p for p in running if not is_terminating(p) or wait_for_terminal],
        terminating=sum(1 for p in running if is_terminating(p)),
    )


def only_replace_failed_pods(job: Mapping[str, Any]) -> bool:
    """onlyReplaceFailedPods (pkg/controller/job/job_controller.go): ``podReplacementPolicy: Failed``
    (which the API server defaults when a ``podFailurePolicy`` is set), or a ``podFailurePolicy``."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def _completions(spec: Mapping[str, Any]) -> int | None:
    """None: a work queue (parallelism without completions), done once one pod succeeded and none runs."""
    value = spec.get("completions", None if "parallelism" in spec and "completions" not in spec else 1)
    return None if value is None else int(value)


def reconcile_job(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], memory: JobMemory, *, now: dt.datetime
) -> list[Action]:
    """Run pods up to ``parallelism`` until ``completions`` succeeded; fail after ``backoffLimit`` failures.

    With ``podReplacementPolicy: Failed`` (or a ``podFailurePolicy``) a terminating pod is replaced only
    once it has failed; otherwise as soon as it is terminating. Pods restarted in place
    (``restartPolicy: OnFailure``) are not counted against ``backoffLimit`` here.
    """
    counted = count_job_pods(job, pods, memory)
    stamp = format_rfc3339(now.timestamp(), digits=0)
    conditions = list((job.get("status") or {}).get("conditions") or [])
    actions: list[Action] = []
    completion_time: str | None = None
    if not job_finished(job):
        actions, conditions, completion_time = _job_step(job, counted, conditions, stamp=stamp)
    status = _job_status(job, counted, conditions, completion_time=completion_time, stamp=stamp)
    return actions + status_patch(JOBS, job, status)


def _job_step(
    job: Mapping[str, Any], counted: JobPods, conditions: list[dict[str, Any]], *, stamp: str
) -> tuple[list[Action], list[dict[str, Any]], str | None]:
    """What an unfinished Job does now: (writes, its conditions, its completion time if it completes)."""
    spec = job.get("spec") or {}
    completions = _completions(spec)
    stop = delete_pods(p for p in counted.active if not is_terminating(p))
    failure = _failure(counted, backoff_limit=int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)))
    if failure is not None:
        reason, message = failure
        return (
            stop,
            set_condition(
                conditions, kind="Failed", status="True", now=stamp, reason=reason, message=message
            ),
            None,
        )
    if (completions is not None and counted.succeeded >= completions) or (
        completions is None and counted.succeeded > 0 and not counted.active
    ):
        complete = set_condition(
            conditions,
            kind="Complete",
            status="True",
            now=stamp,
            reason="CompletionsReached",
            message="Reached expected number of succeeded pods",
        )
        return stop, complete, stamp
    if spec.get("suspend"):
        return stop, conditions, None
    return _run_pods(job, counted, completions=completions), conditions, None


def _failure(counted: JobPods, *, backoff_limit: int) -> tuple[str, str] | None:
    """(reason, message) of the Failed condition when the Job has failed."""
    if any(o == "failjob" for o in counted.outcomes.values()):
        return "PodFailurePolicy", "Pod failed and matched a FailJob rule of the pod failure policy"
    if counted.failed > backoff_limit:
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    return None


def _run_pods(job: Mapping[str, Any], counted: JobPods, *, completions: int | None) -> list[Action]:
    """Create pods up to what is still needed (at most ``parallelism``), or delete the extra ones."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism", 1))
    if completions is None:
        want = parallelism if counted.succeeded == 0 else 0
    else:
        want = min(parallelism, completions - counted.succeeded)
    active = counted.active
    if want > len(active):
        body = pod_from_template(
            spec.get("template") or {},
            owner=job,
            owner_resource=JOBS,
            extra_labels={
                "batch.kubernetes.io/controller-uid": uid_of(job),
                "batch.kubernetes.io/job-name": name_of(job),
                "controller-uid": uid_of(job),
                "job-name": name_of(job),
            },
        )
        count = min(want - len(active), BURST_REPLICAS)
        return [Create(PODS, namespace_of(job), copy.deepcopy(body)) for _ in range(count)]
    if want < len(active):
        victims = sorted((p for p in active if not is_terminating(p)), key=deletion_rank)
        return delete_pods(victims[: len(active) - want])
    return []


def _job_status(
    job: Mapping[str, Any],
    counted: JobPods,
    conditions: list[dict[str, Any]],
    *,
    completion_time: str | None,
    stamp: str,
) -> dict[str, Any]:
    current = job.get("status") or {}
    status: dict[str, Any] = {}
    if completion_time is not None and not current.get("completionTime"):
        status["completionTime"] = completion_time
    status.update(
        {
            "active": 0 if job_finished(job) else sum(1 for p in counted.active if not is_terminating(p)),
            "succeeded": counted.succeeded,
            "failed": counted.failed,
            "ready": sum(1 for p in counted.active if is_pod_ready(p)),
            "terminating": counted.terminating,
        }
    )
    if conditions:
        status["conditions"] = conditions
    if not current.get("startTime"):
        status["startTime"] = stamp
    return status
