"""RFC 3339 timestamps as Kubernetes writes them (UTC, `Z`), to and from epoch seconds.

One place for the format of the `granted-at` annotation: lockd writes it, and every component that
rebuilds counts after a restart reads it back.
"""

from __future__ import annotations

import datetime
from typing import Literal


def format_rfc3339(epoch: float, *, digits: Literal[0, 3, 6] = 3) -> str:
    """`2026-11-21T10:00:05.250Z` (digits=3), without the fraction for 0, microseconds for 6."""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    spec = {0: "seconds", 3: "milliseconds", 6: "microseconds"}[digits]
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def parse_rfc3339(text: str) -> float | None:
    """Epoch seconds, or None when `text` is not a timestamp (a hand-edited annotation, say)."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
