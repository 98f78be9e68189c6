"""The whole controller app: admission (`webhook.app`) plus group pacing (`webhook.groups`) with leader
election (`webhook.leader`), as `python -m webhook` runs it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from stagger import kube
from webhook import app as admission_app
from webhook import groups, leader
from webhook.settings import Settings

__all__ = ["make_app"]

logger = logging.getLogger(__name__)


def cluster_config(settings: Settings) -> kube.ClusterConfig | None:
    """The API server to use: --kubeconfig (a bad one raises `kube.ConfigError`), else the in-cluster
    service account, else None (admission only)."""
    if settings.kubeconfig is not None:
        return kube.kubeconfig_config(settings.kubeconfig)
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
        if not settings.leader_elect:
            logger.warning("--no-leader-elect: this replica always leads; run only one")
            return groups.SoleLeader(identity=settings.identity), None
        elector = leader.LeaderElector(
            client=client,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=settings.identity,
            timings=leader.Timings(
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
            ),
            names=app[admission_app.ADMISSION].names,
            pod_name=settings.pod_name,
            pod_namespace=settings.pod_namespace if settings.pod_name else None,
        )
        return elector, elector.run

    return factory


def make_app(settings: Settings) -> web.Application:
    """Raises what `webhook.app.make_app` raises, and `kube.ConfigError` for a bad --kubeconfig."""
    app = admission_app.make_app(settings)
    groups.install(app, config=cluster_config(settings), leader_factory=elect(settings))
    return app
