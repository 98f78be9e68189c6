"""List+watch cache of one resource (client-go's informer, small): resumes from the last
resourceVersion, relists on 410 Gone, and calls handlers on every change.

When the API server cannot be reached or keeps failing, the informer retries with a jittered backoff
(`retry_seconds` doubling up to `max_retry_seconds`) and logs one warning when the outage starts (what
failed, and why) and one info line when it ends (how long, how many attempts failed); the failed
attempts in between are logged at debug level only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from stagger.kube import ApiError, Resource, RestClient, WatchEventType
from stagger.objects import Obj

logger = logging.getLogger(__name__)

Handler = Callable[[WatchEventType, Obj], None]
Transform = Callable[[Obj], Obj]
"""Makes each listed or watched object smaller before it is stored (client-go's SetTransform): keep only
what the handlers read, so that thousands of objects cost kilobytes, not megabytes."""


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
    """Pause after the first failed list or watch of an outage (the API server may be restarting); it
    doubles with every further failure in a row, up to `max_retry_seconds`."""
    max_retry_seconds: float = 30.0
    """Longest pause between two attempts during an outage."""
    retry_jitter: float = 0.5
    """Each pause is shortened by a random share of itself, up to this fraction, so that many informers
    that lost the same API server do not all come back in the same instant."""
    list_page_size: int = 500
    """Items per list request (0: the whole list in one answer). A list is read in pages and each page is
    made lean (the `transform`) before the next is read, so the memory a list needs at once is one page
    decoded, not the whole list: decoded JSON is several times its size, and what a process frees after
    such a peak mostly stays with it. 500 is client-go's page size."""


def retry_delay(failures: int, *, settings: InformerSettings, jitter: float) -> float:
    """The pause after the `failures`-th failure in a row (1-based); `jitter` is uniform in [0, 1)."""
    exponent = min(max(failures - 1, 0), 32)  # far past any cap; keeps 2**n small
    base = min(settings.max_retry_seconds, settings.retry_seconds * float(2**exponent))
    return base * (1.0 - settings.retry_jitter * jitter)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Informer:
    """Keeps `store` (key -> object) in sync with the API and calls handlers on every change.

    Handlers run synchronously in the informer task, in event order (a DELETED object is the final
    state of the object). `record` lets a writer put its own write's answer into the cache at once, so
    its next decision does not act on a stale view; an older watch event never overwrites it.

    `sleep`, `clock` (monotonic seconds) and `rng` (uniform in [0, 1)) are the retry backoff's, for tests.
    An outage ends when the server answers again: a list succeeds, a watch delivers an event (bookmarks
    included, which a real server sends about once a minute), ends when the server meant it to, or is
    answered 410 Gone.
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
        transform: Transform | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
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
        self._transform = transform
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        # The current outage: when its first failure happened, and how many attempts failed since.
        self._down_since: float | None = None
        self._failures = 0

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
            step = "list" if self.resource_version is None else "watch"
            try:
                if self.resource_version is None:
                    self.resource_version = await self._relist()
                    self._recovered()
                    step = "watch"
                await self._watch()
                self._recovered()
            except ApiError as exc:
                if exc.status == 410:
                    self._recovered()
                    logger.info("%s watch expired (410 Gone), relisting", self.resource.plural)
                    self.resource_version = None
                    continue
                await self._failed(step, exc)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                await self._failed(step, exc)

    async def _failed(self, step: str, exc: BaseException) -> None:
        """One failed attempt: a warning if it starts an outage (debug otherwise), then the backoff."""
        self._failures += 1
        if self._down_since is None:
            self._down_since = self._clock()
            logger.warning(
                "%s %s failed (%s); retrying with backoff (%gs doubling to %gs), "
                "one line when it works again",
                self.resource.plural,
                step,
                _describe(exc),
                self._settings.retry_seconds,
                self._settings.max_retry_seconds,
            )
        else:
            logger.debug(
                "%s %s failed again (attempt %d): %s",
                self.resource.plural,
                step,
                self._failures,
                _describe(exc),
            )
        await self._sleep(retry_delay(self._failures, settings=self._settings, jitter=self._rng()))

    def _recovered(self) -> None:
        """The server answered: ends the current outage (if any) with one line, and resets the backoff."""
        if self._down_since is None:
            return
        logger.info(
            "%s list/watch works again after %.1fs down (%d failed attempts)",
            self.resource.plural,
            self._clock() - self._down_since,
            self._failures,
        )
        self._down_since = None
        self._failures = 0

    async def _list_page(
        self, *, limit: int, continue_token: str | None
    ) -> tuple[list[Obj], str, str | None]:
        """One page: its items (made lean), the list's resourceVersion, and the next page's token."""
        page = await self._client.list(
            self.resource,
            namespace=self._namespace,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            limit=limit,
            continue_token=continue_token,
        )
        items = page.get("items") or []
        if self._transform is not None:
            items = [self._transform(item) for item in items]
        metadata = page.get("metadata") or {}
        return items, str(metadata.get("resourceVersion") or "0"), metadata.get("continue") or None

    async def _list(self) -> tuple[list[Obj], str]:
        """The whole list, in pages of `list_page_size`. Every page of one list is served at the first
        page's resourceVersion, so together they are one consistent snapshot. A continue token can expire
        (410) if a list takes longer than etcd keeps its revision (about 5 minutes); the list is then read
        again whole, in one request, as client-go's pager does (`FullListIfExpired`).
        https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks"""
        limit = self._settings.list_page_size
        items, version, token = await self._list_page(limit=limit, continue_token=None)
        while token is not None:
            try:
                page, version, token = await self._list_page(limit=limit, continue_token=token)
            except ApiError as err:
                if err.status != 410:
                    raise
                logger.info(
                    "%s list: continue token expired (%s); listing again in one request",
                    self.resource.plural,
                    err,
                )
                items, version, token = await self._list_page(limit=0, continue_token=None)
                break
            items.extend(page)
        return items, version

    async def _relist(self) -> str:
        items, version = await self._list()
        self.relists += 1
        fresh: dict[str, Obj] = {cache_key(item): item for item in items}
        for key in [k for k in self.store if k not in fresh]:
            self._notify("DELETED", self.store.pop(key))
        for key, item in fresh.items():
            existed = key in self.store
            self.store[key] = item
            self._notify("MODIFIED" if existed else "ADDED", item)
        self.synced.set()
        return version

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
            self._recovered()
            obj = event["object"]
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if event["type"] != "BOOKMARK":
                self._apply(event["type"], obj)

    def _apply(self, kind: WatchEventType, obj: Obj) -> None:
        if self._transform is not None:
            obj = self._transform(obj)
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
