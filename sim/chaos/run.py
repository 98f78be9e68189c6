"""One chaos run: a randomized herd (`sim.chaos.herd`) on a simulated cluster on the API emulator, with lockd
and the controller (two replicas, leader election) reaching the API server through the fault proxy
(`sim.chaos.proxy`), lockd and the controller leader killed and restarted, and then the checks:

- safety: per group, never more pods started than its pacer allows for the Ready count (the group watch of
  `sim.cluster.measure.groupwatch`, which counts pods whose grant is recorded); per node, never more containers
  starting at once than the node policy's maxConcurrent, unless an init client failed open on that node
  (each fail-open is counted on its own, with its cause: the documented fail-open rules);
- liveness: every pod Ready (or its Job complete) before the deadline; the slowest pod's wait from
  creation to Ready against its bound (the init client's max-wait plus the faults' time to notice);
- no loss: every pod created is Ready, finished or replaced; no held pod evicted more than once; no Job
  counts a release as a failure (status.failed 0); no lockd slot left held once every pod is Ready.

The workloads' pods are watched directly (not through the proxy, `sim.chaos.ledger`): the checks see the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, get_args

import aiohttp

from sim.chaos import endstate
from sim.chaos.faults import FaultPlan, FaultSettings
from sim.chaos.herd import GROUP_LABEL, ChaosHerd, ChaosWorkload
from sim.chaos.ledger import PodLedger, PodLife
from sim.chaos.proxy import fault_proxy
from sim.chaos.result import ChaosResult
from sim.cluster.backend import ApiBackend
from sim.cluster.kubernetes.nodeagent import node_name
from sim.cluster.kubernetes.workloads.statefulset import STATEFULSETS
from sim.cluster.measure.groupwatch import GroupWatch, PodTrace
from sim.cluster.measure.progress import ProgressWatch, Target
from sim.cluster.scenario import pod_template, workload_manifest
from sim.cluster.simcluster import ClusterSettings, SimCluster
from stagger.informer import Informer, InformerSettings
from stagger.kube import JOBS, PODS
from stagger.objects import Obj
from stagger.policy import StaggeringPolicy, parse_policy_text
from stagger.selectors import LabelSelector

__all__ = ["ChaosSettings", "run_chaos"]

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 5.0  # the simulated cluster's MutatingWebhookConfiguration timeoutSeconds


@dataclass(frozen=True)
class ChaosSettings:
    seed: int
    minutes: float = 2.0
    """How long faults are injected (wall); the workloads arrive during its first half."""
    faults: FaultSettings = field(default_factory=FaultSettings)
    kills: int = 2
    """Process kills (each restarted after a moment): lockd on a node, the controller leader, or both."""
    settle_seconds: float = 120.0
    """After the faults end, how long (wall) every pod has to become Ready."""
    notice_seconds: float = 60.0
    """Added to a pod's bound: the time to notice a fault (an informer's back-off, a lease expiring)."""
    max_wait_seconds: float = 600.0
    """The init client's max-wait (`STAGGER_MAX_WAIT`, 10m): a pod never waits longer for lockd."""
    slot_settle_seconds: float = 45.0
    """Once every pod is Ready, how long lockd may take to see it (its watch may be in its back-off after
    an outage, up to 30 s) before a slot still held counts as outliving its pod."""
    clock_skew_seconds: float = 30.0
    """One node's lockd runs with its wall clock this far ahead or behind (libfaketime; 0: none), as
    with a node whose NTP is off: the granted-at it writes and reads are skewed, its monotonic clock not."""
    work_dir: Path | None = None


async def _create(sim: SimCluster, herd: ChaosHerd, workload: ChaosWorkload) -> None:
    scenario = herd.scenario()
    (w,) = [x for x in scenario.workloads if x.name == workload.name]
    stagger = replace(sim.settings.stagger, host_port=sim.host_port or sim.settings.stagger.host_port)
    manifest = workload_manifest(w, stagger=stagger)
    manifest["spec"]["template"]["metadata"]["labels"]["chaos-kind"] = workload.kind
    await sim.ensure_namespace(herd.namespace)
    if workload.kind == "StatefulSet":
        spec = manifest["spec"]
        statefulset = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": manifest["metadata"],
            "spec": {
                "replicas": spec["replicas"],
                "serviceName": workload.name,
                "podManagementPolicy": "Parallel",
                "selector": spec["selector"],
                "template": spec["template"],
            },
        }
        await sim.client.create(STATEFULSETS, statefulset, namespace=herd.namespace)
    elif workload.kind == "Pod":
        template = pod_template(w, stagger=stagger)
        template["metadata"]["labels"]["chaos-kind"] = "Pod"
        for i in range(workload.replicas):
            pod = {"apiVersion": "v1", "kind": "Pod", **template}
            pod["metadata"] = {
                **template["metadata"],
                "name": f"{workload.name}-{i}",
                "namespace": herd.namespace,
            }
            await sim.client.create(PODS, pod, namespace=herd.namespace)
    else:
        await sim.apply(manifest)


