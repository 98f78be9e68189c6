"""lockd's HTTP wire formats (the contract the init client and people with curl rely on)."""

from __future__ import annotations

from typing import TypedDict


class LockGranted(TypedDict):
    granted: bool  # always True
    namespace: str
    name: str
    grantedAt: str  # RFC 3339, UTC


class LockDenied(TypedDict):
    granted: bool  # always False
    reason: str
    position: int


class Released(TypedDict):
    released: bool
    namespace: str
    name: str
    heldSeconds: float


class ErrorBody(TypedDict):
    error: str
