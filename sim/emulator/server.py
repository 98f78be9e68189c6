"""A Kubernetes API server emulator: plain HTTP on loopback, JSON, enough of the real semantics for
stagger and its simulated cluster (CRUD, watch, selectors, patch, validation, graceful deletion,
eviction judged from PodDisruptionBudget status kept by an in-emulator disruption controller, binding,
the pod proxy (`podproxy`), mutating admission webhooks, discovery, kubectl tables).

Library use::

    async with ApiServer(ApiServerSettings()) as server:
        server.write_kubeconfig(path)          # cluster/user/context "sim"
        ... server.url, server.request_count, server.request_counts

From synchronous code (e.g. the official `kubernetes` client)::

    with ApiServerThread() as server:
        ... server.url

Command line: `python -m sim apiserver` (`sim.cli.apiserver`).

Where it knowingly differs from a real cluster: no authentication or RBAC (the bearer token names the
user; service-account tokens are issued and answered by TokenReview, `tokens`, but a request carrying
one is not authenticated by it); no Services, RBAC or custom resources; no server-side apply (415) and no protobuf (JSON is
answered); past states (Exact lists, continue tokens) reach back as far as the per-resource watch
history (`watch_history` events; older: 410 Expired, as after an etcd compaction);
PodDisruptionBudget status is recomputed inside every write of a budget or its pods (the real
controller lags a little; see `disruption`); namespace deletion removes the content at once;
`propagationPolicy` is accepted but garbage collection is left to the simulated cluster; pods whose
graceful deletion no kubelet finishes are removed `graceful_deletion_slack` seconds after their
deletionTimestamp.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from sim.emulator.admission import WebhookDispatcher
from sim.emulator.disruption import DisruptionController
from sim.emulator.handlers import handle
from sim.emulator.podproxy import ROUTE as POD_PROXY_ROUTE
from sim.emulator.podproxy import proxy_to_pod
from sim.emulator.registry import Registry, RegistryConfig
from sim.emulator.resources import namespaces
from sim.emulator.schema import Schemas
from sim.emulator.settings import ApiServerSettings
from sim.emulator.state import STATE, ApiState
from sim.emulator.store import Store
from sim.kubeconfig import write_kubeconfig

__all__ = ["ApiServer", "ApiServerSettings", "ApiServerThread", "make_app"]

logger = logging.getLogger(__name__)
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _bootstrap(registry: Registry) -> None:
    """What a fresh cluster has: its system namespaces."""
    for name in INITIAL_NAMESPACES:
        obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        registry.create(namespaces(), obj, now=time.time())


async def _reap_graceful_deletions(state: ApiState) -> None:
    """Finish graceful pod deletions that no kubelet finished (see RegistryConfig)."""
    while True:
        state.reaper_wakeup.clear()
        try:
            state.registry.expire(now=time.time())
        except Exception:  # the reaper must outlive one bad object
            logger.exception("finishing graceful deletions failed")
        deadline = state.registry.next_deadline()
        try:
            async with asyncio.timeout(None if deadline is None else max(0.0, deadline - time.time()) + 0.01):
                await state.reaper_wakeup.wait()
        except TimeoutError:
            pass


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    session = aiohttp.ClientSession()
    state.dispatcher = WebhookDispatcher(session=session, service_endpoints=state.service_endpoints)
    reaper = asyncio.create_task(_reap_graceful_deletions(state), name="apiserver-graceful-deletions")
    yield
    reaper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reaper
    state.dispatcher = None
    await session.close()


async def _end_watches(app: web.Application) -> None:
    state = app[STATE]
    state.stopping = True
    state.store.wake_watchers()


@web.middleware
async def _request_log(request: web.Request, handler: Any) -> web.StreamResponse:
    started = time.monotonic()
    response: web.StreamResponse = await handler(request)
    level = logging.INFO if request.app[STATE].settings.request_log else logging.DEBUG
    if logger.isEnabledFor(level):
        logger.log(
            level,
            "%s %s -> %d (%.1f ms)",
            request.method,
            request.path_qs,
            response.status,
            (time.monotonic() - started) * 1000,
        )
    return response


def make_app(settings: ApiServerSettings) -> web.Application:
    store = Store(history=settings.watch_history)
    schemas = Schemas()
    state = ApiState(
        settings=settings,
        store=store,
        schemas=schemas,
        registry=Registry(
            store=store,
            schemas=schemas,
            config=RegistryConfig(graceful_deletion_slack=settings.graceful_deletion_slack),
        ),
        service_endpoints=dict(settings.service_resolver),
    )
    state.registry.on_deadline = state.reaper_wakeup.set
    if settings.disruption_controller:
        DisruptionController(store).attach()
    _bootstrap(state.registry)
    app = web.Application(middlewares=[_request_log], client_max_size=16 * 1024 * 1024)
    app[STATE] = state
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_end_watches)
    # The pod proxy first: the catch-all below would read `pods/NAME/proxy` as an unknown subresource.
    app.router.add_route("*", POD_PROXY_ROUTE, proxy_to_pod)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


class ApiServer:
    # Settings are frozen, so one shared default instance is safe.
    def __init__(self, settings: ApiServerSettings = ApiServerSettings()) -> None:  # noqa: B008
        self.settings = settings
        self.app = make_app(settings)
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def state(self) -> ApiState:
        return self.app[STATE]

    def rotate_signing_key(self) -> None:
        """Sign service-account tokens with a new key from now on, the old one still accepted and published
        (what a kube-apiserver restarted with a new signing key and both public keys does)."""
        self.state.signer = self.state.signer.rotated()

    async def start(self) -> None:
        # handler_cancellation: a watch whose client disconnects is cancelled at once, not at its next write.
        self._runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            shutdown_timeout=self.settings.shutdown_timeout,
            access_log=None,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        logger.info("API server emulator listening on %s", self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the API server is not started")
        return f"http://{self.settings.host}:{self._port}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the API server is not started")
        return self._port

    def write_kubeconfig(self, path: str | Path) -> None:
        write_kubeconfig(path, self.url, token=self.settings.token)

    @property
    def request_count(self) -> int:
        """Total API requests served (discovery included)."""
        return self.state.request_total

    @property
    def request_counts(self) -> MappingProxyType[tuple[str, str], int]:
        """Requests per (verb, resource), e.g. ("list", "pods"), ("create", "pods/eviction")."""
        return MappingProxyType(collections.Counter(self.state.request_counts))

    @property
    def service_endpoints(self) -> dict[str, str]:
        """Webhook service resolver, editable at run time: "namespace/name:port" -> "host:port"."""
        return self.state.service_endpoints

    @property
    def watch_count(self) -> int:
        """Open watch streams (a way to check that disconnected watches are cleaned up)."""
        return self.state.store.watcher_count()


class ApiServerThread:
    """An ApiServer running in its own event loop thread, for synchronous callers."""

    def __init__(
        self,
        settings: ApiServerSettings = ApiServerSettings(),  # noqa: B008 (frozen: a shared default is safe)
        *,
        start_timeout: float = 30.0,
    ) -> None:
        self.settings = settings
        self.start_timeout = start_timeout
        self._server: ApiServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sim-apiserver", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self._server = ApiServer(self.settings)
            await self._server.start()
        except BaseException as err:
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._server.stop()

    def __enter__(self) -> ApiServerThread:
        self._thread.start()
        if not self._ready.wait(self.start_timeout):
            raise TimeoutError(f"the API server did not start within {self.start_timeout} s")
        if self._error is not None:
            raise RuntimeError("the API server failed to start") from self._error
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.start_timeout)

    @property
    def server(self) -> ApiServer:
        if self._server is None:
            raise RuntimeError("the API server is not started")
        return self._server

    @property
    def url(self) -> str:
        return self.server.url

    def write_kubeconfig(self, path: str | Path) -> None:
        self.server.write_kubeconfig(path)

    def call(self, function: Any, timeout: float = 10.0) -> Any:
        """Run `function()` in the server's loop (to read its state safely) and return its result."""
        assert self._loop is not None

        async def run() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)