KillKind = Literal["lockd", "leader", "both"]
"""What one kill of a chaos run kills: a node's lockd, the controller's leader, or both at once. The choice
is drawn from this type's values in this order (a seed's run stays the same)."""


async def _kills(
    sim: SimCluster,
    *,
    rng: random.Random,
    count: int,
    span: float,
    start: float,
    notice: float,
    done: list[str],
) -> None:
    """Kill and restart processes at random moments of the fault span (wall seconds since `start`). A
    restarted controller replica is waited for as long as the faults can last, and the time to notice
    their end: while the API server is down (an outage) it cannot list its pods, so it cannot be Ready
    (a fixed 30 s made `python -m sim chaos --seed 7`, the help's example, fail on the harness itself)."""
    moments = sorted(rng.uniform(span * 0.1, span * 0.8) for _ in range(count))
    async with aiohttp.ClientSession() as session:
        for moment in moments:
            await asyncio.sleep(max(0.0, moment - (time.monotonic() - start)))
            what: KillKind = rng.choice(get_args(KillKind))
            # lockd is killed where it holds the most slots: a restart must rebuild them from the API.
            held = await _slots_by_node(sim, session)
            node = max(sorted(sim.lockds), key=lambda name: (held.get(name, 0), rng.random()))
            controller = sim.controller
            leader = controller.leader if controller is not None else None
            if what in ("lockd", "both"):
                await sim.lockds[node].kill()
                done.append(f"lockd on {node} holding {held.get(node, 0)} slots at {moment:.0f}s")
            if what in ("leader", "both") and controller is not None and leader is not None:
                controller.kill(leader)
                done.append(f"controller leader {leader} at {moment:.0f}s")
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            if what in ("lockd", "both"):
                # Started again as its DaemonSet would, without waiting: during an outage it may take its
                # informers' back-off (up to 30 s) to be ready, and its callers get 503 meanwhile.
                await sim.lockds[node].start()
            if what in ("leader", "both") and controller is not None and leader is not None:
                faults_left = max(0.0, span - (time.monotonic() - start))
                await controller.restart(leader, within=max(30.0, faults_left + notice))


async def run_chaos(settings: ChaosSettings, *, herd: ChaosHerd, api: ApiBackend) -> ChaosResult:
    """Run `herd` under the faults of `settings` on `api`, and check it."""
    if settings.work_dir is not None:
        return await _run_chaos(settings, herd=herd, api=api)
    # The logs must outlive the cluster: they are read for tracebacks once every process has stopped.
    with tempfile.TemporaryDirectory(prefix="sim-chaos-") as work_dir:
        return await _run_chaos(replace(settings, work_dir=Path(work_dir)), herd=herd, api=api)


