"""The whole controller app, as `python -m webhook` runs it: admission (`webhook.app`, `webhook.admission`)
plus the group part put together on it: the pacers and their pod watch (`webhook.groups`), the
reconcilers that release held pods (`webhook.reconcilers`), and leader election (`webhook.leader`).

At start-up it also asks the API server's `/version` once (`check_kubernetes_version`): the log, `/status`
(`kubernetes`) and `stagger_controller_kubernetes_info` say whether that minor is one stagger is tested on
and what of stagger needs a newer one (`stagger.kubeversions`). The check never holds up start-up or
readiness, and the controller starts whatever it says: what works is still paced."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from stagger import kube, kubeversions
from stagger.contracts import groups as contract
from stagger.events import EventRecorder
from stagger.groupbook import Claim, PodRecord
from stagger.informer import InformerSettings
from stagger.waiting import stop_tasks
from webhook import app as admission_app
from webhook import failopens, groups, leader
from webhook.app import (
    ADMISSION,
    EVICT_DECIDER,
    METRICS,
    POLICY,
    READINESS,
    SETTINGS,
    STATUS_SECTIONS,
)
from webhook.failopens import FailOpens
from webhook.groups.api import admit, decide_evict, grant, wait
from webhook.groups.pacing import Pacing
from webhook.groups.podwatch import PodWatch
from webhook.groups.report import not_synced, publish, status_section
from webhook.groups.state import GROUPS, Groups, LeaderFactory, sole_leader
from webhook.groups.steward import drain_reservations, policies_changed, run_steward
from webhook.reconcilers.evictions import EvictionReconciler
from webhook.reconcilers.gates import GateReconciler
from webhook.settings import Settings

__all__ = ["KUBERNETES", "KubernetesVersion", "check_kubernetes_version", "install", "make_app"]

logger = logging.getLogger(__name__)

# The one GET /version at start-up: a bound of its own, shorter than the client's 30 s, since nothing waits
# for it and an API server that slow is better reported as unknown than late.
VERSION_TIMEOUT = 10.0


@dataclass
class KubernetesVersion:
    """The start-up check of the API server's version: None until `/version` answered or failed."""

    assessment: kubeversions.Assessment | None = None


KUBERNETES = web.AppKey("kubernetes_version", KubernetesVersion)


def cluster_config(settings: Settings) -> kube.ClusterConfig | None:
    """The API server to use: --kubeconfig (a bad one raises `kube.ConfigError`), else the in-cluster
    service account, else None (admission only)."""
    if settings.cluster.kubeconfig is not None:
        return kube.kubeconfig_config(settings.cluster.kubeconfig)
    try:
        return kube.in_cluster_config()
    except kube.ConfigError:
        return None


def elect(
    settings: Settings,
) -> Callable[
    [web.Application, kube.RestClient],
    tuple[groups.Leadership, Callable[[], Coroutine[Any, Any, None]] | None],
]:
    """The leader factory for `groups.install`: a Lease election, or with --no-leader-elect the sole leader."""

    def factory(
        app: web.Application, client: kube.RestClient
    ) -> tuple[groups.Leadership, Callable[[], Coroutine[Any, Any, None]] | None]:
        if not settings.leader.leader_elect:
            logger.warning("--no-leader-elect: this replica always leads; run only one")
            return groups.SoleLeader(identity=settings.leader.identity), None
        elector = leader.LeaderElector(
            client=client,
            namespace=settings.leader.lease_namespace,
            name=settings.leader.lease_name,
            identity=settings.leader.identity,
            timings=leader.Timings(
                lease_duration=settings.leader.lease_duration,
                renew_deadline=settings.leader.renew_deadline,
                retry_period=settings.leader.retry_period,
            ),
            names=app[admission_app.ADMISSION].names,
            pod_name=settings.cluster.pod_name,
            pod_namespace=settings.cluster.pod_namespace if settings.cluster.pod_name else None,
        )
        return elector, elector.run

    return factory


