"""metav1.MicroTime on the wire: Go decodes it with time.Parse(RFC3339Micro, s), whose fixed six-digit
fraction refuses "…:05Z" and "…:05.123Z" (k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go). A body
with such a value cannot be decoded: 400 BadRequest, "KIND in version "V" cannot be handled as a KIND:
parsing time …". The emulator walks the same layout as Go's time.Parse does and words the failure as it
does for the usual mistakes (a missing or short fraction, a bad zone, trailing text); rarer malformed
stamps get the same status and shape with a simpler explanation."""

from __future__ import annotations

import re
from typing import Any

from stagger.objects import Obj

LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
# time.Parse's steps for LAYOUT: (layout chunk, what it accepts).
_STEPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (chunk, re.compile(pattern))
    for chunk, pattern in (
        ("2006", r"\d{4}"),
        ("-", r"-"),
        ("01", r"\d{2}"),
        ("-", r"-"),
        ("02", r"\d{2}"),
        ("T", r"T"),
        ("15", r"\d{1,2}"),
        (":", r":"),
        ("04", r"\d{2}"),
        (":", r":"),
        ("05", r"\d{2}"),
        (".000000", r"\.\d{6}"),
        ("Z07:00", r"Z|[+-]\d{2}:\d{2}"),
    )
)
_RANGES = {
    "01": (1, 12, "month"),
    "02": (1, 31, "day"),
    "15": (0, 23, "hour"),
    "04": (0, 59, "minute"),
    "05": (0, 59, "second"),
}

# Where each kind keeps MicroTimes (by the request's version of the kind).
FIELDS: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("coordination.k8s.io", "Lease"): (("spec", "acquireTime"), ("spec", "renewTime")),
    ("", "Event"): (("eventTime",), ("series", "lastObservedTime")),
    ("events.k8s.io", "Event"): (("eventTime",), ("series", "lastObservedTime")),
}


def parse_problem(value: str) -> str | None:
    """Why time.Parse(RFC3339Micro, value) fails, in its words; None when it parses."""
    rest = value
    for chunk, pattern in _STEPS:
        found = pattern.match(rest)
        if found is None:
            return f'parsing time "{value}" as "{LAYOUT}": cannot parse "{rest}" as "{chunk}"'
        if chunk in _RANGES:
            low, high, what = _RANGES[chunk]
            if not low <= int(found.group()) <= high:
                return f'parsing time "{value}": {what} out of range'
        rest = rest[found.end() :]
    if rest:
        return f'parsing time "{value}": extra text: "{rest}"'
    return None


def _at(obj: Obj, path: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def decode_problem(group: str, kind: str, obj: Obj) -> str | None:
    """The first MicroTime of `obj` that would not decode (None: all fine, or none present)."""
    for path in FIELDS.get((group, kind), ()):
        value = _at(obj, path)
        if isinstance(value, str):
            problem = parse_problem(value)
            if problem:
                return problem
    return None
