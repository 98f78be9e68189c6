"""Settings of the API server emulator (re-exported by `sim.emulator.server`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class ApiServerSettings:
    host: str = "127.0.0.1"
    port: int = 0
    watch_history: int = 10000  # events kept per resource for watch resumption; older -> 410 Gone
    request_log: bool = False  # log every request at INFO (always logged at DEBUG)
    # clientConfig.service of webhooks: "namespace/name:port" -> "host:port" to connect to (TLS is still
    # verified for the name "name.namespace.svc"). More can be added at run time: ApiServer.service_endpoints.
    service_resolver: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    token: str = "sim"  # the bearer token written to kubeconfigs (the emulator accepts any)
    watch_timeout: float = (
        1800.0  # a watch without timeoutSeconds ends after this (the real minRequestTimeout)
    )
    watch_bookmark_interval: float = 60.0  # how often a watch with allowWatchBookmarks gets a BOOKMARK
    watch_queue_limit: int = 10000  # events queued for a watcher that does not read before it is cut off
    watch_liveness_interval: float = 5.0  # how often an idle watch checks that its client is still there
    graceful_deletion_slack: float = 2.0  # after a pod's deletionTimestamp, the server finishes its deletion
    update_retries: int = 5  # retries of an update whose object changed while it was in admission
    # The disruption controller keeps PodDisruptionBudget status; off, budgets are never processed (as in a
    # cluster without kube-controller-manager) and evictions they cover answer 429.
    disruption_controller: bool = True
    shutdown_timeout: float = 5.0  # bound for closing open connections (watches) at stop
    # What service-account tokens are issued and reviewed at (epoch seconds): tests move it forward to see
    # a token expire without waiting an hour. The rest of the emulator keeps the wall clock.
    token_clock: Callable[[], float] = time.time
    # The minor `GET /version` names ("1.29"), for a client's check of an older or newer cluster; None: the
    # emulator's own (resources.KUBERNETES_VERSION). Only /version changes: every API stays served.
    kubernetes_version: str | None = None