def make_app(settings: Settings) -> web.Application:
    """Raises what `webhook.app.make_app` raises, and `kube.ConfigError` for a bad --kubeconfig."""
    app = admission_app.make_app(settings)
    install(app, config=cluster_config(settings), leader_factory=elect(settings))
    return app


def install(
    app: web.Application, *, config: kube.ClusterConfig | None, leader_factory: LeaderFactory = sole_leader
) -> None:
    """Add the group part to the controller's TLS app (routes, background work, readiness, /status).
    With `config` None (no API server), the routes answer 503 and `/status` says why."""
    pacing = Pacing(
        names=app[ADMISSION].names,
        policies={p.name: p for p in app[ADMISSION].policies},
        max_wait=app[ADMISSION].inject.max_wait,
        claim_confirm_timeout=app[SETTINGS].groups.claim_confirm_timeout,
        lapsed=lambda count: app[METRICS].claims_lapsed.inc(count),
    )
    app[GROUPS] = Groups(pacing=pacing)
    app.router.add_post(contract.GRANT_PATH, grant)
    app.router.add_post(contract.WAIT_PATH, wait)
    app.router.add_post(contract.ADMIT_PATH, admit)
    app[EVICT_DECIDER] = lambda question: decide_evict(app, question)
    app[READINESS].append(not_synced)
    app[METRICS].refreshers.append(lambda: publish(app))
    app[STATUS_SECTIONS].append(status_section)
    app[METRICS].refreshers.append(lambda: failopens.publish(app))
    app[STATUS_SECTIONS].append(failopens.status_section)
    app[KUBERNETES] = KubernetesVersion()
    app[STATUS_SECTIONS].append(kubernetes_section)
    app[POLICY].subscribe(lambda new: policies_changed(app, new))

    if config is None:
        app[GROUPS].off = "no API server (no --kubeconfig, not in a cluster): admission only, no group pacing"
        logger.warning("group pacing is off: %s", app[GROUPS].off)
        app[KUBERNETES].assessment = kubeversions.unknown("no API server to ask")
        return

    settings = app[SETTINGS]
    if settings.groups.leader_ca_file is not None:
        # Read now, so a missing or bad CA file is a start-up error naming the flag.
        try:
            app[GROUPS].leader_ssl = ssl.create_default_context(cafile=str(settings.groups.leader_ca_file))
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"--leader-ca-file: cannot use {settings.groups.leader_ca_file}: {err}") from err

    async def run(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession() as session:
            app[GROUPS].session = session
            client = kube.RestClient(session=session, config=config)
            # In the background: start-up and readiness never wait for it.
            check = asyncio.create_task(check_kubernetes_version(app, client), name="kubernetes-version")
            try:
                async for _ in _running(app, client, leader_factory):
                    yield
            finally:
                await stop_tasks([check])

    app.cleanup_ctx.append(run)


async def _running(
    app: web.Application, client: kube.RestClient, leader_factory: LeaderFactory
) -> AsyncIterator[None]:
    groups = app[GROUPS]
    pacing = groups.pacing
    events = EventRecorder(client=client)
    init_container = app[ADMISSION].inject.container_name
    watch = PodWatch(
        client=client,
        pacing=pacing,
        settings=InformerSettings(),
        events=events,
        host=socket.gethostname(),
        init_container=init_container,
    )
    leadership, elect = leader_factory(app, client)
    metrics = app[METRICS]
    gates = GateReconciler(
        client=client,
        pacing=pacing,
        counted=lambda basis: metrics.grants.labels(basis=basis).inc(),
        removed=lambda result: metrics.gate_removals.labels(result=result).inc(),
        pod=lambda key: watch.informer.get(f"{key[0]}/{key[1]}"),
        wall=time.time,
    )
    evictions = EvictionReconciler(
        client=client,
        pacing=pacing,
        backoff=app[SETTINGS].groups.eviction_backoff,
        counted=lambda basis: metrics.grants.labels(basis=basis).inc(),
        result=lambda result: metrics.evictions.labels(result=result).inc(),
        released=lambda record, reason, claim: _announce_eviction(watch, record, reason, claim),
    )
    fail_opens = FailOpens(
        client=client,
        watch=watch,
        init_container=init_container,
        counted=lambda cause: metrics.fail_opens.labels(cause=cause).inc(),
    )
    groups.watch, groups.leadership, groups.gates, groups.evictions = watch, leadership, gates, evictions
    groups.fail_opens = fail_opens
    tasks = [
        asyncio.create_task(watch.run(), name="pod-watch"),
        asyncio.create_task(events.run(), name="events"),
        asyncio.create_task(gates.run(), name="gate-reconciler"),
        asyncio.create_task(evictions.run(), name="eviction-reconciler"),
        asyncio.create_task(run_steward(app), name="group-steward"),
        asyncio.create_task(fail_opens.run(), name="fail-opens"),
    ]
    election = asyncio.create_task(elect(), name="leader-election") if elect is not None else None
    try:
        yield
    finally:
        # Stop granting, let what was granted show on the pods, then give up the Lease (see the docstring).
        groups.stopping = True
        pacing.set_granting(False)
        await drain_reservations(pacing, within=app[SETTINGS].groups.grant_drain)
        if election is not None:
            await stop_tasks([election])
        await stop_tasks(tasks)
        await events.drain(within=1.0)


async def check_kubernetes_version(
    app: web.Application, client: kube.RestClient, *, within: float = VERSION_TIMEOUT
) -> None:
    """GET /version once, answered within `within` seconds; the log, `/status` and the metric say what it
    means. An error is logged and leaves the version unknown. Asked once: the version changes only with an
    upgrade of the control plane, which the next restart of the controller sees."""
    try:
        info = await asyncio.wait_for(client.request("GET", "/version"), within)
    except (kube.ApiError, aiohttp.ClientError, OSError, TimeoutError) as err:
        quiet = f"no answer within {within:g} s" if isinstance(err, TimeoutError) else type(err).__name__
        assessment = kubeversions.unknown(f"GET /version failed: {str(err) or quiet}")
    else:
        assessment = kubeversions.assess(info)
    app[KUBERNETES].assessment = assessment
    if assessment.minor is None:
        logger.warning("%s; stagger runs on without knowing", assessment.note)
        return
    app[METRICS].kubernetes_info.clear()
    app[METRICS].kubernetes_info.labels(
        version=assessment.git_version, tested="true" if assessment.tested else "false"
    ).set(1)
    if assessment.missing:
        logger.warning(
            "%s; stagger runs on, and each of these %d fails where it is used:",
            assessment.note,
            len(assessment.missing),
        )
        for sentence in assessment.missing:
            logger.warning("%s", sentence)
    elif assessment.minor < kubeversions.OLDEST_TESTED:
        logger.warning("%s; nothing stagger uses is missing there, but it is not tested", assessment.note)
    else:
        logger.info("%s", assessment.note)


def kubernetes_section(app: web.Application) -> tuple[str, dict[str, Any]]:
    """`/status` `kubernetes`: the API server's version, the minors stagger is tested on, whether stagger
    supports it (null while unknown) and what needs a newer minor."""
    assessment = app[KUBERNETES].assessment
    if assessment is None:
        assessment = kubeversions.unknown("asking the API server's /version")
    return "kubernetes", {
        "version": assessment.git_version,
        "tested": kubeversions.format_tested(),
        "withinTested": assessment.tested,
        "supported": assessment.supported,
        "missing": list(assessment.missing),
        "note": assessment.note,
    }


def _announce_eviction(watch: PodWatch, record: PodRecord, reason: str, claim: Claim | None) -> None:
    owner = (
        "its owner's replacement starts in its place"
        if claim is not None
        else "it has no owner to replace it"
    )
    watch.announce(
        record,
        "StaggerReleased",
        f"released: evicted, {owner} ({reason}); now {watch.describe_pairs(record.pacer_groups + record.bypassed_groups)}",
    )
