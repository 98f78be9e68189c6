"""lockd's app state: the typed keys its parts are kept under, and the small state objects they name. The
handlers (`lockd.app`), the long-poll front door (`lockd.longpoll`) and the lock ask they share
(`lockd.asking`) all read the app through these keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from lockd import load, params, tokenreview
from lockd.dependencies import DependencyChecks
from lockd.metrics import Metrics
from lockd.service import LockService
from lockd.settings import Settings
from stagger import kube, throttles
from stagger.policywatch import PolicyWatcher
from stagger.serving import json_body

if TYPE_CHECKING:
    # Cluster mode's parts are imported when cluster mode is installed (`lockd.clustermode`): a standalone lockd
    # never loads the informers, the group client or the Event recorder.
    from lockd import clusterwatch, groupclient, pacemakerwatch, prober

__all__ = [
    "BODIES",
    "CLUSTER",
    "DEPENDENCIES",
    "HTTP",
    "LOAD",
    "METRICS",
    "POLICY",
    "QUERIES",
    "READER",
    "SERVICE",
    "SETTINGS",
    "ClusterState",
    "EncodedBodies",
    "LoadCache",
    "Outbound",
    "view_of",
]


@dataclass
class LoadCache:
    """The latest load sample: written by the sampler task, read by requests (never sampled on a request)."""

    sample: throttles.LoadSample = throttles.NO_LOAD

    def get(self) -> throttles.LoadSample:
        return self.sample


@dataclass
class Outbound:
    """The app's one aiohttp ClientSession for lockd's own requests: dependency checks, and in cluster mode
    the API server and the controller. Opened when the app starts, before anything that uses it, and
    closed last (`lockd.app`)."""

    session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        assert self.session is not None, "the app's HTTP session is opened when the app starts"
        return self.session


@dataclass
class ClusterState:
    """Cluster mode's parts; filled in when the app starts (they need the running loop and a session)."""

    config: kube.ClusterConfig
    view: clusterwatch.NodeView | None = None
    group_watch: groupclient.GroupWatch | None = None
    tokens: tokenreview.TokenReviewer | None = None
    prober: prober.ReadinessProber | None = None
    pacemaker: pacemakerwatch.PacemakerWatch | None = None  # with --pacemaker-configs


class EncodedBodies:
    """Answers encoded once and reused: the 423 bodies by (reason, position, maxWait), since a queued pod
    asks again and again and is told the same, and the 200 bodies of holders asking again, by slot. Each
    table starts over when it holds `size` bodies, so callers cannot grow it without bound."""

    def __init__(self, *, size: int = 1024) -> None:
        self.size = size
        self._tables: dict[str, dict[tuple[object, ...], bytes]] = {"denied": {}, "reasked": {}}

    def get(self, table: str, key: tuple[object, ...], build: Callable[[], object]) -> bytes:
        known = self._tables[table]
        encoded = known.get(key)
        if encoded is None:
            if len(known) >= self.size:
                known.clear()
            encoded = known[key] = json_body(build())
        return encoded


SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", LockService)
METRICS = web.AppKey("metrics", Metrics)
LOAD = web.AppKey("load", LoadCache)
POLICY = web.AppKey("policy", PolicyWatcher)
READER = web.AppKey("load_reader", load.LoadReader)
CLUSTER = web.AppKey("cluster", ClusterState)
QUERIES = web.AppKey("lock_queries", params.LockQueries)
BODIES = web.AppKey("encoded_bodies", EncodedBodies)
HTTP = web.AppKey("http", Outbound)
DEPENDENCIES = web.AppKey("dependencies", DependencyChecks)


def view_of(app: web.Application) -> clusterwatch.NodeView | None:
    """Cluster mode's view of the node (None standalone, or before cluster mode has started)."""
    state = app.get(CLUSTER)
    return state.view if state is not None else None
