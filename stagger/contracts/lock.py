"""lockd's lock API on the wire (docs/contracts.md, "The lock API"): what the init client (and a person with
curl) sends to lockd and what lockd answers. lockd writes these bodies; the init client reads them with
`read_lock_reply`, which keeps only the fields of the contract's types, since the answer crosses a network."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, NotRequired, TypedDict

LOCK_PATH: Final = "/v1/lock"
RELEASE_TOKEN_HEADER: Final = "X-Stagger-Release-Token"
"""The header of a first 200 (and of `DELETE /v1/lock`) carrying the grant's release token."""


class LockParams(TypedDict):
    """The query of `GET /v1/lock`."""

    namespace: str
    name: str
    wait: str
    uid: NotRequired[str]


class LockGranted(TypedDict):
    granted: bool  # always True
    namespace: str
    name: str
    grantedAt: str  # RFC 3339, UTC
    # 128 random bits, on the first 200 of a grant only (also in the X-Stagger-Release-Token header):
    # DELETE /v1/lock needs it back. Never logged, never in /status.
    releaseToken: NotRequired[str]


class LockDenied(TypedDict):
    granted: bool  # always False
    reason: str
    position: int
    # The node policy's maxWait in seconds: the init client gives up (fail-open) after the smaller of this
    # and its own --max-wait.
    maxWait: float


class Released(TypedDict):
    released: bool
    namespace: str
    name: str
    heldSeconds: float


class QueueFullBody(TypedDict):
    granted: bool  # always False
    reason: str
    queueLimit: int
    maxWait: float  # as in LockDenied


class LeftQueueBody(TypedDict):
    released: bool  # False: it held no slot
    leftQueue: bool  # True
    namespace: str
    name: str


class LockReply(TypedDict, total=False):
    """The fields of a `/v1/lock` answer (200, 423, 429, 503, 4xx) that the init client reads."""

    granted: bool
    reason: str
    position: int
    error: str
    maxWait: float  # seconds: the node policy's maxWait (423, 429)
    releaseToken: str  # 200 of a new grant: the secret that DELETE /v1/lock needs


def read_lock_reply(data: object) -> LockReply:
    """The fields of a decoded JSON answer that have the contract's types; others are dropped."""
    reply: LockReply = {}
    if not isinstance(data, Mapping):
        return reply
    if isinstance(granted := data.get("granted"), bool):
        reply["granted"] = granted
    if isinstance(reason := data.get("reason"), str):
        reply["reason"] = reason
    if isinstance(error := data.get("error"), str):
        reply["error"] = error
    if isinstance(position := data.get("position"), int) and not isinstance(position, bool):
        reply["position"] = position
    if isinstance(token := data.get("releaseToken"), str) and token:
        reply["releaseToken"] = token
    limit = data.get("maxWait")
    if isinstance(limit, int | float) and not isinstance(limit, bool) and math.isfinite(limit) and limit >= 0:
        reply["maxWait"] = float(limit)
    return reply
