"""Durations as written in the policy file ("90s", "10m", "1h30m", "500ms") and back.

Arithmetic is done in `Decimal` on the shortest decimal spelling of each number, so that
`parse_duration(format_duration(x)) == x` holds exactly and "0.1s" is not 0.1000000000000000055 s.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal

__all__ = ["DURATION_PATTERN", "ZERO_DURATION_PATTERN", "DurationError", "format_duration", "parse_duration"]

_UNITS: dict[str, Decimal] = {
    "h": Decimal(3600),
    "m": Decimal(60),
    "s": Decimal(1),
    "ms": Decimal("0.001"),
    "us": Decimal("0.000001"),
    "µs": Decimal("0.000001"),
    "ns": Decimal("0.000000001"),
}
# Longer unit names first so "ms" is not read as "m" followed by garbage.
_COMPONENT = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|us|µs|ns|h|m|s)")  # ASCII digits only
_WHOLE = re.compile(rf"(?:{_COMPONENT.pattern})+")
DURATION_PATTERN = _WHOLE.pattern
"""A duration string, as a regular expression both Python and RE2 (Helm's JSON Schema) read."""
ZERO_DURATION_PATTERN = r"(?:(?:0+(?:\.0+)?|\.0+)(?:ms|us|µs|ns|h|m|s))+"
"""A duration string that is zero ("0s", "0m0.0s")."""
# Enough digits to hold any finite float exactly (the largest has 309 integer digits).
_EXACT = Context(prec=800)
_NOT_A_DURATION = "not a duration like 90s, 10m or 1h30m"


class DurationError(ValueError):
    """A value that is not a valid duration; the message names where it came from."""


def _fail(path: str, reason: str, value: object) -> DurationError:
    return DurationError(f"{path}: {reason} (got {value!r})")


def parse_duration(value: object, *, path: str) -> float:
    """Seconds in `value`: a Go-style duration string or a plain non-negative number of seconds."""
    if isinstance(value, bool):
        # bool is an int subclass; `maxWait: true` is a mistake, not one second.
        raise _fail(path, _NOT_A_DURATION, value)
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            # An integer past the largest float (YAML reads `holdTimeout: 999...9` as an int): math.isfinite
            # raised OverflowError on it, which is no DurationError, and a policy reload died of it.
            raise _fail(path, "is too large", value) from None
        if not math.isfinite(seconds):
            raise _fail(path, "must be a finite number of seconds", value)
        if seconds < 0:
            raise _fail(path, "must not be negative", value)
        return seconds
    if not isinstance(value, str) or not _WHOLE.fullmatch(value):
        raise _fail(path, _NOT_A_DURATION, value)
    total = Decimal(0)
    for number, unit in _COMPONENT.findall(value):
        total = _EXACT.add(total, _EXACT.multiply(Decimal(number), _UNITS[unit]))
    seconds = float(total)
    if not math.isfinite(seconds):
        raise _fail(path, "is too large", value)
    return seconds


def _plain(number: Decimal) -> str:
    text = format(number, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_duration(seconds: float) -> str:
    """The shortest readable spelling: 120 -> "2m", 5400 -> "1h30m", 1.5 -> "1.5s", 0.25 -> "250ms"."""
    if not math.isfinite(seconds):
        raise ValueError(f"cannot format a non-finite duration (got {seconds!r})")
    if seconds < 0:
        return "-" + format_duration(-seconds)
    # repr() is the shortest text that reads back as the same float; work on that exactly.
    total = Decimal(repr(float(seconds)))
    if total == 0:
        return "0s"
    if total < 1:
        return _plain(_EXACT.multiply(total, Decimal(1000))) + "ms"
    hours, rest = _EXACT.divmod(total, Decimal(3600))
    minutes, secs = _EXACT.divmod(rest, Decimal(60))
    parts = [
        _plain(amount) + unit for amount, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if amount != 0
    ]
    return "".join(parts)