async def _run_chaos(settings: ChaosSettings, *, herd: ChaosHerd, api: ApiBackend) -> ChaosResult:
    assert settings.work_dir is not None
    began = time.monotonic()
    span = settings.minutes * 60.0
    plan = FaultPlan(settings=settings.faults, seed=settings.seed, span_seconds=span)
    scenario = herd.scenario()
    policies = parse_policy_text(scenario.stagger.policies)
    rng = random.Random(settings.seed ^ 0x5EED)
    skewed, lockd_env = _clock_skew(herd, rng=rng, seconds=settings.clock_skew_seconds)
    kills: list[str] = []
    upstream = api.cluster_config() if api.kubeconfig is not None else None
    async with fault_proxy(upstream=api.url, plan=plan, config=upstream, armed=False) as proxy:
        cluster = ClusterSettings.from_scenario(
            replace(scenario, stagger=replace(scenario.stagger, controller_replicas=2)),
            stagger_api_url=proxy.url,
            work_dir=settings.work_dir,
            controller_lease=(6.0, 4.0, 1.0),
            lockd_log_level="info",  # lockd's and the controller's: a failing seed's logs say why
            lockd_env=lockd_env,
        )
        async with SimCluster(api=api, settings=cluster) as sim:
            # Faults from now on: the processes came up as in a cluster that ran before the herd (a
            # fault during lockd's first list made a loaded machine's start-up miss its 20 s).
            proxy.arm()
            if sim.controller is not None:
                # The API server's admission calls go through the stand-in Service: held back past the
                # webhook's timeoutSeconds inside the plan's windows.
                sim.controller.admission_delay = lambda: plan.webhook_delay(
                    proxy.now(), timeout=WEBHOOK_TIMEOUT
                )
            ledger = PodLedger(started=began)
            informer = Informer(
                client=sim.client, resource=PODS, settings=InformerSettings(), namespace=herd.namespace
            )
            informer.add_handler(ledger)
            watching = asyncio.create_task(informer.run(), name="chaos-pods")
            drive = await _drive_herd(
                sim,
                herd=herd,
                settings=settings,
                policies=policies.staggering_policies,
                rng=rng,
                span=span,
                began=began,
                kills=kills,
            )
            end = await _read_end_state(
                sim, herd=herd, settings=settings, informer=informer, ledger=ledger, done=drive.done
            )
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
    # After the cluster stopped: what a process logged on its way out counts too.
    return _judge(
        settings=settings,
        herd=herd,
        faults=dict(plan.counts),
        skewed=skewed,
        kills=kills,
        lives=list(ledger.pods.values()),
        drive=drive,
        end=end,
        began=began,
    )


@dataclass
class _Drive:
    """What the group watches saw while the herd arrived under the faults and kills."""

    done: bool
    """Every workload reached its target before the deadline."""
    group_violations: dict[str, int]
    problems: list[str]
    held_again: int
    """Replacements held again after a controller leader was killed (`_check_releases`)."""


async def _drive_herd(
    sim: SimCluster,
    *,
    herd: ChaosHerd,
    settings: ChaosSettings,
    policies: Sequence[StaggeringPolicy],
    rng: random.Random,
    span: float,
    began: float,
    kills: list[str],
) -> _Drive:
    """Create the herd's workloads at random moments of the first half of the fault span while processes
    are killed, wait for every workload to reach its target (or the deadline), and check the groups."""
    target = Target(
        deployments={(herd.namespace, w.name): w.replicas for w in herd.workloads if w.kind != "Job"},
        jobs=frozenset((herd.namespace, w.name) for w in herd.workloads if w.kind == "Job"),
    )
    async with contextlib.AsyncExitStack() as stack:
        group_watches = {
            policy.name: await stack.enter_async_context(
                GroupWatch(
                    client=sim.client,
                    clock=sim.clock,
                    pacer=policy.pacer,
                    selector=LabelSelector.from_labels({GROUP_LABEL: policy.name}),
                )
            )
            for policy in policies
        }
        progress = await stack.enter_async_context(
            ProgressWatch(client=sim.client, clock=sim.clock, target=target)
        )
        arrivals = sorted((rng.uniform(0, span / 2), w) for w in herd.workloads)
        killing = asyncio.create_task(
            _kills(
                sim,
                rng=rng,
                count=settings.kills,
                span=span,
                start=began,
                notice=settings.notice_seconds,
                done=kills,
            ),
            name="chaos-kills",
        )
        for at, workload in arrivals:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - began)))
            await _create(sim, herd, workload)
        remaining = span + settings.settle_seconds - (time.monotonic() - began)
        done = await progress.wait_done(deadline_seconds=max(0.0, remaining) * sim.clock.time_scale)
        with contextlib.suppress(asyncio.CancelledError):
            await killing
        group_violations = {
            name: len(watch.violations) for name, watch in group_watches.items() if watch.violations
        }
        released, held_again = _check_releases(
            group_watches, leader_killed=any("controller leader" in kill for kill in kills)
        )
    return _Drive(done=done, group_violations=group_violations, problems=released, held_again=held_again)


@dataclass
class _EndState:
    """The cluster at the end of the run, read before it stops."""

    jobs: list[Obj]
    stuck: list[str]
    """Why each pod still not Ready is where it is (`endstate.stuck`); empty when every pod made it."""
    slots: list[str]
    """lockd slots still held once every pod is Ready."""
    fail_opens: Counter[str]
    node_violations: dict[str, str]
    problems: list[str]


