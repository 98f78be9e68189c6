"""The RFC 3339 format of `granted-at` and Events: the three precisions, and parse(format(t)) == t
to the millisecond, so a restarted lockd ages rebuilt slots from the time it wrote."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from stagger.timestamps import format_rfc3339, parse_rfc3339


@pytest.mark.parametrize(
    ("digits", "text"),
    [
        pytest.param(0, "2026-11-21T10:00:05Z", id="seconds"),
        pytest.param(3, "2026-11-21T10:00:05.250Z", id="milliseconds"),
        pytest.param(6, "2026-11-21T10:00:05.250000Z", id="microseconds"),
    ],
)
def test_formats(digits: int, text: str) -> None:
    assert format_rfc3339(1795255205.25, digits=digits) == text  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=4_000_000_000_000))
def test_round_trip_to_the_millisecond(millis: int) -> None:
    assert parse_rfc3339(format_rfc3339(millis / 1000)) == pytest.approx(millis / 1000, abs=1e-6)


@pytest.mark.parametrize("text", ["yesterday", "", "2026-13-01T00:00:00Z"])
def test_garbage_is_none(text: str) -> None:
    assert parse_rfc3339(text) is None


def test_a_time_without_zone_is_utc() -> None:
    assert parse_rfc3339("2026-11-21T10:00:05.25") == 1795255205.25
