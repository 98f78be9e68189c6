"""Label selectors: every operator matching and not matching, the API query string, and validation errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger.selectors import (
    LabelSelector,
    Requirement,
    label_key_problem,
    label_value_problem,
    parse_label_selector,
)

LABELS = {"app": "web", "tier": "front", "example.com/team": "a"}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        pytest.param(Requirement("app", "In", ("web", "api")), True, id="in-match"),
        pytest.param(Requirement("app", "In", ("api",)), False, id="in-other-value"),
        pytest.param(Requirement("missing", "In", ("web",)), False, id="in-absent-key"),
        pytest.param(Requirement("app", "NotIn", ("api",)), True, id="notin-other-value"),
        pytest.param(Requirement("app", "NotIn", ("web",)), False, id="notin-listed-value"),
        pytest.param(Requirement("missing", "NotIn", ("web",)), True, id="notin-absent-key"),
        pytest.param(Requirement("example.com/team", "Exists"), True, id="exists-present"),
        pytest.param(Requirement("missing", "Exists"), False, id="exists-absent"),
        pytest.param(Requirement("missing", "DoesNotExist"), True, id="doesnotexist-absent"),
        pytest.param(Requirement("tier", "DoesNotExist"), False, id="doesnotexist-present"),
    ],
)
def test_requirement_matches(requirement: Requirement, expected: bool) -> None:
    assert requirement.matches(LABELS) is expected
    assert LabelSelector((requirement,)).matches(LABELS) is expected


def test_all_requirements_must_match() -> None:
    selector = LabelSelector((Requirement("app", "In", ("web",)), Requirement("tier", "In", ("back",))))
    assert not selector.matches(LABELS)
    assert selector.matches({"app": "web", "tier": "back"})


@pytest.mark.parametrize(
    ("raw", "query"),
    [
        pytest.param({}, "", id="empty"),
        pytest.param({"a": "b", "c": "d"}, "a=b,c=d", id="plain-map"),
        pytest.param(
            {
                "matchLabels": {"a": "b"},
                "matchExpressions": [
                    {"key": "c", "operator": "In", "values": ["x", "y"]},
                    {"key": "c", "operator": "NotIn", "values": ["z"]},
                    {"key": "d", "operator": "Exists"},
                    {"key": "e", "operator": "DoesNotExist", "values": []},
                ],
            },
            "a=b,c in (x,y),c notin (z),d,!e",
            id="every-operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "k", "operator": "In", "values": ["only"]}]},
            "k=only",
            id="in-single-value-is-equality",
        ),
        pytest.param({"matchLabels": {}}, "", id="empty-structured"),
    ],
)
def test_to_query(raw: object, query: str) -> None:
    selector, errors = parse_label_selector(raw, path="sel")
    assert errors == []
    assert selector.to_query() == query
    assert selector.is_empty is (query == "")


def test_structured_and_plain_forms_agree() -> None:
    plain, _ = parse_label_selector({"a": "b"}, path="sel")
    structured, _ = parse_label_selector({"matchLabels": {"a": "b"}}, path="sel")
    expression, _ = parse_label_selector(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}, path="sel"
    )
    assert plain == structured == expression == LabelSelector.from_labels({"a": "b"})


def test_parsed_selector_matches_like_kubernetes() -> None:
    selector, errors = parse_label_selector(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}],
        },
        path="sel",
    )
    assert errors == []
    assert selector.matches({"app": "web", "tier": "x"})
    assert not selector.matches({"app": "web", "canary": "1"})
    assert not selector.matches({"app": "api"})


P = "nodePolicies[1].nodeSelector"


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
            f"{P}.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist (got 'Equals')",
            id="bad-operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            f"{P}.matchExpressions[0].values: must not be empty for operator In",
            id="in-without-values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
            f"{P}.matchExpressions[0].values: must not be empty for operator NotIn",
            id="notin-empty-values",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            f"{P}.matchExpressions[0].values: must be empty for operator Exists (got ['x'])",
            id="exists-with-values",
        ),
        pytest.param(
            {"matchExpressions": [{"operator": "Exists"}]},
            f"{P}.matchExpressions[0].key: is required",
            id="missing-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a"}]},
            f"{P}.matchExpressions[0].operator: is required",
            id="missing-operator",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "Exists", "value": "x"}]},
            f"{P}.matchExpressions[0].value: unknown key; expected key, operator or values",
            id="unknown-expression-key",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            f"{P}.matchExpressions[0].values: must be a list of label values (got 'x')",
            id="values-not-a-list",
        ),
        pytest.param(
            {"matchExpressions": ["a=b"]},
            f"{P}.matchExpressions[0]: must be a mapping with key, operator and values (got 'a=b')",
            id="expression-not-a-mapping",
        ),
        pytest.param(
            {"matchExpressions": {"key": "a"}},
            f"{P}.matchExpressions: must be a list of expressions (got {{'key': 'a'}})",
            id="expressions-not-a-list",
        ),
        pytest.param(
            {"matchLabels": ["a"]},
            f"{P}.matchLabels: must be a map of label keys to values (got ['a'])",
            id="match-labels-not-a-map",
        ),
        pytest.param(
            {"matchLabels": {}, "matchLabel": {"a": "b"}},
            f"{P}.matchLabel: unknown key; expected matchLabels or matchExpressions",
            id="unknown-structured-key",
        ),
        pytest.param(
            "app=web",
            f"{P}: must be a map of labels or a mapping with matchLabels and/or matchExpressions "
            "(got 'app=web')",
            id="not-a-mapping",
        ),
        pytest.param(
            {"bad key": "x"},
            f"{P}: label key name must consist of alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric (got 'bad key')",
            id="bad-key-chars",
        ),
        pytest.param(
            {"Example.com/a": "x"},
            f"{P}: label key prefix must be a lowercase DNS subdomain like 'example.com' "
            "(got 'Example.com/a')",
            id="bad-key-prefix",
        ),
        pytest.param(
            {"k" * 64: "x"},
            f"{P}: label key name must be at most 63 characters (got '{'k' * 64}')",
            id="key-too-long",
        ),
        pytest.param(
            {"example.com/": "x"},
            f"{P}: label key name must not be empty (got 'example.com/')",
            id="empty-key-name",
        ),
        pytest.param(
            {"app.kubernetes.io/name": "-web"},
            f"{P}[\"app.kubernetes.io/name\"]: label value must consist of alphanumerics, '-', '_' or "
            "'.', starting and ending with an alphanumeric (got '-web')",
            id="bad-value-chars",
        ),
        pytest.param(
            {"app": "v" * 64},
            f"{P}.app: label value must be at most 63 characters (got '{'v' * 64}')",
            id="value-too-long",
        ),
        pytest.param(
            {"staggerimages": 1},
            f"{P}.staggerimages: label value must be a string; quote it in YAML (got 1)",
            id="unquoted-number",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["ok", "not ok"]}]},
            f"{P}.matchExpressions[0].values[1]: label value must consist of alphanumerics, '-', '_' or "
            "'.', starting and ending with an alphanumeric (got 'not ok')",
            id="bad-expression-value",
        ),
    ],
)
def test_parse_label_selector_errors(raw: object, error: str) -> None:
    _, errors = parse_label_selector(raw, path=P)
    assert errors == [error]


def test_all_selector_errors_reported_at_once() -> None:
    _, errors = parse_label_selector(
        {
            "matchLabels": {"ok": "yes", "bad key": "x"},
            "matchExpressions": [
                {"key": "a", "operator": "Equals"},
                {"key": "b", "operator": "In", "values": []},
            ],
        },
        path="sel",
    )
    assert len(errors) == 3


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("app", id="simple"),
        pytest.param("app.kubernetes.io/name", id="prefixed"),
        pytest.param("A_b-c.d", id="mixed-chars"),
        pytest.param("k" * 63, id="max-length"),
    ],
)
def test_valid_label_keys(key: str) -> None:
    assert label_key_problem(key) is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("1", id="digit"),
        pytest.param("v1.2_3-rc", id="mixed"),
    ],
)
def test_valid_label_values(value: str) -> None:
    assert label_value_problem(value) is None


label_maps = st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=6)


@given(label_maps)
def test_empty_selector_matches_any_labels(labels: dict[str, str]) -> None:
    assert LabelSelector().matches(labels)


@given(label_maps, st.text(max_size=10), st.lists(st.text(max_size=10), min_size=1, max_size=3))
def test_negated_operators_are_complements(labels: dict[str, str], key: str, values: list[str]) -> None:
    in_ = Requirement(key, "In", tuple(values)).matches(labels)
    assert Requirement(key, "NotIn", tuple(values)).matches(labels) is not in_
    exists = Requirement(key, "Exists").matches(labels)
    assert Requirement(key, "DoesNotExist").matches(labels) is not exists
