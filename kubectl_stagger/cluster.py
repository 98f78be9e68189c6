"""The API server's side of `status` and `why`: the thin I/O shell. It reads a kubeconfig (stagger.kube's
own reader: the official client is loaded only for kubeconfigs that need it, such as exec plugins), lists
pods by label, and reads each stagger pod's `/status` through the pod proxy, so nothing but the API server
has to be reachable from where `kubectl stagger` runs."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from kubectl_stagger import pods
from kubectl_stagger.problems import ExitCode, Problem
from kubectl_stagger.report import Fetched
from stagger import kube
from stagger.kube import EVENTS, PODS, ApiError, RestClient

__all__ = ["Cluster", "kubeconfig_path", "open_cluster"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Lockds asked at once: enough to read a few hundred nodes in seconds, few enough not to crowd the API
# server (each is a proxied request).
_FAN_OUT = 16


def kubeconfig_path(*, explicit: Path | None, environ: Mapping[str, str] = os.environ) -> Path:
    """As kubectl looks: --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config."""
    if explicit is not None:
        return explicit
    listed = [part for part in environ.get("KUBECONFIG", "").split(os.pathsep) if part]
    return Path(listed[0]) if listed else Path.home() / ".kube" / "config"


class Cluster:
    """The requests `status` and `why` make; every failure to reach the API server becomes a Problem."""

    def __init__(self, *, client: RestClient) -> None:
        self.client = client

    async def _call(self, request: Awaitable[T]) -> T:
        try:
            return await request
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise Problem(
                f"cannot reach the API server at {self.client.base_url}: {err or type(err).__name__}",
                code=ExitCode.UNREACHABLE,
            ) from err
        except ApiError as err:
            if err.status in (401, 403):
                raise Problem(f"the API server refused: {err}", code=ExitCode.UNREACHABLE) from err
            raise

    async def list_pods(self, *, namespace: str, selector: str) -> list[dict[str, Any]]:
        listed = await self._call(self.client.list(PODS, namespace=namespace, label_selector=selector))
        return [item for item in listed.get("items") or [] if isinstance(item, dict)]

    async def get_pod(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(self.client.get(PODS, name=name, namespace=namespace))
        except ApiError as err:
            if err.status == 404:
                return None
            raise Problem(f"reading pod {namespace}/{name}: {err}", code=ExitCode.UNREACHABLE) from err

    async def events_of(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        meta = pod.get("metadata") or {}
        selector = f"involvedObject.name={meta.get('name')}"
        try:
            listed = await self._call(
                self.client.list(EVENTS, namespace=str(meta.get("namespace")), field_selector=selector)
            )
        except ApiError as err:
            logger.warning("cannot list the pod's events: %s", err)
            return []
        uid = meta.get("uid")
        items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
        # The same name may have been another pod before: only this one's events.
        return [e for e in items if (e.get("involvedObject") or {}).get("uid") in (None, "", uid)]

    async def status_of(self, pod: Mapping[str, Any], *, component: str) -> Fetched:
        """The pod's `/status` through the pod proxy; an answer that is not one is `error`, not raised."""
        name, node = pods.name_of(pod), pods.node_of(pod)
        where = pods.endpoint(pod, component=component)
        if where is None:
            return Fetched(pod=name, node=node, error="the pod declares no port")
        path = pods.proxy_path(
            namespace=str((pod.get("metadata") or {}).get("namespace")),
            name=name,
            scheme=where[0],
            port=where[1],
            path="status",
        )
        try:
            doc = await self._call(self.client.request("GET", path))
        except ApiError as err:
            return Fetched(pod=name, node=node, error=f"{err.status} {err.message}"[:300])
        if not doc:
            return Fetched(pod=name, node=node, error="the answer was not a JSON object")
        return Fetched(pod=name, node=node, doc=doc)

    async def lockd_statuses(self, found: list[dict[str, Any]]) -> list[Fetched]:
        gate = asyncio.Semaphore(_FAN_OUT)

        async def one(pod: dict[str, Any]) -> Fetched:
            async with gate:
                return await self.status_of(pod, component="lockd")

        return list(await asyncio.gather(*(one(pod) for pod in found)))

    async def controller_status(self, found: list[dict[str, Any]]) -> Fetched | None:
        """The replica that paces the groups: the first whose `/status` says it grants, else the first that
        answered, else the last error; None without controller pods."""
        first: Fetched | None = None
        for pod in pods.by_preference(found):
            fetched = await self.status_of(pod, component="controller")
            groups = (fetched.doc or {}).get("groups") or {}
            if fetched.doc is not None and groups.get("granting"):
                return fetched
            if first is None or (first.doc is None and fetched.doc is not None):
                first = fetched
        return first


@asynccontextmanager
async def open_cluster(
    *, kubeconfig: Path, context: str | None, request_timeout: float
) -> AsyncIterator[Cluster]:
    try:
        config = kube.kubeconfig_config(kubeconfig, context=context)
    except kube.ConfigError as err:
        raise Problem(f"no usable kubeconfig: {err}", code=ExitCode.UNREACHABLE) from err
    except (OSError, ValueError) as err:  # a CA or key file it names cannot be read
        raise Problem(f"kubeconfig {kubeconfig}: {err}", code=ExitCode.UNREACHABLE) from err
    async with aiohttp.ClientSession() as session:
        try:
            client = RestClient(session=session, config=config, request_timeout=request_timeout)
        except (OSError, ValueError) as err:
            raise Problem(f"kubeconfig {kubeconfig}: {err}", code=ExitCode.UNREACHABLE) from err
        yield Cluster(client=client)
