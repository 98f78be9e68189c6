"""Pure checks of the wording ported from apimachinery: qualified names, DNS names and MicroTime parsing
(the conformance tests check the same texts against a real server)."""

from __future__ import annotations

import pytest

from sim.emulator.microtime import parse_problem
from sim.emulator.names import dns1123_label_problems, qualified_name_problems

NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ("example.com/gate", []),
        ("gate_1.x", []),
        ("", ["name part must be non-empty", NAME_PART]),
        ("/x", ["prefix part must be non-empty"]),
        ("x" * 64, ["name part must be no more than 63 bytes"]),
        ("-x", [NAME_PART]),
    ],
)
def test_qualified_names(value: str, problems: list[str]) -> None:
    assert qualified_name_problems(value) == problems


def test_a_dotted_name_is_no_dns_label() -> None:
    assert dns1123_label_problems("a.b") == ["must not contain dots"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2024-01-01T00:00:00.123456Z", None),
        ("2024-01-01T00:00:00.123456+02:00", None),
        (
            "2024-01-01T00:00:00Z",
            'parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"',
        ),
        (
            "2024-01-01T00:00:00.123456789Z",
            'parsing time "2024-01-01T00:00:00.123456789Z" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse "789Z" as "Z07:00"',
        ),
        ("2024-13-01T00:00:00.000000Z", 'parsing time "2024-13-01T00:00:00.000000Z": month out of range'),
        (
            "2024-01-01T00:00:00.000000Zjunk",
            'parsing time "2024-01-01T00:00:00.000000Zjunk": extra text: "junk"',
        ),
    ],
)
def test_micro_time_parsing(value: str, problem: str | None) -> None:
    assert parse_problem(value) == problem
