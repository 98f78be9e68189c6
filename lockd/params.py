"""Query parameters of lockd's endpoints, checked before anything changes. Pure functions."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL

from stagger.contracts.lock import RELEASE_TOKEN_HEADER
from stagger.objectnames import is_dns1123_label, is_dns1123_subdomain, is_uid

# Seconds are plain decimal digits: Python's float() would also take "1_0", "1e3", " 5", "inf" and "nan".
_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")


class BadRequest(ValueError):
    """A parameter that cannot be used; the message says which and why (sent as the 400 body)."""


@dataclass(frozen=True)
class LockQuery:
    namespace: str
    name: str
    uid: str
    wait: float


def _number(query: Mapping[str, str], key: str, *, low: float, high: float) -> float | None:
    text = query.get(key)
    if text is None or text == "":
        return None
    if not _SECONDS.fullmatch(text):
        raise BadRequest(f"{key}: expected a number of seconds such as 30 or 2.5 (got {text!r})")
    value = float(text)
    if not math.isfinite(value) or not low <= value <= high:
        raise BadRequest(f"{key}: must be between {low:g} and {high:g} seconds (got {text!r})")
    return value


def pod_identity(query: Mapping[str, str]) -> tuple[str, str]:
    namespace, name = query.get("namespace", ""), query.get("name", "")
    if not namespace:
        raise BadRequest("namespace: required")
    if not is_dns1123_label(namespace):
        raise BadRequest(f"namespace: not a valid Kubernetes namespace name (got {namespace!r})")
    if not name:
        raise BadRequest("name: required")
    if not is_dns1123_subdomain(name):
        raise BadRequest(f"name: not a valid Kubernetes pod name (got {name!r})")
    return namespace, name


def pod_uid(query: Mapping[str, str]) -> str:
    """The optional `uid`, "" when absent. Checked on DELETE as on a lock request (it was taken unchecked
    there, so a uid no pod can have answered 403/404 instead of the 400 every other bad parameter gets)."""
    uid = query.get("uid", "")
    if uid and not is_uid(uid):
        raise BadRequest(f"uid: not a valid Kubernetes uid (got {uid!r})")
    return uid


def lock_query(query: Mapping[str, str], *, max_wait: float) -> LockQuery:
    namespace, name = pod_identity(query)
    uid = pod_uid(query)
    wait = _number(query, "wait", low=0.0, high=max_wait)
    return LockQuery(namespace=namespace, name=name, uid=uid, wait=wait or 0.0)


@dataclass(frozen=True)
class AnonymousDuration:
    seconds: float
    asked: float | None  # what the caller asked for, when it was more than the policy allows


def anonymous_duration(query: Mapping[str, str], *, hold_timeout: float) -> AnonymousDuration:
    """An anonymous slot never outlives the node policy's holdTimeout: a longer `duration` is cut to it."""
    duration = _number(query, "duration", low=1.0, high=86400.0)
    if duration is None:
        return AnonymousDuration(hold_timeout, None)
    if duration > hold_timeout:
        return AnonymousDuration(hold_timeout, duration)
    return AnonymousDuration(duration, None)


def status_limit(query: Mapping[str, str], *, default: int = 100) -> int:
    text = query.get("limit", "")
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        raise BadRequest(f"limit: expected a whole number of waiters to list (got {text!r})")
    return int(text)


def release_token(headers: Mapping[str, str]) -> str:
    return headers.get(RELEASE_TOKEN_HEADER, "").strip()


def status_format(query: Mapping[str, str]) -> str:
    fmt = query.get("format", "json")
    if fmt not in ("json", "text"):
        raise BadRequest(f"format: must be json or text (got {fmt!r})")
    return fmt


def query_params(raw: str) -> Mapping[str, str]:
    """The parameters of a raw query string, decoded as aiohttp decodes `request.query` (yarl's parser, on
    the same raw string), but not kept: `request.query` stays cached on the request's URL for as long as
    the request lives, and a long poll lives up to a minute (about 0.9 KiB a waiter, measured with
    tests/benchmarks/waiter_memory_bench.py)."""
    return URL.build(query_string=raw, encoded=True).query


class LockQueries:
    """`lock_query` remembered by the raw query string: a pod's init client asks again and again with the
    same string, so each distinct string is parsed and checked once. Only good queries are kept, and at
    most `size` of them (the cache starts over when full: a caller sending endless new strings costs what
    it cost without a cache, and bounded memory)."""

    def __init__(self, *, max_wait: float, size: int = 1024) -> None:
        self.max_wait = max_wait
        self.size = size
        self._known: dict[str, LockQuery] = {}

    def get(self, raw: str) -> LockQuery:
        """The checked query of the raw query string `raw`, parsed only when it is new."""
        known = self._known.get(raw)
        if known is not None:
            return known
        parsed = lock_query(query_params(raw), max_wait=self.max_wait)
        if len(self._known) >= self.size:
            self._known.clear()
        self._known[raw] = parsed
        return parsed
