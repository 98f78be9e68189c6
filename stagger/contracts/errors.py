"""The error answer of every stagger HTTP API (lockd's lock API, the controller's admission and group
APIs): a 4xx or 5xx whose JSON body gives the reason, for a person or a log line."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["ErrorBody"]


class ErrorBody(TypedDict):
    error: str
