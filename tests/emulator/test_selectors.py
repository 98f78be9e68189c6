"""Label selector strings (every operator, errors, invariants with hypothesis), metav1.LabelSelector
objects, field selectors, and both applied by the server to lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from sim.emulator.selectors import (
    SelectorError,
    field_values,
    parse_field_selector,
    parse_label_selector,
    selector_from_object,
)
from tests.emulator.conftest import Core, Http, pod

LABELS = {"app": "web", "tier": "front", "version": "3"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        pytest.param("", True, id="empty-selects-all"),
        pytest.param("app=web", True, id="equals"),
        pytest.param("app==web", True, id="double-equals"),
        pytest.param("app=db", False, id="equals-miss"),
        pytest.param("app!=db", True, id="not-equals"),
        pytest.param("app!=web", False, id="not-equals-miss"),
        pytest.param("missing!=x", True, id="not-equals-matches-absent-key"),
        pytest.param("app in (db, web)", True, id="in"),
        pytest.param("app in (db,cache)", False, id="in-miss"),
        pytest.param("app notin (db,cache)", True, id="notin"),
        pytest.param("app notin (web)", False, id="notin-miss"),
        pytest.param("missing notin (x)", True, id="notin-matches-absent-key"),
        pytest.param("tier", True, id="exists"),
        pytest.param("missing", False, id="exists-miss"),
        pytest.param("!missing", True, id="does-not-exist"),
        pytest.param("!tier", False, id="does-not-exist-miss"),
        pytest.param("version>2", True, id="greater-than"),
        pytest.param("version<3", False, id="less-than"),
        pytest.param("app=web,tier=front,!missing", True, id="and"),
        pytest.param("app=web, tier=back", False, id="and-miss"),
        pytest.param(" app = web ", True, id="spaces"),
        pytest.param("empty=", False, id="empty-value-absent"),
    ],
)
def test_label_selector_operators(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


def test_empty_value_selects_empty_label() -> None:
    assert parse_label_selector("k=").matches({"k": ""})
    assert not parse_label_selector("k=").matches({"k": "v"})


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param("app in ()", id="empty-set"),
        pytest.param("app in (a", id="unclosed"),
        pytest.param("app=web,", id="trailing-comma"),
        pytest.param("app ~ web", id="unknown-operator"),
        pytest.param("Bad Key=x", id="bad-key"),
        pytest.param("app=bad value!", id="bad-value"),
        pytest.param("v>x", id="non-integer-bound"),
        pytest.param("=x", id="missing-key"),
    ],
)
def test_invalid_label_selectors(selector: str) -> None:
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_label_selector(selector)


keys = st.sampled_from(["a", "b", "example.com/c"])
values = st.sampled_from(["", "x", "y", "1"])
label_maps = st.dictionaries(keys, values, max_size=3)


@given(labels=label_maps, key=keys, value=values.filter(bool), other=values.filter(bool))
def test_negated_operators_are_complements(labels: dict[str, str], key: str, value: str, other: str) -> None:
    def sel(text: str) -> bool:
        return parse_label_selector(text).matches(labels)

    assert sel(f"{key}={value}") != sel(f"{key}!={value}")
    assert sel(f"{key} in ({value},{other})") != sel(f"{key} notin ({value},{other})")
    assert sel(key) != sel(f"!{key}")
    assert sel(f"{key} in ({value},{other})") == (labels.get(key) in {value, other})


def test_label_selector_objects() -> None:
    selector = selector_from_object(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        },
        nil_selects=False,
    )
    assert selector.matches(LABELS)
    assert not selector.matches({**LABELS, "legacy": "1"})
    assert selector_from_object(None, nil_selects=False).matches(LABELS) is False
    assert selector_from_object(None, nil_selects=True).matches(LABELS) is True
    assert selector_from_object({}, nil_selects=False).matches({}) is True
    with pytest.raises(SelectorError):
        selector_from_object(
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, nil_selects=True
        )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("spec.nodeName=n1", True, id="equals"),
        pytest.param("spec.nodeName==n1", True, id="double-equals"),
        pytest.param("spec.nodeName!=n1", False, id="not-equals"),
        pytest.param("status.phase=Running,metadata.name=p", True, id="and"),
        pytest.param("spec.nodeName=", False, id="unscheduled"),
    ],
)
def test_field_selectors(text: str, expected: bool) -> None:
    obj = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    labels = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")
    selector = parse_field_selector(text, supported=labels)
    assert selector.matches(field_values(obj, labels)) is expected


def test_field_selector_escapes_and_unsupported_fields() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b", supported=("metadata.name",))
    assert selector.matches({"metadata.name": "a,b"})
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.foo"):
        parse_field_selector("spec.foo=x", supported=("metadata.name",))


def test_server_applies_label_selectors(core: Core) -> None:
    for name, labels in (("a", {"app": "web", "tier": "front"}), ("b", {"app": "db"}), ("c", {"app": "web"})):
        core.create_namespaced_pod("default", pod(name, labels=labels))

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("default", label_selector=selector).items]

    assert names("app=web") == ["a", "c"]
    assert names("app==web,tier") == ["a"]
    assert names("app!=web") == ["b"]
    assert names("app in (db,cache)") == ["b"]
    assert names("app notin (db)") == ["a", "c"]
    assert names("!tier") == ["b", "c"]
    assert [p.metadata.name for p in core.list_pod_for_all_namespaces(label_selector="app=web").items] == [
        "a",
        "c",
    ]


def test_server_applies_field_selectors(core: Core, http: Http) -> None:
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_pod("default", pod("a"))
    core.create_namespaced_pod("other", pod("b"))
    core.create_namespaced_pod_binding(
        "a", "default", {"metadata": {"name": "a"}, "target": {"name": "n1"}}, _preload_content=False
    )

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=selector).items]

    assert names("spec.nodeName=n1") == ["a"]
    assert names("spec.nodeName=") == ["b"]
    assert names("metadata.namespace!=default") == ["b"]
    assert names("metadata.name==b") == ["b"]
    assert names("status.phase=Pending") == ["a", "b"]
    response = http.get("/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert response.status_code == 400
    assert response.json()["message"] == "field label not supported: spec.foo"
    assert http.get("/api/v1/pods?labelSelector=a%20in%20()").status_code == 400


def test_event_field_selectors_find_events_of_an_object(core: Core) -> None:
    for name, target in (("e1", "p"), ("e2", "q")):
        core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": name},
                "involvedObject": {
                    "kind": "Pod",
                    "name": target,
                    "namespace": "default",
                    "uid": f"uid-{target}",
                },
                "reason": "Started",
                "message": "m",
            },
        )
    found = core.list_namespaced_event(
        "default",
        field_selector="involvedObject.name=p,involvedObject.namespace=default,involvedObject.uid=uid-p",
    )
    assert [e.metadata.name for e in found.items] == ["e1"]
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_event("default", field_selector="involvedObject.color=red")
    assert caught.value.status == 400
