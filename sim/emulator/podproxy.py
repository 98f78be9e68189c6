"""The pod proxy: `/api/v1/namespaces/{namespace}/pods/{name}/proxy[/{path}]`, which the Kubernetes API
reference calls "Connect GET requests to proxy of Pod" (also POST, PUT, PATCH, DELETE, HEAD, OPTIONS):
the API server forwards the request to the pod and answers with what the pod answered.

As the real server resolves it (kube-apiserver, pkg/registry/core/pod/strategy.go, `ResourceLocation`):
`{name}` is `name`, `name:port` or `scheme:name:port` (scheme `http` or `https`, `http` by default); without
a port, the first port of the first container that declares one; the address is the pod's IP
(`status.podIPs[0]`, else `status.podIP`). An unknown pod is 404 NotFound, a name that does not split is
400 BadRequest; a pod that cannot be reached is 503 ServiceUnavailable ("error trying to reach service"),
as the real proxy answers. The real server sends HTTPS to a pod without checking its certificate (pod
IPs have no names to verify), and so does this.

Where it knowingly differs: the real server refuses an address that is not global unicast (400 "address
not allowed"), which would refuse every address here, since the whole emulated cluster lives on loopback
(the simulated cluster's stagger processes listen on 127.0.0.0/8, `sim.cluster.standins`); and only the
request's path, query, body and Content-Type/Accept headers go through (no upgrades, no streaming).
"""

from __future__ import annotations

import ipaddress
import logging

import aiohttp
from aiohttp import web

from sim.emulator import errors
from sim.emulator.render import error_response
from sim.emulator.resources import builtin
from sim.emulator.state import STATE
from stagger.objects import Obj

__all__ = ["ROUTE", "proxy_to_pod", "split_scheme_name_port", "target_of"]

logger = logging.getLogger(__name__)

ROUTE = "/api/v1/namespaces/{namespace}/pods/{name}/proxy{path:(/.*)?}"
"""Registered before the emulator's catch-all route (aiohttp matches routes in the order added)."""

_TIMEOUT = aiohttp.ClientTimeout(total=30)
_FORWARDED_HEADERS = ("Accept", "Content-Type")


def split_scheme_name_port(id_: str) -> tuple[str, str, str] | None:
    """`name`, `name:port` or `scheme:name:port` as (scheme, name, port); None when it does not split
    (k8s.io/apimachinery/pkg/util/net `SplitSchemeNamePort`: the scheme is http or https)."""
    parts = id_.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
        if scheme not in ("http", "https"):
            return None
    else:
        return None
    if not name:
        return None
    return scheme or "http", name, port


def _pod_ip(pod: Obj) -> str:
    status = pod.get("status") or {}
    ips = status.get("podIPs") or []
    if ips and isinstance(ips[0], dict) and ips[0].get("ip"):
        return str(ips[0]["ip"])
    return str(status.get("podIP") or "")


def _first_port(pod: Obj) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            return str(port.get("containerPort"))
    return ""


def target_of(pod: Obj, *, scheme: str, port: str) -> str:
    """The URL (without path) the request goes to: the pod's IP and the port asked for, or its first."""
    ip = _pod_ip(pod)
    if not ip:
        # The real server builds an address without a host, and the dial fails: the same answer.
        raise errors.ApiError(
            errors.failure(
                code=503, reason="ServiceUnavailable", message="error trying to reach service: no pod IP"
            )
        )
    host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
    port = port or _first_port(pod)
    return f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"


async def proxy_to_pod(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    state.request_total += 1
    state.request_counts[(request.method.lower(), "pods/proxy")] += 1
    try:
        split = split_scheme_name_port(request.match_info["name"])
        if split is None:
            raise errors.bad_request(f'invalid pod request "{request.match_info["name"]}"')
        scheme, name, port = split
        pod = state.registry.get(builtin("", "pods"), request.match_info["namespace"], name)
        url = target_of(pod, scheme=scheme, port=port) + (request.match_info["path"] or "/")
        return await _forward(request, url)
    except errors.ApiError as err:
        return error_response(err)


async def _forward(request: web.Request, url: str) -> web.Response:
    headers = {key: request.headers[key] for key in _FORWARDED_HEADERS if key in request.headers}
    body = await request.read()
    try:
        # A session per request: the proxy is for people and tools asking now and then, not a data path.
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                url,
                params=request.query,
                data=body or None,
                headers=headers,
                ssl=False,  # as the real server: pod IPs have no names a certificate could be checked for
                timeout=_TIMEOUT,
                allow_redirects=False,
            ) as answer,
        ):
            payload = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k in ("Content-Type", "Retry-After")}
            return web.Response(status=answer.status, body=payload, headers=kept)
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        logger.debug("pod proxy to %s failed: %r", url, err)
        raise errors.ApiError(
            errors.failure(
                code=503,
                reason="ServiceUnavailable",
                message=f"error trying to reach service: {err or type(err).__name__}",
            )
        ) from err