async def _read_end_state(
    sim: SimCluster,
    *,
    herd: ChaosHerd,
    settings: ChaosSettings,
    informer: Informer,
    ledger: PodLedger,
    done: bool,
) -> _EndState:
    """Read what the checks need of the cluster while it still runs: Jobs, stuck pods, slots, nodes."""
    jobs = await sim.client.list(JOBS, namespace=herd.namespace)
    # Why each pod still not Ready is where it is, read before anything else moves: the run
    # keeps no timeline per pod, so this is what a failed seed can be explained by.
    late = [p.key for p in ledger.pods.values() if p.pending]
    stuck = [] if done else await endstate.stuck(sim, informer, late)
    slots = await endstate.lockd_slots(sim, within=settings.slot_settle_seconds)
    fail_opens, node_violations, problems = _node_fail_opens(sim, herd=herd, ledger=ledger)
    return _EndState(
        jobs=list(jobs.get("items", [])),
        stuck=stuck,
        slots=slots,
        fail_opens=fail_opens,
        node_violations=node_violations,
        problems=problems,
    )


def _node_fail_opens(
    sim: SimCluster, *, herd: ChaosHerd, ledger: PodLedger
) -> tuple[Counter[str], dict[str, str], list[str]]:
    """The fail-opens by cause (admission skipped, init clients without a slot), each node's limit
    violations, and the problems: a node over its limit with no fail-open on it to explain it."""
    fail_opens: Counter[str] = Counter()
    node_violations: dict[str, str] = {}
    problems: list[str] = []
    unmutated = [p for p in ledger.pods.values() if p.unmutated]
    if unmutated:
        fail_opens["admission webhook unreachable (failurePolicy Ignore)"] += len(unmutated)
    for name, kubelet in sim.kubelets.items():
        for fail_open in kubelet.fail_opens:
            fail_opens[f"init client: {fail_open.cause}"] += 1
            logger.info("%s: %s failed open: %s", name, fail_open.pod, fail_open.why)
        peak = kubelet.peak_starting
        if peak > herd.node_limit:
            opened = len(kubelet.fail_opens) + sum(1 for p in unmutated if p.node == name)
            verdict = f"{peak} starting at once (limit {herd.node_limit})"
            node_violations[name] = f"{verdict}, with {opened} fail-opens on the node" if opened else verdict
            if not opened:
                problems.append(f"node {name}: {verdict}, no fail-open to explain it")
    return fail_opens, node_violations, problems


def _judge(
    *,
    settings: ChaosSettings,
    herd: ChaosHerd,
    faults: dict[str, int],
    skewed: str,
    kills: list[str],
    lives: list[PodLife],
    drive: _Drive,
    end: _EndState,
    began: float,
) -> ChaosResult:
    """The run's result: its checks, from what was seen during the run and the logs the processes left."""
    assert settings.work_dir is not None
    crashes = _tracebacks(settings.work_dir)
    group_opened = _group_fail_opens(settings.work_dir)
    fail_opens = Counter(end.fail_opens)
    if group_opened:
        fail_opens["group pacer unreachable (groupFailurePolicy open)"] += len(group_opened)
    if drive.held_again:
        fail_opens["replacement held again: reservation lost with the killed leader (known limit)"] += (
            drive.held_again
        )
    not_ready = [p.key for p in lives if p.pending]
    problems = [*drive.problems, *end.problems]
    if not drive.done:
        problems.append(f"not every pod Ready by the deadline: {not_ready[:10]}")
        problems.extend(end.stuck)
    for job in end.jobs:
        failed = int((job.get("status") or {}).get("failed") or 0)
        if failed:
            problems.append(f"Job {job['metadata']['name']} counted {failed} failed pods")
    # A group's limit may be exceeded only where a pod of it failed open: admission skipped, or lockd
    # granting without the group pacer (the controller unreachable for --group-unavailable-after).
    unexplained = {
        group: count
        for group, count in drive.group_violations.items()
        if not any((p.unmutated or p.key in group_opened) and group in p.groups for p in lives)
    }
    if unexplained:
        problems.append(f"group limits exceeded with no fail-open to explain it: {unexplained}")
    if crashes:
        problems.append(f"{sum(crashes.values())} tracebacks in the logs: {sorted(crashes)}")
    if end.slots:
        problems.append(f"lockd slots left after every pod was Ready: {end.slots}")
    waits = [(p.key, p.ready_at - p.created) for p in lives if p.ready_at is not None]
    slowest = max(waits, key=lambda item: item[1], default=None)
    bound = settings.max_wait_seconds + settings.notice_seconds + settings.faults.outage_seconds
    if slowest is not None and slowest[1] > bound:
        problems.append(f"{slowest[0]} waited {slowest[1]:.0f}s, over its bound of {bound:.0f}s")
    if skewed:
        faults = {**faults, "clock skew": 1}
    return ChaosResult(
        seed=settings.seed,
        herd=herd.describe() + (f"; {skewed}" if skewed else ""),
        faults=faults,
        kills=kills,
        pods=len(lives),
        started=sum(1 for p in lives if p.ready_at is not None or (p.finished and not p.disrupted)),
        group_violations=drive.group_violations,
        node_violations=end.node_violations,
        fail_opens=dict(fail_opens),
        slowest=slowest,
        bound_seconds=bound,
        not_ready=not_ready,
        problems=problems,
        seconds=time.monotonic() - began,
        crashes=sum(crashes.values()),
    )


