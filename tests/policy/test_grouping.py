"""Grouping keys: JSONPath expressions (with the `.spec` shorthand and ext filters) applied to pods."""

from __future__ import annotations

from typing import Any

import pytest

from stagger.policy import LinearPacer, StaggeringPolicy, compile_grouping
from stagger.selectors import LabelSelector

POD: dict[str, Any] = {
    "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web", "replicas": 3}},
    "spec": {
        "containers": [
            {"name": "main", "image": "registry.example/web:1.2"},
            {"name": "sidecar", "image": "registry.example/proxy:3"},
        ],
        "nodeName": "node-a",
    },
}


def grouped_by(expression: str | None) -> StaggeringPolicy:
    return StaggeringPolicy(
        name="p",
        label_selector=LabelSelector(),
        pacer=LinearPacer(step=1, max_stagger=1),
        grouping_expression=expression,
    )


@pytest.mark.parametrize(
    ("expression", "key"),
    [
        pytest.param(".spec.containers[0].image", "registry.example/web:1.2", id="dot-shorthand"),
        pytest.param("$.spec.containers[0].image", "registry.example/web:1.2", id="rooted"),
        pytest.param(
            ".spec.containers[*].image",
            "registry.example/web:1.2,registry.example/proxy:3",
            id="several-values-joined",
        ),
        pytest.param(
            '.spec.containers[?(@.name == "sidecar")].image', "registry.example/proxy:3", id="ext-filter"
        ),
        pytest.param(".metadata.labels.replicas", "3", id="non-string-value"),
        pytest.param(".metadata.labels", '{"app":"web","replicas":3}', id="object-value"),
        pytest.param(".spec.volumes[0].name", "", id="nothing-found"),
        pytest.param(None, "", id="no-expression"),
    ],
)
def test_grouping_key(expression: str | None, key: str) -> None:
    assert grouped_by(expression).grouping_key(POD) == key


def test_grouping_compiled_on_construction_and_ignored_in_equality() -> None:
    policy = grouped_by(".spec.nodeName")
    assert policy.grouping is not None
    assert policy == grouped_by(".spec.nodeName")
    assert policy != grouped_by(".spec.containers[0].image")


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(".spec[", id="unclosed"),
        pytest.param("$.a#", id="bad-character"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_expression_is_a_value_error(expression: str) -> None:
    with pytest.raises(ValueError, match="not a valid JSONPath expression"):
        compile_grouping(expression)
    with pytest.raises(ValueError, match="not a valid JSONPath expression"):
        grouped_by(expression)
