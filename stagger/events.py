"""Kubernetes Events about pods (core/v1), written in the background so that no request waits on the
API server for them. One event per change of state, never one per poll: callers decide when."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from stagger.kube import EVENTS, ApiError, RestClient
from stagger.timestamps import format_rfc3339

logger = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


def pod_event(
    *,
    pod: PodRef,
    reason: str,
    message: str,
    component: str,
    host: str,
    wall: float,
    kind: EventType = "Normal",
) -> dict[str, Any]:
    """A core/v1 Event about a pod, as `kubectl describe pod` shows it. Pure."""
    stamp = format_rfc3339(wall, digits=0)
    micro = format_rfc3339(wall, digits=6)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # Like client-go: the object's name and a unique suffix.
            "name": f"{pod.name}.{int(wall * 1e9):x}{secrets.token_hex(2)}",
            "namespace": pod.namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": kind,
        "source": {"component": component, "host": host},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": micro,
        "count": 1,
        "action": reason,
        "reportingComponent": component,
        "reportingInstance": host,
    }


class EventRecorder:
    """A bounded queue of events and one task that writes them; when the queue is full, events are
    dropped with a log line rather than slowing down decisions."""

    def __init__(self, *, client: RestClient, capacity: int = 1000) -> None:
        self._client = client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self.written = 0
        self.dropped = 0

    def record(self, event: Mapping[str, Any]) -> None:
        try:
            self._queue.put_nowait(dict(event))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                logger.warning("event queue full, %d events dropped so far", self.dropped)

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            namespace = str(event["metadata"]["namespace"])
            try:
                await self._client.create(EVENTS, event, namespace=namespace)
                self.written += 1
            except (ApiError, aiohttp.ClientError, TimeoutError) as err:
                # Events are for people; a failure to write one must never affect a pod.
                logger.warning(
                    "could not write event %s for %s/%s: %s",
                    event["reason"],
                    namespace,
                    event["involvedObject"]["name"],
                    err,
                )
            finally:
                self._queue.task_done()

    async def drain(self, *, within: float) -> None:
        """Give queued events a moment to be written at shutdown."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout=within)
        except TimeoutError:
            logger.info("%d events not written at shutdown", self._queue.qsize())
