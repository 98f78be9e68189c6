"""Durations: the accepted spellings, the exact error messages, and format/parse round trips; "never"
(math.inf) where a bound may have no end, its errors, and its round trip."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger.durations import (
    DurationError,
    format_duration,
    format_duration_or_never,
    parse_duration,
    parse_duration_or_never,
)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("10m", 600.0, id="minutes"),
        pytest.param("2h", 7200.0, id="hours"),
        pytest.param("1h30m", 5400.0, id="hours-and-minutes"),
        pytest.param("1h30m15s", 5415.0, id="three-units"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1.5s", 1.5, id="fractional"),
        pytest.param("0.1s", 0.1, id="decimal-exact"),
        pytest.param("250us", 0.00025, id="microseconds"),
        pytest.param("0s", 0.0, id="zero"),
        pytest.param(30, 30.0, id="plain-int"),
        pytest.param(2.5, 2.5, id="plain-float"),
        pytest.param(0, 0.0, id="plain-zero"),
    ],
)
def test_parse_duration_accepts(value: object, seconds: float) -> None:
    assert parse_duration(value, path="x") == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "10 minutes",
            "maxWait: not a duration like 90s, 10m or 1h30m (got '10 minutes')",
            id="words",
        ),
        pytest.param("10", "maxWait: not a duration like 90s, 10m or 1h30m (got '10')", id="string-no-unit"),
        pytest.param("", "maxWait: not a duration like 90s, 10m or 1h30m (got '')", id="empty"),
        pytest.param(
            "-5s", "maxWait: not a duration like 90s, 10m or 1h30m (got '-5s')", id="negative-string"
        ),
        pytest.param("5d", "maxWait: not a duration like 90s, 10m or 1h30m (got '5d')", id="unknown-unit"),
        pytest.param("1h 30m", "maxWait: not a duration like 90s, 10m or 1h30m (got '1h 30m')", id="space"),
        pytest.param(True, "maxWait: not a duration like 90s, 10m or 1h30m (got True)", id="bool"),
        pytest.param(None, "maxWait: not a duration like 90s, 10m or 1h30m (got None)", id="null"),
        pytest.param(["1s"], "maxWait: not a duration like 90s, 10m or 1h30m (got ['1s'])", id="list"),
        pytest.param(-1, "maxWait: must not be negative (got -1)", id="negative-number"),
        pytest.param(float("inf"), "maxWait: must be a finite number of seconds (got inf)", id="infinite"),
        pytest.param(float("nan"), "maxWait: must be a finite number of seconds (got nan)", id="nan"),
        pytest.param("9" * 400 + "h", f"maxWait: is too large (got '{'9' * 400}h')", id="overflow"),
    ],
)
def test_parse_duration_rejects(value: object, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value, path="maxWait")
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(120, "2m", id="minutes"),
        pytest.param(5400, "1h30m", id="hours-and-minutes"),
        pytest.param(1.5, "1.5s", id="fractional-seconds"),
        pytest.param(90, "1m30s", id="minutes-and-seconds"),
        pytest.param(3600, "1h", id="hour"),
        pytest.param(3661.25, "1h1m1.25s", id="all-units"),
        pytest.param(0.25, "250ms", id="sub-second"),
        pytest.param(0, "0s", id="zero"),
        pytest.param(-90, "-1m30s", id="negative"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_duration_rejects_non_finite() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        format_duration(float("inf"))


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False))
def test_format_then_parse_is_identity(seconds: float) -> None:
    assert parse_duration(format_duration(seconds), path="x") == seconds


@given(
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59999),
)
def test_components_add_up(hours: int, minutes: int, millis: int) -> None:
    text = f"{hours}h{minutes}m{millis}ms"
    # Fraction: the exact sum, rounded once, which is what a correct parser must return.
    assert parse_duration(text, path="x") == float(hours * 3600 + minutes * 60 + Fraction(millis, 1000))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param("never", math.inf, id="never"),
        pytest.param("1h30m", 5400.0, id="a-duration-still"),
        pytest.param(30, 30.0, id="a-number-still"),
    ],
)
def test_parse_duration_or_never_accepts(value: object, seconds: float) -> None:
    assert parse_duration_or_never(value, path="x") == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "Never",
            "maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got 'Never')",
            id="case",
        ),
        pytest.param(
            "forever",
            "maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got 'forever')",
            id="another-word",
        ),
        pytest.param(
            " never",
            "maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got ' never')",
            id="space",
        ),
        pytest.param(
            True, "maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got True)", id="bool"
        ),
        pytest.param(
            ["never"],
            "maxBlockedDuration: not a duration like 90s, 10m or 1h30m, or never (got ['never'])",
            id="list",
        ),
        pytest.param(
            float("inf"),
            "maxBlockedDuration: must be a finite number of seconds (got inf)",
            id="infinite-number",
        ),
        pytest.param(-1, "maxBlockedDuration: must not be negative (got -1)", id="negative"),
        pytest.param(
            "9" * 400 + "h", f"maxBlockedDuration: is too large (got '{'9' * 400}h')", id="overflow"
        ),
    ],
)
def test_parse_duration_or_never_rejects(value: object, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration_or_never(value, path="maxBlockedDuration")
    assert str(caught.value) == message


def test_never_is_only_for_bounds_that_may_have_no_end() -> None:
    with pytest.raises(DurationError, match=r"^startTimeout: not a duration like 90s, 10m or 1h30m \(got"):
        parse_duration("never", path="startTimeout")
    assert format_duration_or_never(math.inf) == "never"
    assert format_duration_or_never(90) == "1m30s"


@given(st.floats(min_value=0, max_value=1e12, allow_nan=False) | st.just(math.inf))
def test_format_then_parse_is_identity_with_never(seconds: float) -> None:
    assert parse_duration_or_never(format_duration_or_never(seconds), path="x") == seconds
