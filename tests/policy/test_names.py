"""Label, annotation and scheduling-gate names under the default and a custom prefix."""

from __future__ import annotations

import pytest

from stagger.names import DEFAULT_PREFIX, Names
from stagger.selectors import label_key_problem


def test_default_names() -> None:
    names = Names()
    assert DEFAULT_PREFIX == "v1.stagger.technicianted"
    assert (
        names.enable_label,
        names.staggered_label,
        names.group_label,
        names.policies_annotation,
        names.group_key_annotation,
        names.granted_at_annotation,
        names.scheduling_gate,
    ) == (
        "v1.stagger.technicianted/enable",
        "v1.stagger.technicianted/staggered",
        "v1.stagger.technicianted/group",
        "v1.stagger.technicianted/policies",
        "v1.stagger.technicianted/group-key",
        "v1.stagger.technicianted/granted-at",
        "v1.stagger.technicianted/pacing",
    )


def test_custom_prefix_gives_valid_label_keys() -> None:
    names = Names("stagger.example.com")
    assert names.group_label == "stagger.example.com/group"
    assert label_key_problem(names.granted_at_annotation) is None


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        pytest.param("", "prefix: must not be empty (got '')", id="empty"),
        pytest.param(
            "Stagger.IO",
            "prefix: must be a lowercase DNS subdomain like 'example.com' (got 'Stagger.IO')",
            id="uppercase",
        ),
        pytest.param(
            "a/b",
            "prefix: must be a lowercase DNS subdomain like 'example.com' (got 'a/b')",
            id="slash",
        ),
    ],
)
def test_bad_prefix(prefix: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Names(prefix)
    assert str(caught.value) == message
