"""Watch streams: newline-delimited JSON events, as the real server's cacher sends them.

* `resourceVersion` unset or "0" (or `sendInitialEvents=true`): synthetic ADDED events for the current
  state first; otherwise the kept events after that version, or one ERROR event with a 410 Expired
  Status ("too old resource version: X (Y)") when some were already dropped, then the end.
* selectors are applied per event; an object that stops matching is sent as DELETED.
* `allowWatchBookmarks`: a BOOKMARK every `watch_bookmark_interval` (only when everything up to the
  bookmark's version was sent), and after the initial events when `sendInitialEvents=true`, with the
  `k8s.io/initial-events-end` annotation.
* `timeoutSeconds` (default `watch_timeout`): the stream ends cleanly.
The subscription is registered in the same synchronous step that computes the initial events, so
nothing falls between them; it is removed in `finally`, whatever ends the stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sim.emulator import errors
from sim.emulator.errors import ApiError
from sim.emulator.listoptions import parse_resource_version
from sim.emulator.resources import ResourcePath, ResourceType
from sim.emulator.state import ApiState
from sim.emulator.store import Delivery, Store, StoredEvent, Watcher
from stagger.objects import Obj

logger = logging.getLogger(__name__)


def _line(kind: str, body: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass(frozen=True)
class WatchQuery:
    """The query parameters of a watch request."""

    timeout: float
    bookmarks: bool
    send_initial: bool
    resource_version: str

    @classmethod
    def parse(cls, query: Any, *, default_timeout: float) -> WatchQuery:
        raw_timeout = query.get("timeoutSeconds", "")
        try:
            timeout = float(int(raw_timeout)) if raw_timeout else default_timeout
        except ValueError as err:
            raise errors.bad_request(f'invalid value for timeoutSeconds: "{raw_timeout}"') from err
        return cls(
            timeout=timeout,
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            send_initial=query.get("sendInitialEvents") in ("true", "1"),
            resource_version=query.get("resourceVersion", ""),
        )

    @property
    def from_current_state(self) -> bool:
        return self.send_initial or self.resource_version in ("", "0")


def initial_deliveries(store: Store, storage: str, *, watcher: Watcher, query: WatchQuery) -> list[Delivery]:
    """What the stream starts with: the current state as synthetic ADDED events (each at its object's own
    resourceVersion), or the kept events after the requested version. Raises 410 Expired when some of
    those were already dropped, 400 for a version that is not one."""
    if query.from_current_state:
        return [
            Delivery("ADDED", StoredEvent("ADDED", int(obj["metadata"]["resourceVersion"]), obj, None))
            for obj in store.objects(storage, watcher.namespace)
            if watcher.predicate(obj)
        ]
    since = parse_resource_version(query.resource_version, watch=True)
    return [d for d in map(watcher.classify, store.events_since(storage, since)) if d is not None]


class Encoder:
    """Watch event lines; an event's rendering is cached on it per view, shared by every watcher."""

    def __init__(self, rtype: ResourceType, *, render: Callable[[Obj], Obj], view: str) -> None:
        self.rtype = rtype
        self.render = render
        self.view = view

    def event(self, delivery: Delivery) -> bytes:
        if delivery.use_prev:
            return _line(delivery.type, _dumps(self.render(delivery.object())))
        cached = delivery.event.encoded.get(self.view)
        if cached is None:
            cached = delivery.event.encoded[self.view] = _dumps(self.render(delivery.event.obj))
        return _line(delivery.type, cached)

    def bookmark(self, rv: int, *, initial_end: bool = False) -> bytes:
        metadata: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        body = {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version, "metadata": metadata}
        return _line("BOOKMARK", _dumps(body))


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    state: ApiState,
    *,
    watcher: Watcher,
    encoder: Encoder,
    query: WatchQuery,
) -> None:
    """Send live events as they come, and bookmarks, until the timeout, an overflow, the server stopping
    or the client going away."""
    settings, store = state.settings, state.store
    loop = asyncio.get_running_loop()
    deadline = loop.time() + query.timeout
    next_bookmark = loop.time() + settings.watch_bookmark_interval
    while (not watcher.overflowed or watcher.pending) and not state.stopping:
        while watcher.pending:
            await response.write(encoder.event(watcher.pending.popleft()))
        now = loop.time()
        if now >= deadline or watcher.overflowed or state.stopping:
            return
        if query.bookmarks and now >= next_bookmark:
            # Everything up to store.rv has been offered to this watcher and written: the bookmark is true.
            await response.write(encoder.bookmark(store.rv))
            next_bookmark = now + settings.watch_bookmark_interval
        wait = min(deadline - now, settings.watch_liveness_interval)
        if query.bookmarks:
            wait = min(wait, max(0.0, next_bookmark - now))
        watcher.ready.clear()
        if watcher.pending:
            continue
        try:
            async with asyncio.timeout(wait):
                await watcher.ready.wait()
        except TimeoutError:
            transport = request.transport
            if transport is None or transport.is_closing():
                return


async def serve_watch(
    request: web.Request,
    state: ApiState,
    target: ResourcePath,
    *,
    predicate: Callable[[Obj], bool],
    render: Callable[[Obj], Obj],
    view: str,
) -> web.StreamResponse:
    store, rtype = state.store, target.rtype
    storage = rtype.storage_key
    if target.name is not None:
        name, matches = target.name, predicate
        predicate = lambda obj: (obj.get("metadata") or {}).get("name") == name and matches(obj)  # noqa: E731
    query = WatchQuery.parse(request.query, default_timeout=state.settings.watch_timeout)
    watcher = Watcher(
        namespace=target.namespace if rtype.namespaced else None,
        predicate=predicate,
        queue_limit=state.settings.watch_queue_limit,
    )
    # The initial events and the subscription happen in one synchronous step: nothing falls between.
    failure: ApiError | None = None
    try:
        initial = initial_deliveries(store, storage, watcher=watcher, query=query)
    except ApiError as err:
        if err.code != 410:
            raise
        initial, failure = [], err
    initial_rv = store.rv
    if failure is None:
        store.subscribe(storage, watcher)
    encoder = Encoder(rtype, render=render, view=view)
    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    )
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        if failure is not None:
            await response.write(_line("ERROR", _dumps(failure.status)))
        else:
            for delivery in initial:
                await response.write(encoder.event(delivery))
            if query.send_initial and query.bookmarks:
                await response.write(encoder.bookmark(initial_rv, initial_end=True))
            await _follow(request, response, state, watcher=watcher, encoder=encoder, query=query)
        await response.write_eof()
    except ConnectionError:
        logger.debug("watch client of %s went away", rtype.name)
    finally:
        store.unsubscribe(storage, watcher)
    return response