def _check_releases(watches: dict[str, GroupWatch], *, leader_killed: bool) -> tuple[list[str], int]:
    """Evict mode: only held pods are evicted, and a replacement (let through against its owner's
    reservation, carrying the chain's first hold) is not held again: one eviction per release. The
    problems, and how many replacements were held again after a controller leader was killed: design.md's
    known limit (a new leader does not know the reservations the old one made in its last 60 s)."""
    problems: list[str] = []
    again = 0
    for name, watch in watches.items():
        holds: dict[tuple[str, str], list[PodTrace]] = {}
        for trace in watch.pods.values():
            if trace.disrupted and trace.hold is None:
                problems.append(f"{name}: {trace.namespace}/{trace.name} was evicted but never held")
            if trace.hold is not None and trace.held_since and trace.owner:
                holds.setdefault((trace.owner, trace.held_since), []).append(trace)
        for traces in holds.values():
            # A pod held with the held-since of a pod of its owner evicted before it appeared carried
            # that pod's chain (its owner's reservation) and was held again. (Pods of one burst may share
            # a held-since to the millisecond: all of them appear before any is evicted.)
            for trace in traces:
                evicted = [
                    t
                    for t in traces
                    if t is not trace and t.deleted_at is not None and t.deleted_at <= trace.seen_at
                ]
                if not evicted:
                    continue
                if leader_killed:
                    again += 1
                else:
                    chain = ", ".join(sorted(f"{t.namespace}/{t.name}" for t in [*evicted, trace]))
                    problems.append(f"{name}: a replacement held again, the chain of {chain}")
    return problems, again


def _clock_skew(
    herd: ChaosHerd, *, rng: random.Random, seconds: float
) -> tuple[str, dict[str, dict[str, str]]]:
    """The node whose lockd runs with a skewed wall clock, and its environment (libfaketime preloaded;
    the monotonic clock left alone, as NTP leaves it)."""
    if seconds <= 0:
        return "", {}
    import libfaketime  # the test extras' LD_PRELOAD library

    _, env = libfaketime.get_reload_information()
    offset = seconds if rng.random() < 0.5 else -seconds
    node = node_name(rng.randrange(herd.nodes))
    skew = {**env, "FAKETIME": f"{offset:+g}s", "DONT_FAKE_MONOTONIC": "1"}
    return f"{node}'s lockd clock {offset:+g}s", {node: skew}


async def _slots_by_node(sim: SimCluster, session: aiohttp.ClientSession) -> dict[str, int]:
    """How many slots each lockd holds now (a lockd that does not answer: none)."""
    statuses = await endstate.lockd_statuses(sim, session, each_within=2.0)
    return {name: len(status.get("slots") or []) for name, status in statuses.items()}


_GROUP_FAIL_OPEN = re.compile(
    r"WARNING lockd\.cluster: (\S+/\S+): group pacer service unreachable .*\(groupFailurePolicy open\)"
)


def _group_fail_opens(work_dir: Path) -> set[str]:
    """The pods lockd let start without their group pacer (the controller unreachable for longer than
    --group-unavailable-after, with groupFailurePolicy open: a documented fail-open), from its logs."""
    pods: set[str] = set()
    for log in work_dir.glob("*.lockd.log"):
        pods.update(_GROUP_FAIL_OPEN.findall(log.read_text(errors="replace")))
    return pods


def _tracebacks(work_dir: Path) -> Counter[str]:
    """Tracebacks per log file of lockd and the controller replicas."""
    found: Counter[str] = Counter()
    for log in [*work_dir.glob("*.lockd.log"), *work_dir.glob("controller/*.log")]:
        count = log.read_text(errors="replace").count("Traceback (most recent call last)")
        if count:
            found[log.name] = count
    return found
