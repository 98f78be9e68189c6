"""In-memory object storage with one global resourceVersion counter, bounded per-resource event
history for watch resumption, and in-memory fan-out to watchers.

Stored objects are never mutated after `put`: every change stores a fresh dict, so readers may hold
on to (and serialize) what they got without copying. All methods are synchronous; the server is a
single asyncio process, so a method call is atomic.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sim.emulator import errors
from stagger.objects import Obj

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


def meta(obj: Obj) -> dict[str, Any]:
    found: dict[str, Any] = obj.setdefault("metadata", {})
    return found


def key_of(obj: Obj) -> tuple[str, str]:
    m = obj.get("metadata") or {}
    return (m.get("namespace") or "", m.get("name") or "")


@dataclass(eq=False)
class StoredEvent:
    type: EventType
    rv: int
    obj: Obj
    prev: Obj | None
    # Serialized forms by view ("json", "events.k8s.io/v1", ...), shared by all watchers of the event.
    encoded: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Delivery:
    """What one watcher is sent for one stored event; `use_prev` when an object stopped matching."""

    type: EventType
    event: StoredEvent
    use_prev: bool = False

    def object(self) -> Obj:
        if not self.use_prev:
            return self.event.obj
        assert self.event.prev is not None
        # Like the real cacher: the previous content, stamped with the event's resourceVersion.
        return {
            **self.event.prev,
            "metadata": {**self.event.prev["metadata"], "resourceVersion": str(self.event.rv)},
        }


class Watcher:
    """One watch request's subscription. `offer` runs inside the writer's call, so deliveries are in
    write order and nothing can be missed between registration and the first event. Deliveries wait
    in a deque, with an Event to wake the stream (waiting on an Event with a timeout cannot lose an
    item, unlike cancelling a queue get)."""

    def __init__(self, *, namespace: str | None, predicate: Callable[[Obj], bool], queue_limit: int) -> None:
        self.namespace = namespace
        self.predicate = predicate
        self.queue_limit = queue_limit
        self.pending: deque[Delivery] = deque()
        self.ready = asyncio.Event()
        self.overflowed = False

    def classify(self, event: StoredEvent) -> Delivery | None:
        if (
            self.namespace is not None
            and (event.obj.get("metadata") or {}).get("namespace") != self.namespace
        ):
            return None
        now = self.predicate(event.obj)
        if event.type != "MODIFIED" or event.prev is None:
            return Delivery(event.type, event) if now else None
        before = self.predicate(event.prev)
        if now and before:
            return Delivery("MODIFIED", event)
        if now:
            return Delivery("ADDED", event)
        if before:
            return Delivery("DELETED", event, use_prev=True)
        return None

    def offer(self, event: StoredEvent) -> None:
        if self.overflowed:
            return
        delivery = self.classify(event)
        if delivery is None:
            return
        if len(self.pending) >= self.queue_limit:
            # A client that does not read is cut off (the real cacher does the same); it re-watches.
            self.overflowed = True
        else:
            self.pending.append(delivery)
        self.ready.set()


@dataclass
class _History:
    events: deque[StoredEvent]
    truncated: bool = False
    dropped_rv: int = 0  # the newest event no longer kept (0: none dropped yet)


@dataclass(frozen=True)
class ListPage:
    items: list[Obj]
    resource_version: int
    continue_token: str
    remaining: int | None


class Store:
    def __init__(self, *, history: int) -> None:
        if history < 1:
            raise ValueError("watch history must keep at least one event")
        self._history_size = history
        self.rv = 0
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._histories: dict[str, _History] = {}
        self._watchers: dict[str, set[Watcher]] = {}
        self._listeners: list[Callable[[str, StoredEvent], None]] = []

    # ------------------------------------------------------------------------------------------ reads

    def get(self, storage: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(storage, {}).get((namespace, name))

    def objects(self, storage: str, namespace: str | None = None) -> Iterator[Obj]:
        """Objects in key order (namespace, name), like etcd's key order."""
        bucket = self._objects.get(storage, {})
        for key in sorted(bucket):
            if namespace is None or key[0] == namespace:
                yield bucket[key]

    def snapshot(self, storage: str, rv: int) -> dict[tuple[str, str], Obj]:
        """The objects of `storage` as they were at resourceVersion `rv` (everything written up to it),
        rebuilt by undoing the kept events after it; 410 Expired when some of those were dropped."""
        current = dict(self._objects.get(storage, {}))
        if rv >= self.rv:
            return current
        history = self._histories.get(storage)
        if history is None:
            return current
        if rv < history.dropped_rv:
            raise errors.expired(errors.LIST_TOO_OLD)
        for event in reversed(history.events):
            if event.rv <= rv:
                break
            key = key_of(event.obj)
            if event.type == "ADDED":
                current.pop(key, None)
            elif event.prev is not None:
                current[key] = event.prev
        return current

    def list_page(
        self,
        storage: str,
        *,
        namespace: str | None,
        predicate: Callable[[Obj], bool],
        limit: int,
        continue_token: str,
        at_rv: int | None = None,
    ) -> ListPage:
        """One page of a list: the state at `at_rv` (None: the current one), or, with a continue token, at
        the token's version (a consistent list across pages) after the token's key."""
        list_rv, start = (self.rv if at_rv is None else at_rv), None
        if continue_token:
            token_rv, start = decode_continue(continue_token)
            list_rv = self.rv if token_rv == -1 else token_rv
            if token_rv != -1 and token_rv < self._dropped_rv(storage):
                # etcd3's handleCompactedErrorForPaging: go on at the current state with a new token.
                raise errors.expired(errors.CONTINUE_TOO_OLD, continue_token=encode_continue(-1, start))
        bucket = self.snapshot(storage, list_rv) if list_rv < self.rv else self._objects.get(storage, {})
        keys = sorted(
            k for k in bucket if (namespace is None or k[0] == namespace) and (start is None or k > start)
        )
        items: list[Obj] = []
        last: tuple[str, str] | None = None
        remaining = 0
        for index, key in enumerate(keys):
            obj = bucket[key]
            if not predicate(obj):
                continue
            if limit and len(items) >= limit:
                remaining = sum(1 for k in keys[index:] if predicate(bucket[k]))
                break
            items.append(obj)
            last = key
        token = encode_continue(list_rv, last) if remaining and last is not None else ""
        return ListPage(items, list_rv, token, remaining if token else None)

    def _dropped_rv(self, storage: str) -> int:
        history = self._histories.get(storage)
        return 0 if history is None else history.dropped_rv

    # ----------------------------------------------------------------------------------------- writes

    def put(self, storage: str, obj: Obj) -> Obj:
        """Store `obj` (a fresh dict the caller hands over) under a new resourceVersion."""
        key = key_of(obj)
        bucket = self._objects.setdefault(storage, {})
        prev = bucket.get(key)
        self.rv += 1
        meta(obj)["resourceVersion"] = str(self.rv)
        bucket[key] = obj
        self._record(storage, StoredEvent("MODIFIED" if prev is not None else "ADDED", self.rv, obj, prev))
        return obj

    def remove(self, storage: str, namespace: str, name: str, *, last: Obj | None = None) -> Obj:
        """Remove an object; `last` is its final state when that was never stored (a deletion that
        sets deletionTimestamp and completes in the same step)."""
        bucket = self._objects.get(storage, {})
        prev = bucket.pop((namespace, name))
        self.rv += 1
        # The DELETED event carries the last state at the deletion's resourceVersion.
        base = last if last is not None else prev
        final = {**base, "metadata": {**base["metadata"], "resourceVersion": str(self.rv)}}
        self._record(storage, StoredEvent("DELETED", self.rv, final, prev))
        return final

    def _record(self, storage: str, event: StoredEvent) -> None:
        history = self._histories.get(storage)
        if history is None:
            history = self._histories[storage] = _History(deque(maxlen=self._history_size))
        if len(history.events) == self._history_size:
            history.truncated = True
            history.dropped_rv = history.events[0].rv
        history.events.append(event)
        for watcher in tuple(self._watchers.get(storage, ())):
            watcher.offer(event)
        for listener in self._listeners:
            listener(storage, event)

    def add_listener(self, listener: Callable[[str, StoredEvent], None]) -> None:
        """Call `listener` after every write, inside it (the emulator's controllers: they may write too)."""
        self._listeners.append(listener)

    # ---------------------------------------------------------------------------------------- watches

    def events_since(self, storage: str, rv: int) -> list[StoredEvent]:
        """Events of `storage` after `rv`; 410 Expired when some of them were already dropped."""
        history = self._histories.get(storage)
        if history is None or not history.events:
            return []
        oldest = history.events[0].rv
        if history.truncated and rv < oldest - 1:
            raise errors.expired(f"too old resource version: {rv} ({oldest - 1})")
        found: list[StoredEvent] = []
        for event in reversed(history.events):
            if event.rv <= rv:
                break
            found.append(event)
        found.reverse()
        return found

    def subscribe(self, storage: str, watcher: Watcher) -> None:
        self._watchers.setdefault(storage, set()).add(watcher)

    def unsubscribe(self, storage: str, watcher: Watcher) -> None:
        self._watchers.get(storage, set()).discard(watcher)

    def watcher_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    def wake_watchers(self) -> None:
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.ready.set()


def encode_continue(rv: int, last: tuple[str, str]) -> str:
    # Same shape as the real token (base64 JSON with the list RV and the key to continue after).
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{last[0]}/{last[1]}\u0000"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("unexpected version")
        namespace, _, name = str(data["start"]).rstrip("\u0000").partition("/")
        return int(data["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as err:
        raise errors.bad_request(f"invalid continue token: continue key is not valid: {err}") from err
