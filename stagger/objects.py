"""Kubernetes objects as the REST API sends them: plain JSON dicts, and their status conditions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
"""One API object (a Pod, a Node, a list...) decoded from JSON."""


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The first `status.conditions` entry of type `kind`, or None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """The condition `kind` is there with status "True"."""
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"
