"""The fault layer: an HTTP proxy in front of the API server that lockd and the controller reach it through
(their kubeconfig names the proxy), injecting the faults of a `FaultPlan`.

HTTP, not TCP: the faults that matter to a Kubernetes client are answers (500, 503, 429 with Retry-After,
a watch's 410 Expired event), which a TCP proxy such as Toxiproxy cannot make; resets, delays and streams
cut mid-way are made here too. What the API server sends back is what the real one does:
- errors are `Status` objects (kind Status, `reason` InternalError / ServiceUnavailable / TooManyRequests,
  `details.retryAfterSeconds` with the `Retry-After` header for 429:
  https://kubernetes.io/docs/concepts/cluster-administration/flow-control/);
- a watch whose resourceVersion is too old is answered 200 with one ERROR event holding a 410 Expired
  Status, as kube-apiserver's watch cache does (https://kubernetes.io/docs/reference/using-api/api-concepts/
  #410-gone-responses), and the client must list again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from sim.chaos.faults import Fault, FaultPlan
from stagger.kube import ClusterConfig

__all__ = ["FaultProxy", "fault_proxy"]

logger = logging.getLogger(__name__)

_REASONS = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
_HOP_BY_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})


def _status(code: int, message: str, *, retry_after: float = 0.0) -> dict[str, object]:
    status: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "Expired" if code == 410 else "InternalError"),
        "code": code,
    }
    if retry_after:
        status["details"] = {"retryAfterSeconds": int(retry_after)}
    return status


@dataclass
class FaultProxy:
    upstream: str
    plan: FaultPlan
    started: float = field(default_factory=time.monotonic)
    url: str = ""
    passed: int = 0
    token: str | None = None
    """A bearer token to send upstream in place of the client's (a real API server's)."""
    open: set[asyncio.Transport] = field(default_factory=set)
    armed: asyncio.Event = field(default_factory=asyncio.Event)
    """Faults are injected only once armed; the plan's times count from then (`arm`)."""

    def arm(self) -> None:
        """Start injecting faults now (a chaos run arms the proxy once its cluster is up: the processes
        start as in a cluster that ran before the herd and its troubles)."""
        self.started = time.monotonic()
        self.armed.set()

    def track(self, request: web.Request) -> None:
        """Remember the request's connection, to drop it when the API server goes down."""
        if isinstance(request.transport, asyncio.Transport):
            self.open.add(request.transport)

    def drop_all(self) -> None:
        """The API server is down: every connection it had ends (watches included), as at a restart."""
        for transport in list(self.open):
            transport.abort()
        self.open.clear()

    def now(self) -> float:
        return time.monotonic() - self.started

    async def handle(self, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("true", "1")
        version = request.query.get("resourceVersion", "")
        fault = (
            self.plan.decide(
                method=request.method, watch=watch, resumed=watch and version not in ("", "0"), now=self.now()
            )
            if self.armed.is_set()
            else None
        )
        if fault is not None and (fault.kind == "outage" or (fault.kind == "reset" and not fault.after)):
            return _reset(request)
        if fault is not None and fault.kind in ("error", "throttle"):
            headers = {"Retry-After": f"{fault.seconds:g}"} if fault.kind == "throttle" else {}
            body = _status(fault.status, f"chaos: injected {fault.status}", retry_after=fault.seconds)
            return web.json_response(body, status=fault.status, headers=headers)
        if fault is not None and fault.kind == "gone":
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
            message = f"too old resource version: {version} (chaos)"
            event = {"type": "ERROR", "object": _status(410, message)}
            await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
            return response
        if fault is not None and fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
        self.track(request)
        try:
            return await self._forward(request, fault=fault, watch=watch)
        finally:
            if isinstance(request.transport, asyncio.Transport):
                self.open.discard(request.transport)

    async def _forward(self, request: web.Request, *, fault: Fault | None, watch: bool) -> web.StreamResponse:
        self.passed += 1
        session = request.app[SESSION]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        elif self.upstream.startswith("https://"):
            headers.pop("Authorization", None)  # the client certificate speaks for it
        try:
            body = await request.read() if request.can_read_body else None
            upstream = await session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                allow_redirects=False,
            )
        except (aiohttp.ClientError, ConnectionError):  # the client left, or the API server did
            return _reset(request)
        async with upstream:
            if fault is not None and fault.kind == "reset":
                with contextlib.suppress(aiohttp.ClientError):
                    await upstream.read()  # the API server did it; the client never hears
                return _reset(request)
            response = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-encoding":
                    response.headers.add(name, value)
            cut_after = fault.events if fault is not None and fault.kind == "cut" else None
            # Either side may hang up at any time (a watch the client stops, a process killed, the API
            # server closing a watch): the other side's connection ends then too.
            try:
                await response.prepare(request)
                if watch:
                    lines = 0
                    while line := await upstream.content.readline():
                        await response.write(line)
                        lines += 1
                        if cut_after is not None and lines >= cut_after:
                            break  # the stream ends mid-watch: the client resumes from what it saw
                else:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                await response.write_eof()
            except (aiohttp.ClientError, ConnectionError):
                return _reset(request)
        return response


SESSION = web.AppKey("session", aiohttp.ClientSession)


def _reset(request: web.Request) -> web.Response:
    """Drop the connection without an answer. The response returned is never sent: aiohttp finds the
    transport closed and lets it go quietly (web_protocol's finish_response ignores ConnectionError)."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=500)


@contextlib.asynccontextmanager
async def fault_proxy(
    *,
    upstream: str,
    plan: FaultPlan,
    config: ClusterConfig | None = None,
    host: str = "127.0.0.1",
    armed: bool = True,
) -> AsyncIterator[FaultProxy]:
    """The proxy on a free port of `host` for the duration of the block. `config`: how to reach a real
    API server (TLS, client certificate or token): the proxy speaks plain HTTP on loopback to its clients
    and authenticates upstream as `config` says (the sim gives lockd and the controller the admin's
    credentials on a real control plane anyway, so nobody's identity changes). `armed` False: no fault
    until `FaultProxy.arm`."""
    proxy = FaultProxy(upstream=upstream.rstrip("/"), plan=plan, token=config.token if config else None)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    ssl_context = config.ssl_context() if config is not None else False
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=ssl_context)) as session:
        app[SESSION] = session
        # handler_cancellation: a handler whose client left is cancelled at once (not left pending).
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, host, 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        port = server.sockets[0].getsockname()[1]
        proxy.url = f"http://{host}:{port}"
        if armed:
            proxy.arm()
        watcher = asyncio.create_task(_outages(proxy), name="chaos-outages")
        try:
            yield proxy
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await runner.cleanup()


async def _outages(proxy: FaultProxy) -> None:
    """At the start of each outage, drop every open connection (a watch holds one for minutes)."""
    await proxy.armed.wait()
    for outage in proxy.plan.outages:
        await asyncio.sleep(max(0.0, outage.start - proxy.now()))
        proxy.drop_all()
