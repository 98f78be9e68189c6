"""lockd's HTTP wire formats (the contract the init client and people with curl rely on)."""

from __future__ import annotations

from typing import NotRequired, TypedDict


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


class ErrorBody(TypedDict):
    error: str


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
