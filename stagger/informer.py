"""List+watch cache of one resource (client-go's informer, small): resumes from the last
resourceVersion, relists on 410 Gone, and calls handlers on every change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from stagger.kube import ApiError, Resource, RestClient, WatchEventType

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Handler = Callable[[WatchEventType, Obj], None]


def cache_key(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects), like client-go's cache keys."""
    metadata = obj.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    return f"{namespace}/{name}" if namespace else name


def resource_version_newer(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """True unless `new` is provably older than `old` (resourceVersions compared as integers when both
    are; otherwise they are opaque and the newer-arriving one wins)."""
    a = (new.get("metadata") or {}).get("resourceVersion")
    b = (old.get("metadata") or {}).get("resourceVersion")
    if isinstance(a, str) and isinstance(b, str) and a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


@dataclass(frozen=True)
class InformerSettings:
    watch_timeout_seconds: int = 300
    """Server-side length of one watch request; the informer then re-watches from its last version."""
    retry_seconds: float = 1.0
    """Pause after a failed list or watch before trying again (the API server may be restarting)."""


class Informer:
    """Keeps `store` (key -> object) in sync with the API and calls handlers on every change.

    Handlers run synchronously in the informer task, in event order (a DELETED object is the final
    state of the object). `record` lets a writer put its own write's answer into the cache at once, so
    its next decision does not act on a stale view; an older watch event never overwrites it.
    """

    def __init__(
        self,
        *,
        client: RestClient,
        resource: Resource,
        settings: InformerSettings,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.resource = resource
        self.store: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        # The last resourceVersion seen (list or watch event, bookmarks included); None before the first list.
        self.resource_version: str | None = None
        self._client = client
        self._settings = settings
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._handlers: list[Handler] = []

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def objects(self) -> list[Obj]:
        return list(self.store.values())

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def record(self, obj: Mapping[str, Any]) -> None:
        """Put a write's answer (the object as the server now has it) into the cache."""
        if obj.get("kind") == "Status" or not obj.get("metadata"):
            return
        self._apply("MODIFIED", dict(obj))

    def forget(self, key: str) -> None:
        """Drop an object the writer knows is gone (its delete succeeded) before the watch says so."""
        removed = self.store.pop(key, None)
        if removed is not None:
            self._notify("DELETED", removed)

    async def run(self) -> None:
        """List, then watch for ever (until cancelled). Run again after a cancel, it resumes from the last
        resourceVersion it saw, and relists only if the server says that version is gone (410)."""
        while True:
            try:
                if self.resource_version is None:
                    self.resource_version = await self._relist()
                await self._watch()
            except ApiError as exc:
                if exc.status == 410:
                    logger.info("%s watch expired (410 Gone), relisting", self.resource.plural)
                    self.resource_version = None
                    continue
                logger.warning("%s list/watch failed: %s", self.resource.plural, exc)
                await asyncio.sleep(self._settings.retry_seconds)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                logger.warning("%s list/watch failed: %r", self.resource.plural, exc)
                await asyncio.sleep(self._settings.retry_seconds)

    async def _relist(self) -> str:
        listed = await self._client.list(
            self.resource,
            namespace=self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
        )
        self.relists += 1
        fresh: dict[str, Obj] = {cache_key(item): item for item in listed.get("items") or []}
        for key in [k for k in self.store if k not in fresh]:
            self._notify("DELETED", self.store.pop(key))
        for key, item in fresh.items():
            existed = key in self.store
            self.store[key] = item
            self._notify("MODIFIED" if existed else "ADDED", item)
        self.synced.set()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "0")

    async def _watch(self) -> None:
        assert self.resource_version is not None
        async for event in self._client.watch(
            self.resource,
            resource_version=self.resource_version,
            timeout_seconds=self._settings.watch_timeout_seconds,
            namespace=self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
        ):
            obj = event["object"]
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if event["type"] != "BOOKMARK":
                self._apply(event["type"], obj)

    def _apply(self, kind: WatchEventType, obj: Obj) -> None:
        key = cache_key(obj)
        if kind == "DELETED":
            self.store.pop(key, None)
            self._notify(kind, obj)
            return
        current = self.store.get(key)
        if current is not None and not resource_version_newer(obj, current):
            return
        if current is not None and (current.get("metadata") or {}).get("uid") != (
            obj.get("metadata") or {}
        ).get("uid"):
            # The same name now belongs to another object: the old one is gone.
            self._notify("DELETED", current)
        self.store[key] = obj
        self._notify(kind, obj)

    def _notify(self, kind: WatchEventType, obj: Obj) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj)
            except Exception:
                logger.exception("%s event handler failed", self.resource.plural)
