"""pod-startup-lock's port (`--pod-startup-lock-port`): that project's init containers
(github.com/serhii-samoilenko/pod-startup-lock, init/main.go) work against lockd unchanged. They poll
`GET http://$(HOST_IP):8888/` (`?duration=N` seconds, optionally) every `--pause` seconds, each request with a
1 s timeout, until the answer is 200; anything else means wait. They send no identity and no token.

Anonymous by design, so a caller is known by the one thing it cannot choose, its address:
- the address of a pod lockd watches on its node (cluster mode; neither hostNetwork, whose address is the
  node's and shared, nor finished) asks as that pod would ask on `/v1/lock`, through the same
  `LockService.wait_for_slot` with no wait: the same node checks and limits, dependencies, queue order and
  group pacer, the grant recorded on the pod, and its slot ends when the pod is Ready, as every slot does;
- any other address (standalone, where no pods are watched; a hostNetwork pod; the node itself; and, most
  often, the node's bridge) takes a new anonymous slot for each 200 (`LockService.take_anonymous`), named
  `pod-startup-lock@<address>#<n>` so that `/status` shows the address and the slots stay distinct.
An address is no caller's identity unless it is one live pod's own: the peer's clients ask `$(HOST_IP)`,
the node's hostPort, and the CNI portmap plugin (`snat: true`, its default) masquerades traffic from the
pod subnet to a hostPort of the same node, so every pod of the node usually arrives from one address.
Answering a repeated ask from that address from the slot it holds would let every pod through, so an
anonymous ask is treated as pod-startup-lock's own lock treats every ask: each 200 takes a slot for its
hold (the peer's client stops asking after its 200, so no holder asks again). A caller known by its pod
IP asking again is answered 200 from its pod's slot.
No token is asked for (the peer's clients have none): a pod cannot send from another pod's address, which
is what makes its own IP its proof (as `NodeView.is_pod_request` takes it for a release). No slot from
this port is held longer than `--pod-startup-lock-hold` (nor the node policy's holdTimeout);
`?duration=N`, whole seconds as pod-startup-lock reads them, may shorten it.

The answers are pod-startup-lock's: 200 `Lock acquired`, 423 `Locked`, the latter also while lockd is not
ready (as the peer answers before its first check) and for a full queue (its clients know no other status).
`GET /` only: any other path is 404, any other method 405. The port is served as the lock port is
(`lockd.server.make_runner`): the same door with the same bounds, the answer given at the door
(`lockd.longpoll.LockAsks`), the rest by a small aiohttp app of its own.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from lockd import asking, ledger, longpoll, params, pods, server
from lockd.appstate import METRICS, SERVICE, view_of
from lockd.settings import Settings
from stagger import serving, throttles

if TYPE_CHECKING:
    from lockd import clusterwatch
    from stagger.kube import WatchEventType

__all__ = [
    "ANONYMOUS_NAME",
    "VIA",
    "PodAddresses",
    "StartupLockPort",
    "anonymous_prefix",
    "make_app",
    "make_runner",
    "requested_hold",
]

logger = logging.getLogger(__name__)

VIA: Final = "podStartupLock"
"""The listener's name: on its slots (`/status`'s `via`) and its answers' metric (`listener` label)."""

ANONYMOUS_NAME: Final = "pod-startup-lock@"
"""An anonymous slot's name: this, the caller's address, `#` and a number (`anonymous_prefix`); its
namespace is empty."""

_LONGEST_DURATION = 9  # digits: pod-startup-lock's `duration` is seconds; longer is no shorter than any hold


def requested_hold(raw_query: str, *, hold: float) -> float:
    """How long a slot asked for with this query may be held: `duration=N`, a whole number of seconds over 0,
    shortens `hold` and never lengthens it; without one, or with one pod-startup-lock could not read either
    (it takes its default then), `hold`."""
    try:
        text = params.query_params(raw_query).get("duration", "")
    except ValueError:
        return hold
    if text.isascii() and text.isdigit() and len(text) <= _LONGEST_DURATION and int(text) > 0:
        return min(float(text), hold)
    return hold


def anonymous_prefix(address: str) -> str:
    """The name of an anonymous slot asked for from `address`, but for its number."""
    return f"{ANONYMOUS_NAME}{address}#"


def own_address(peer: str) -> str:
    """The caller's address as a pod's `status.podIP` writes it: an IPv4 address mapped into IPv6 (a
    dual-stack socket's) as IPv4."""
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(mapped if mapped is not None else address)


