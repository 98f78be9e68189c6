"""Durations as written in the policy file ("90s", "10m", "1h30m", "500ms") and back.

Arithmetic is done in `Decimal` on the shortest decimal spelling of each number, so that
`parse_duration(format_duration(x)) == x` holds exactly and "0.1s" is not 0.1000000000000000055 s.

A bound that may have no end (a staggering policy's `maxBlockedDuration`) also takes "never", read as
`math.inf` (a float, so the smallest of several bounds is still `min`) and written back as "never":
`parse_duration_or_never` and `format_duration_or_never`.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal

__all__ = [
    "DURATION_PATTERN",
    "NEVER",
    "ZERO_DURATION_PATTERN",
    "DurationError",
    "format_duration",
    "format_duration_or_never",
    "parse_duration",
    "parse_duration_or_never",
]

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
NEVER = "never"
"""The spelling of a bound without end, exactly (values keep their case, as the policy file's enums do)."""
_NOT_A_DURATION_OR_NEVER = f"{_NOT_A_DURATION}, or {NEVER}"


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


def parse_duration_or_never(value: object, *, path: str) -> float:
    """`parse_duration`, or math.inf for "never". Anything else that is not a duration says "never" is
    allowed too; the other refusals (negative, too large) are `parse_duration`'s."""
    if isinstance(value, str) and value == NEVER:
        return math.inf
    spelt = isinstance(value, str) and _WHOLE.fullmatch(value) is not None
    if isinstance(value, bool) or not (spelt or isinstance(value, int | float)):
        raise _fail(path, _NOT_A_DURATION_OR_NEVER, value)
    return parse_duration(value, path=path)


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


def format_duration_or_never(seconds: float) -> str:
    """`format_duration`, or "never" for math.inf (/status too: a JSON number cannot be infinite)."""
    return NEVER if seconds == math.inf else format_duration(seconds)
