"""The errors of the wire contracts: the error answer of every stagger HTTP API (lockd's lock API, the
controller's admission and group APIs), a 4xx or 5xx whose JSON body gives the reason, for a person or a
log line; and the one exception a contract's reader raises for a body that is not its shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

__all__ = ["BodyError", "ErrorBody", "read_error"]


class ErrorBody(TypedDict):
    error: str


class BodyError(ValueError):
    """A body that is not its contract's shape; the message names the field, for a 400 or a log line."""


def read_error(data: object) -> str | None:
    """The reason an error answer gives, or None when the body is not one."""
    if isinstance(data, Mapping) and isinstance(error := data.get("error"), str) and error:
        return error
    return None
