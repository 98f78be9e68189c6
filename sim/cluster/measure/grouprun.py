"""One run of a staggering-group scenario on a simulated cluster: the workloads applied, the group judged
from the pods' states over time (`sim.cluster.measure.groupwatch`) until every pod is Ready or the deadline passes.
Used by `python -m sim groups` and by the end-to-end tests (tests/groups_e2e), which also read what the
controller counted (`GroupRun.controller_metrics`: every running replica's /metrics at the end, summed;
`controller_status`: each one's /status `groups` section)."""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from sim.cluster.backend import ApiBackend
from sim.cluster.kubernetes.workloads.statefulset import STATEFULSETS
from sim.cluster.launchers.controllerproc import ControllerProcess
from sim.cluster.measure.groupwatch import GroupPoint, GroupWatch, PodEvent, PodTrace
from sim.cluster.measure.progress import ProgressWatch, Target
from sim.cluster.scenario import Scenario, ScenarioError, workload_manifest
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.objects import Obj
from stagger.policy import parse_policy_text

__all__ = ["During", "Edit", "GroupRun", "controller_metrics", "controller_statuses", "run_group"]

logger = logging.getLogger(__name__)

During = Callable[[SimCluster, GroupWatch], Awaitable[None]]
"""Something to do while the group starts (kill a controller replica, say), once the workloads are applied."""

Edit = Callable[[Obj], Obj]
"""Changes a workload's manifest before it is applied (a label on a Job, a Deployment made a StatefulSet)."""

PROBES = re.compile(r"probes on (http://[\d.]+:\d+)")


@dataclass(frozen=True)
class GroupRun:
    mode: str
    pods: int
    all_ready_seconds: float | None
    """Simulated seconds from applying the workloads until every pod was Ready; None if not reached."""
    violations: list[GroupPoint]
    """Moments when more pods had started than the pacer allowed for the Ready count."""
    timeline: list[GroupPoint]
    restarts: int
    controller_log: str
    pod_traces: dict[str, PodTrace] = field(default_factory=dict)
    """Every pod of the group seen, by uid (`GroupWatch.pods`)."""
    log: list[PodEvent] = field(default_factory=list)
    controller_metrics: dict[str, float] = field(default_factory=dict)
    """The controller's counters at the end, summed over the replicas still running: sample name with
    its labels sorted, `stagger_controller_evictions_total{result="evicted"}`."""
    controller_status: list[dict[str, Any]] = field(default_factory=list)
    """The `groups` section of each running replica's /status at the end."""

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for sample, value in self.controller_metrics.items():
            sample_name, _, rest = sample.partition("{")
            if sample_name != name:
                continue
            have = dict(_LABEL.findall(rest))
            if all(have.get(k) == v for k, v in labels.items()):
                total += value
        return total

    def held(self) -> list[PodTrace]:
        """The pods held at admission (evict mode)."""
        return [trace for trace in self.pod_traces.values() if trace.hold is not None]

    def admitted(self) -> list[PodTrace]:
        """The pods let through at admission in evict mode (a ticket)."""
        return [trace for trace in self.pod_traces.values() if trace.ticket is not None]

    def most_started(self, low: int, high: int) -> int:
        """The most pods started at once while `low` to `high` pods were Ready."""
        return max((p.started for p in self.timeline if low <= p.ready <= high), default=0)


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def run_group(
    scenario: Scenario,
    *,
    api: ApiBackend,
    during: During | None = None,
    edit: Edit | None = None,
    **cluster: Any,
) -> GroupRun:
    """Run `scenario` (stagger on, its first staggering policy judged) on `api`; `edit` changes each
    workload's manifest before it is applied; `cluster` overrides ClusterSettings fields."""
    staggering = parse_policy_text(scenario.stagger.policies).staggering_policies
    if not staggering:
        raise ScenarioError("stagger.policies: no staggeringPolicies to judge")
    policy = staggering[0]
    settings = ClusterSettings.from_scenario(scenario, **cluster)
    async with (
        SimCluster(api=api, settings=settings) as sim,
        GroupWatch(
            client=sim.client, clock=sim.clock, pacer=policy.pacer, selector=policy.label_selector
        ) as group,
        ProgressWatch(client=sim.client, clock=sim.clock, target=Target.of(scenario)) as progress,
    ):
        if edit is None:
            await sim.apply_workloads(scenario)
        else:
            stagger = replace(sim.settings.stagger, host_port=sim.host_port or sim.settings.stagger.host_port)
            for workload in scenario.workloads:
                await _apply(sim, edit(workload_manifest(workload, stagger=stagger)))
        if during is not None:
            await during(sim, group)
        reached = await progress.wait_done(deadline_seconds=scenario.deadline_seconds)
        log = sim.controller.log_tail(40) if sim.controller is not None else ""
        metrics: dict[str, float] = {}
        statuses: list[dict[str, Any]] = []
        if sim.controller is not None:
            async with aiohttp.ClientSession() as session:
                metrics = await controller_metrics(sim.controller, session)
                statuses = await controller_statuses(sim.controller, session)
    return GroupRun(
        mode=policy.mode,
        pods=sum(w.replicas for w in scenario.workloads),
        all_ready_seconds=progress.done_at if reached else None,
        violations=list(group.violations),
        timeline=list(group.timeline),
        restarts=progress.restarts,
        controller_log=log,
        pod_traces=dict(group.pods),
        log=list(group.log),
        controller_metrics=metrics,
        controller_status=statuses,
    )


async def _apply(sim: SimCluster, manifest: Obj) -> None:
    """Create a workload; a StatefulSet too (a Deployment's manifest made one by an `Edit`)."""
    if manifest.get("kind") != STATEFULSETS.kind:
        await sim.apply(manifest)
        return
    namespace = str(manifest["metadata"].get("namespace") or "default")
    await sim.ensure_namespace(namespace)
    await sim.client.create(STATEFULSETS, manifest, namespace=namespace)


def _probe_urls(controller: ControllerProcess) -> list[str]:
    """The probe listener of each running replica, from the banner at the top of its log."""
    urls = []
    for replica in controller.replicas:
        if not replica.running:
            continue
        try:
            match = PROBES.search(replica.log_file.read_text(errors="replace"))
        except OSError:
            match = None
        if match:
            urls.append(match[1])
    return urls


async def controller_metrics(
    controller: ControllerProcess, session: aiohttp.ClientSession
) -> dict[str, float]:
    """The counters (`..._total`) and gauges of every running replica's /metrics, summed by sample."""
    totals: dict[str, float] = {}
    for url in _probe_urls(controller):
        try:
            async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("%s/metrics: %r", url, exc)
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                key = f"{sample.name}{{{labels}}}" if labels else sample.name
                totals[key] = totals.get(key, 0.0) + float(sample.value)
    return totals


async def controller_statuses(
    controller: ControllerProcess, session: aiohttp.ClientSession
) -> list[dict[str, Any]]:
    """The `groups` section of every running replica's /status (over TLS, trusting the run's CA)."""
    context = ssl.create_default_context(cafile=str(controller.ca_file))
    sections = []
    for replica in controller.replicas:
        if not replica.running:
            continue
        url = f"https://{controller.spec.host}:{replica.port}/status"
        try:
            async with session.get(url, ssl=context, timeout=aiohttp.ClientTimeout(total=10)) as response:
                doc: Mapping[str, Any] = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            logger.warning("%s: %r", url, exc)
            continue
        sections.append({"replica": replica.identity, **dict(doc.get("groups") or {})})
    return sections
