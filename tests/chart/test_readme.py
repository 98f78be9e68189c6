"""The chart's README documents every value: its Values table has one row per leaf of values.yaml (a list,
an empty map or a Kubernetes type is one leaf) and no other, each with the default values.yaml has and a
description, so a new value without documentation fails here. Its RBAC table lists the same rules as
test_rbac's tables."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.chart.helm import CHART, value_leaves
from tests.chart.test_rbac import CONTROLLER_CLUSTER_RULES, CONTROLLER_ROLE_RULES, LOCKD_RULES

README = (CHART / "README.md").read_text()
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]*)` \| (.+) \|$")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def documented() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for line in section("Values").splitlines():
        match = ROW.match(line)
        if match:
            key, default, description = match.groups()
            assert key not in rows, f"{key} twice"
            rows[key] = (default, description)
        else:
            assert not line.startswith("| `"), f"a row the test cannot read: {line}"
    return rows


def test_every_value_is_in_the_table_and_nothing_else() -> None:
    values, rows = set(value_leaves()), set(documented())
    assert not values - rows, f"values without a row in charts/stagger/README.md: {sorted(values - rows)}"
    assert not rows - values, f"rows for values that do not exist: {sorted(rows - values)}"
    # In the order of values.yaml, so the table reads like the file.
    assert list(documented()) == list(value_leaves())


@pytest.mark.parametrize("key", list(value_leaves()))
def test_each_row_has_the_default_and_a_description(key: str) -> None:
    default, description = documented()[key]
    assert yaml.safe_load(default) == value_leaves()[key], f"{key}: README says {default}"
    assert len(description) >= 10 and description.endswith("."), description


def test_the_rbac_table_lists_the_rules() -> None:
    table = section("RBAC")
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][
        1:
    ]
    found = {(row[1], row[2], row[3]) for row in rows}
    cluster = LOCKD_RULES | CONTROLLER_CLUSTER_RULES
    expected = {(group or "core", resource, ", ".join(verbs)) for group, resource, verbs, _ in cluster}
    lease_verbs = "; ".join(
        ", ".join(verbs) + (" on its own Lease only" if names else "")
        for _, _, verbs, names in sorted(CONTROLLER_ROLE_RULES, key=lambda rule: len(rule[3]))
    )
    expected.add(("coordination.k8s.io", "leases", lease_verbs))
    assert found == expected
