"""Cluster mode installs itself on lockd's app (as the controller's group part does on the controller's):
the API server's config is read when it is installed (a start-up error when there is none), and while
the app runs, the node's pod and Node informers, the reviewer of pods' service-account tokens, the grant
finisher that records each grant on its pod, the group pacer client and its wait stream (with
`--controller-url`), Events, the PacemakerConfig objects (with `--pacemaker-configs`), and the start-up
sync that rebuilds the held slots from the pods before the first grant."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import cast

import aiohttp
from aiohttp import web

from lockd import clusterwatch, groupclient, heap, ledger, pacemakerwatch, pods, prober, tokenreview
from lockd.app import choose_policy, log_start, node_labels, policy_file_of
from lockd.appstate import CLUSTER, DEPENDENCIES, HTTP, LOAD, METRICS, POLICY, SERVICE, SETTINGS, ClusterState
from lockd.metrics import Metrics
from lockd.nodepolicy import choose_node_policy
from lockd.service import LockService, build_service
from lockd.serviceparts import Silent
from lockd.settings import Settings
from stagger import events, kube
from stagger.informer import InformerSettings
from stagger.names import Names
from stagger.waiting import stop_tasks, wait_event

__all__ = ["install"]

logger = logging.getLogger(__name__)


def install(app: web.Application, *, cores: int) -> None:
    """Raises `kube.ConfigError` when there is no way to reach the API server. The service is built when
    the app starts, before anything that uses it (its context runs right after the app's HTTP session,
    the first)."""
    settings = app[SETTINGS]
    app[CLUSTER] = ClusterState(config=kube.load_config(kubeconfig=settings.cluster.kubeconfig))
    app.cleanup_ctx.insert(1, functools.partial(_running, cores=cores))


def _group_parts(
    settings: Settings,
    *,
    session: aiohttp.ClientSession,
    service: Callable[[], LockService],
    metrics: Metrics,
) -> tuple[groupclient.GroupClient | None, groupclient.GroupWatch | None]:
    """The controller's group pacer service: the client that asks for a pod, and the wait stream that
    says when a waiting pod's group may go on. None without `--controller-url`. (`service` is read when
    the stream calls back: the service is built with the client as a part of its finisher.)"""
    options = settings.groups
    if not options.controller_url:
        return None, None
    controller_ssl = groupclient.controller_ssl(options.controller_ca_file)
    client = groupclient.GroupClient(
        session=session,
        url=options.controller_url,
        token_file=options.controller_token_file,
        timeout=options.controller_timeout,
        availability=groupclient.Availability(
            unavailable_after=options.group_unavailable_after,
            policy=cast(groupclient.FailurePolicy, options.group_failure_policy),
        ),
        clock=time.monotonic,  # the service's clock
        ssl_context=controller_ssl,
    )
    watch = groupclient.GroupWatch(
        session=session,
        url=options.controller_url,
        token_file=options.controller_token_file,
        node=settings.node.node_name,
        wait=options.group_wait,
        timeout=options.controller_timeout,
        aside=lambda: _aside(service()),
        on_grantable=lambda keys: service().wake_waiters(keys),
        on_unhealthy=lambda: service().ledger.cap_group_aside(
            service().clock() + groupclient.UNREACHABLE_RETRY_SECONDS
        ),
        pushed=groupclient.PushedGrants(
            count=lambda outcome, amount: metrics.pushed_grants.count(outcome, amount)
        ),
        clock=time.monotonic,  # the service's clock
        ssl_context=controller_ssl,
    )
    return client, watch


def _aside(service: LockService) -> list[tuple[ledger.PodKey, str]]:
    """The pods stepping aside for their group now, with their uids (a grant is for that pod only)."""
    queue = service.ledger.queue
    return [(key, queue[key].uid) for key in service.ledger.group_aside(service.clock())]


async def _sync(app: web.Application, view: clusterwatch.NodeView, names: Names) -> None:
    """Before the first grant: the node's pods listed, and the slots an earlier lockd recorded on them
    counted again."""
    settings, service = app[SETTINGS], app[SERVICE]
    await view.wait_synced()
    if (pacemaker := app[CLUSTER].pacemaker) is not None and not await wait_event(
        pacemaker.settled, within=pacemakerwatch.SETTLE_WAIT
    ):
        logger.warning(
            "PacemakerConfigs not listed within %gs: the policy file's node policies alone until they are",
            pacemakerwatch.SETTLE_WAIT,
        )
    service.restore(pods.slots_to_rebuild(view.pods.objects(), names=names))
    choose_policy(app)
    view.want_daemonsets(service.node_policy.wait_for_daemonsets, chosen=service.node_policy.daemonsets)
    service.ready = True
    heap.trim()  # the first list's decoded pods are garbage now
    logger.info(
        "listed %d pods on node %s; ready (node policy %s)",
        len(view.pods.store),
        settings.node.node_name,
        service.node_policy.name,
    )


def _follow_daemonsets(app: web.Application, view: clusterwatch.NodeView) -> Callable[..., None]:
    """The cluster's DaemonSets are watched while the node's policy waits for them, and only then: the
    policy is followed wherever it changes (a Node relabel, a policy reload; `_sync` at start). Its changes
    wake the queue; a wait given up at `--daemonset-wait` is counted. Returns the function that follows it,
    for whatever else changes the policy (PacemakerConfig objects)."""
    service, metrics = app[SERVICE], app[METRICS]
    view.daemonsets.on_change = service.wake_next
    view.daemonsets.on_expired = lambda item: metrics.daemonset_waits_given_up.labels(why=item.why).inc()

    def follow(*_: object) -> None:
        node_policy = app[SERVICE].node_policy
        view.want_daemonsets(node_policy.wait_for_daemonsets, chosen=node_policy.daemonsets)

    follow()
    # After the subscriber and handler that choose the policy (they came first).
    view.nodes.add_handler(follow)
    app[POLICY].subscribe(follow)
    return follow


def _pacemaker_watch(
    app: web.Application, *, client: kube.RestClient, follow: Callable[[], None]
) -> pacemakerwatch.PacemakerWatch:
    """`--pacemaker-configs`: the PacemakerConfig objects as node policies. A change of them chooses the
    node's policy again (waking the waiting long polls when it changed, as a policy file reload does);
    each object version read is counted in `stagger_lockd_policy_reloads_total` (object_ok, object_error)."""
    settings, metrics = app[SETTINGS], app[METRICS]

    def changed() -> None:
        choose_policy(app)
        follow()

    return pacemakerwatch.PacemakerWatch(
        client=client,
        settings=InformerSettings(),
        recheck=settings.cluster.pacemaker_recheck,
        on_change=changed,
        count=lambda result: metrics.policy_reloads.labels(result=result).inc(),
    )


async def _running(app: web.Application, *, cores: int) -> AsyncIterator[None]:
    settings, state = app[SETTINGS], app[CLUSTER]
    names = Names(settings.cluster.prefix)
    # The app's one session (lockd.app opens and closes it), shared with the dependency checks.
    async with contextlib.nullcontext(app[HTTP].get()) as session:
        client = kube.RestClient(session=session, config=state.config)
        view = clusterwatch.NodeView(
            client=client,
            node=settings.node.node_name,
            names=names,
            own_pod=settings.cluster.own_pod,
            informer_settings=InformerSettings(list_page_size=clusterwatch.NODE_LIST_PAGE_SIZE),
            daemonset_wait=settings.cluster.daemonset_wait,
        )
        group_client, group_watch = _group_parts(
            settings, session=session, service=lambda: app[SERVICE], metrics=app[METRICS]
        )
        state.view, state.group_watch = view, group_watch
        state.tokens = tokenreview.TokenReviewer(
            client=client,
            settings=settings.tokens,
            clock=time.monotonic,
            wall=time.time,
            count=app[METRICS].token_checks.count,
        )
        recorder = events.EventRecorder(client=client) if settings.cluster.events else None
        # The service with its parts, which need the session (opened in the running loop, as aiohttp
        # asks); its node policy chosen by the labels given until the Node is listed (`_sync`).
        watcher = app[POLICY]
        app[SERVICE] = service = build_service(
            settings,
            active=choose_node_policy(
                policy_file=policy_file_of(watcher), source=watcher.source, node_labels=node_labels(app)
            ),
            cores=cores,
            metrics=app[METRICS],
            load=app[LOAD].get,
            dependencies=app[DEPENDENCIES].get,
            node_state=view,
            finisher=clusterwatch.ClusterFinisher(
                client=client,
                view=view,
                groups=group_client,
                names=names,
                watch=group_watch,
                recheck=settings.groups.group_recheck,
                clock=time.monotonic,
            ),
            announcer=(
                clusterwatch.EventAnnouncer(recorder=recorder, node=settings.node.node_name, wall=time.time)
                if recorder is not None
                else Silent()
            ),
        )
        log_start(app)
        clusterwatch.follow_pods(view, service)
        state.prober = probes = prober.ReadinessProber(
            service=lambda: app[SERVICE],
            pod_of=view.pod,
            session=session,
            metrics=app[METRICS],
            max_in_flight=settings.cluster.probe_max_in_flight,
            max_timeout=settings.cluster.probe_max_timeout,
            record=clusterwatch.probed_ready_recorder(client=client, view=view, names=names),
        )
        view.nodes.add_handler(lambda kind, obj: choose_policy(app))
        follow = _follow_daemonsets(app, view)
        tasks = [
            asyncio.create_task(view.run(), name="node-informers"),
            asyncio.create_task(_sync(app, view, names), name="sync"),
            asyncio.create_task(probes.run(), name="readiness-probes"),
        ]
        if settings.cluster.pacemaker_configs:
            state.pacemaker = _pacemaker_watch(app, client=client, follow=follow)
            tasks.append(asyncio.create_task(state.pacemaker.run(), name="pacemaker-configs"))
        if group_watch is not None:
            tasks.append(asyncio.create_task(group_watch.run(), name="group-watch"))
        if recorder is not None:
            tasks.append(asyncio.create_task(recorder.run(), name="events"))
        yield
        if recorder is not None:
            await recorder.drain(within=1.0)
        await stop_tasks(tasks)
