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
from typing import Any

from aiohttp import web

from sim.emulator import errors
from sim.emulator.errors import ApiError
from sim.emulator.resources import ResourcePath
from sim.emulator.state import ApiState
from sim.emulator.store import Delivery, StoredEvent, Watcher
from stagger.objects import Obj

logger = logging.getLogger(__name__)


def _line(kind: str, body: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


async def serve_watch(
    request: web.Request,
    state: ApiState,
    target: ResourcePath,
    *,
    predicate: Callable[[Obj], bool],
    render: Callable[[Obj], Obj],
    view: str,
) -> web.StreamResponse:
    settings, store, rtype = state.settings, state.store, target.rtype
    query = request.query
    storage = rtype.storage_key
    namespace = target.namespace if rtype.namespaced else None
    if target.name is not None:
        name, matches = target.name, predicate
        predicate = lambda obj: (obj.get("metadata") or {}).get("name") == name and matches(obj)  # noqa: E731
    timeout_param = query.get("timeoutSeconds", "")
    try:
        timeout = float(int(timeout_param)) if timeout_param else settings.watch_timeout
    except ValueError as err:
        raise errors.bad_request(f'invalid value for timeoutSeconds: "{timeout_param}"') from err
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    send_initial = query.get("sendInitialEvents") in ("true", "1")
    rv_param = query.get("resourceVersion", "")

    watcher = Watcher(namespace=namespace, predicate=predicate, queue_limit=settings.watch_queue_limit)
    initial: list[Delivery] = []
    failure: ApiError | None = None
    if send_initial or rv_param in ("", "0"):
        # The current state as synthetic ADDED events, each at its object's own resourceVersion.
        initial = [
            Delivery("ADDED", StoredEvent("ADDED", int(obj["metadata"]["resourceVersion"]), obj, None))
            for obj in store.objects(storage, namespace)
            if predicate(obj)
        ]
    else:
        try:
            since = int(rv_param)
        except ValueError as err:
            raise errors.bad_request(
                f'resourceVersion: Invalid value: "{rv_param}": must be a valid resource version'
            ) from err
        try:
            initial = [d for d in map(watcher.classify, store.events_since(storage, since)) if d is not None]
        except ApiError as err:
            failure = err
    initial_rv = store.rv
    if failure is None:
        store.subscribe(storage, watcher)

    def encode(delivery: Delivery) -> bytes:
        if delivery.use_prev:
            return _line(delivery.type, _dumps(render(delivery.object())))
        cached = delivery.event.encoded.get(view)
        if cached is None:
            cached = delivery.event.encoded[view] = _dumps(render(delivery.event.obj))
        return _line(delivery.type, cached)

    def bookmark(rv: int, *, initial_end: bool = False) -> bytes:
        metadata: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
        return _line(
            "BOOKMARK", _dumps({"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": metadata})
        )

    response = web.StreamResponse(
        headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
    )
    response.enable_chunked_encoding()
    loop = asyncio.get_running_loop()
    try:
        await response.prepare(request)
        if failure is not None:
            await response.write(_line("ERROR", _dumps(failure.status)))
            await response.write_eof()
            return response
        for delivery in initial:
            await response.write(encode(delivery))
        if send_initial and bookmarks:
            await response.write(bookmark(initial_rv, initial_end=True))
        deadline = loop.time() + timeout
        next_bookmark = loop.time() + settings.watch_bookmark_interval
        while (not watcher.overflowed or watcher.pending) and not state.stopping:
            while watcher.pending:
                await response.write(encode(watcher.pending.popleft()))
            now = loop.time()
            if now >= deadline or watcher.overflowed or state.stopping:
                break
            if bookmarks and now >= next_bookmark:
                # Everything up to store.rv has been offered to this watcher and written: the bookmark is true.
                await response.write(bookmark(store.rv))
                next_bookmark = now + settings.watch_bookmark_interval
            wait = min(deadline - now, settings.watch_liveness_interval)
            if bookmarks:
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
                    break
        await response.write_eof()
    except ConnectionError:
        logger.debug("watch client of %s went away", rtype.name)
    finally:
        store.unsubscribe(storage, watcher)
    return response