def _pod_address(pod: dict[str, Any]) -> str | None:
    """The pod's own address, or None when it has none or shares the node's (hostNetwork)."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return None
    address = (pod.get("status") or {}).get("podIP")
    return str(address) if address else None


class PodAddresses:
    """The pods on the node by their address, kept by the pod watch's handler (cluster mode), so that each
    ask finds its caller at once, not by a walk over the node's pods."""

    def __init__(self, view: clusterwatch.NodeView) -> None:
        self.view = view
        self._keys_at: dict[str, set[ledger.PodKey]] = {}
        self._address_of: dict[ledger.PodKey, str] = {}
        for pod in view.pods.objects():
            self._changed("ADDED", pod)
        view.pods.add_handler(self._changed)

    def _changed(self, kind: WatchEventType, obj: dict[str, Any]) -> None:
        key = pods.key_of(obj)
        before = self._address_of.pop(key, None)
        if before is not None:
            keys = self._keys_at[before]
            keys.discard(key)
            if not keys:
                del self._keys_at[before]
        address = _pod_address(obj) if kind != "DELETED" else None
        if address is not None:
            self._address_of[key] = address
            self._keys_at.setdefault(address, set()).add(key)

    def pod_at(self, address: str) -> dict[str, Any] | None:
        """The one pod, neither finished nor being deleted, with this address; None for none, or for more
        than one (an address handed on while its last pod's deletion is not seen yet: unknown until it is)."""
        found = [
            pod
            for key in self._keys_at.get(address, ())
            if (pod := self.view.pod(key)) is not None and pods.stage(pod) in ("starting", "ready")
        ]
        return found[0] if len(found) == 1 else None


def _text(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> asking.Answer:
    return asking.Answer(status, text.encode(), headers, content_type="text/plain")


_ACQUIRED = _text(200, "Lock acquired")


def _locked(retry_after: float) -> asking.Answer:
    return _text(423, "Locked", (("Retry-After", str(throttles.ceil_seconds(max(1.0, retry_after)))),))


@dataclass(eq=False)
class StartupLockPort:
    """The port's answer, for lockd's app `main`: its caller found by address, its ask put to the service."""

    main: web.Application
    hold: float
    _addresses: PodAddresses | None = field(default=None, init=False)

    def pod_at(self, address: str) -> dict[str, Any] | None:
        """The pod of this node at `address`; None standalone and for an address that is no pod's."""
        view = view_of(self.main)
        if view is None:
            return None
        if self._addresses is None or self._addresses.view is not view:
            self._addresses = PodAddresses(view)
        return self._addresses.pod_at(address)

    async def answer(self, *, raw_query: str, peer: str) -> asking.Answer:
        service, metrics = self.main[SERVICE], self.main[METRICS]
        if not service.ready or service.closing:
            metrics.count_on(VIA, "unavailable")
            return _locked(1.0)
        hold = requested_hold(raw_query, hold=self.hold)
        address = own_address(peer)
        pod = self.pod_at(address)
        outcome: ledger.Outcome
        if pod is not None:
            namespace, name = pods.key_of(pod)
            uid = str(pods.meta(pod).get("uid") or "")
            outcome = await service.wait_for_slot(
                namespace=namespace, name=name, uid=uid, wait=0, hold=hold, via=VIA
            )
        else:
            # A new slot for each 200: the address is usually the node bridge's, shared by all its pods.
            outcome = service.take_anonymous(
                duration=min(hold, service.node_policy.hold_timeout),
                prefix=anonymous_prefix(address),
                via=VIA,
            )
        if isinstance(outcome, ledger.Granted):
            metrics.count_on(VIA, "granted")
            return _ACQUIRED
        metrics.count_on(VIA, "queue_full" if isinstance(outcome, ledger.QueueFull) else "denied")
        return _locked(outcome.retry_after)

    async def at_door(
        self, app: web.Application, ask: longpoll.Ask, peer: str, alive: Callable[[], bool]
    ) -> asking.Answer:
        """`answer`, as the door (`longpoll.LockAsks`) asks it."""
        return await self.answer(raw_query=ask.raw_query, peer=peer)


PORT = web.AppKey("startup_lock_port", StartupLockPort)


async def _get_root(request: web.Request) -> web.Response:
    """`GET /` when aiohttp serves it (a request the door leaves to aiohttp: HTTP/1.0, a header it does not
    read); the door answers the usual one itself."""
    answer = await request.app[PORT].answer(
        raw_query=request.rel_url.raw_query_string, peer=request.remote or "-"
    )
    return answer.response()


def make_app(port: StartupLockPort, *, max_body: int) -> web.Application:
    """The port's aiohttp app: `GET /` and nothing else (404 for another path, 405 for another method, HEAD
    included: it would take a slot nobody is told of)."""
    app = web.Application(
        client_max_size=max_body, middlewares=[serving.json_errors(max_body=max_body, read_first=True)]
    )
    app[PORT] = port
    app.router.add_get("/", _get_root, allow_head=False)
    return app


def make_runner(
    main: web.Application, *, settings: Settings, access_log: logging.Logger | None
) -> server.Runner:
    """The port's runner for lockd's app `main`: lockd's own (`server.make_runner`, the same bounds and
    counts), with this port's answer at the door."""
    port = StartupLockPort(main=main, hold=settings.queue.pod_startup_lock_hold)
    return server.make_runner(
        make_app(port, max_body=settings.server.max_body),
        settings=settings.server,
        metrics=main[METRICS],
        access_log=access_log,
        local=longpoll.LockAsks(main, answer=port.at_door, root_only=True),
    )
