"""The opt-in routes of pod admission (webhook.admission.optin), pure: which pods each route opts in (`opt_in`
in a table: the label route, the namespace route with its opt-out, the scheduler route checking the name
itself); the patch each route answers with (`review` with `route`), applied and validated against the
Kubernetes 1.35 schema: the enable label added (to a label map or as a new one), placement labels added
beside it, the scheduler replaced with a warning; evict mode's question asked for the pod as it will be
labelled; a pod matching several of the webhooks mutated once, whatever the order and the reinvocations
(hypothesis, against a model of the API server's webhook chain); any pod on any route admitted, its
patch applying; and the controller's --scheduler-names setting."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagger.options import SettingsError
from tests.admission.test_review import (
    ENABLE,
    EVICT,
    NAMES,
    POLICIES,
    SETTINGS,
    P,
    patched,
    pod,
    pod_ish,
    review_of,
    staggering,
    validate,
)
from webhook import admission
from webhook.admission import EvictAnswer, Route
from webhook.settings import parse_settings

ENABLE_KEY = f"{P}/enable"
GROUP = f"{P}/group"
STAGGERED = f"{P}/staggered"
SCHEDULERS = frozenset({"straggler", "peer-scheduler"})
REPLACED = "stagger: schedulerName straggler replaced by default-scheduler"
OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "old-7d9",
    "uid": "rs-uid-1",
    "controller": True,
}


def respond(
    obj: dict[str, Any],
    *,
    route: Route,
    policies: list[Any] = POLICIES,
    evict: EvictAnswer | None = None,
) -> dict[str, Any]:
    status, body = admission.review(
        review_of(obj),
        policies=policies,
        names=NAMES,
        settings=SETTINGS,
        route=route,
        scheduler_names=SCHEDULERS,
        evict=evict,
    )
    assert status == 200
    response = dict(body["response"])  # type: ignore[typeddict-item]
    assert response["allowed"] is True
    return response


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def inits(obj: dict[str, Any]) -> list[str]:
    return [c["name"] for c in obj["spec"].get("initContainers", [])]


# --- which pods each route opts in ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "obj", "opted", "ops"),
    [
        pytest.param("label", pod(ENABLE), True, [], id="label:enabled"),
        pytest.param("label", pod({"app": "web"}), False, [], id="label:not-labelled"),
        pytest.param("label", pod({ENABLE_KEY: "0"}), False, [], id="label:zero"),
        pytest.param(
            "namespace",
            pod({"app": "web"}),
            True,
            [{"op": "add", "path": f"/metadata/labels/{P}~1enable", "value": "1"}],
            id="namespace:labels-without-enable",
        ),
        pytest.param(
            "namespace",
            pod(None),
            True,
            [{"op": "add", "path": "/metadata/labels", "value": {ENABLE_KEY: "1"}}],
            id="namespace:no-labels",
        ),
        pytest.param("namespace", pod(ENABLE), True, [], id="namespace:labelled-already"),
        pytest.param("namespace", pod({ENABLE_KEY: "0"}), False, [], id="namespace:opted-out"),
        # Anything but "1" is the pod's own word: not overwritten.
        pytest.param("namespace", pod({ENABLE_KEY: "true"}), False, [], id="namespace:other-value"),
        pytest.param(
            "scheduler",
            pod(None, schedulerName="straggler"),
            True,
            [
                {"op": "add", "path": "/metadata/labels", "value": {ENABLE_KEY: "1"}},
                {"op": "add", "path": "/spec/schedulerName", "value": "default-scheduler"},
            ],
            id="scheduler:named",
        ),
        pytest.param(
            "scheduler",
            pod(ENABLE, schedulerName="straggler"),
            True,
            [{"op": "add", "path": "/spec/schedulerName", "value": "default-scheduler"}],
            id="scheduler:labelled-already",
        ),
        pytest.param(
            "scheduler",
            pod({ENABLE_KEY: "0"}, schedulerName="straggler"),
            False,
            [],
            id="scheduler:opted-out",
        ),
        # The path is not trusted: a pod of another scheduler, or of none, is not opted in there.
        pytest.param("scheduler", pod(None, schedulerName="other"), False, [], id="scheduler:other"),
        pytest.param(
            "scheduler", pod(ENABLE, schedulerName="other"), False, [], id="scheduler:other-labelled"
        ),
        pytest.param("scheduler", pod(None), False, [], id="scheduler:none"),
        pytest.param(
            "scheduler", pod(None, schedulerName="default-scheduler"), False, [], id="scheduler:default"
        ),
    ],
)
def test_which_pods_each_route_opts_in(
    route: Route, obj: dict[str, Any], opted: bool, ops: list[dict[str, Any]]
) -> None:
    chosen = admission.opt_in(obj, route=route, names=NAMES, scheduler_names=SCHEDULERS)
    assert (chosen is not None) == opted
    if chosen is None:
        return
    assert list(chosen.ops) == ops
    # `pod` is the pod as the patch leaves it.
    assert chosen.pod == jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    assert labels(dict(chosen.pod))[ENABLE_KEY] == "1"
    replaced = route == "scheduler" and obj["spec"]["schedulerName"] == "straggler"
    assert chosen.warnings == ((REPLACED,) if replaced else ())


def test_a_pod_without_metadata_is_an_internal_error_on_the_namespace_route() -> None:
    obj = pod(None)
    del obj["metadata"]
    response = respond(obj, route="namespace")
    assert response["warnings"] == [admission.INTERNAL_ERROR_WARNING] and "patch" not in response


# --- the patch each route answers with ------------------------------------------------------------------


ALL_ENABLED = staggering("all-enabled", labels={ENABLE_KEY: "1"}, grouping=None)


@pytest.mark.parametrize(
    ("route", "obj", "policies", "want_labels", "want_inits", "scheduler", "warnings"),
    [
        pytest.param(
            "namespace",
            pod({"staggerimages": "1"}),
            POLICIES,
            {ENABLE_KEY: "1", "staggerimages": "1", GROUP: ..., STAGGERED: "1"},
            ["stagger-wait"],
            None,
            [],
            id="namespace:in-a-policy",
        ),
        pytest.param(
            "namespace",
            pod(None),
            [ALL_ENABLED],
            # A policy selecting the enable label matches a pod that had none; its labels join the map.
            {ENABLE_KEY: "1", GROUP: ..., STAGGERED: "1"},
            ["stagger-wait"],
            None,
            [],
            id="namespace:no-labels-policy-on-enable",
        ),
        pytest.param(
            "namespace",
            pod(None),
            POLICIES,
            {ENABLE_KEY: "1"},
            ["stagger-wait"],
            None,
            [],
            id="namespace:no-policy",
        ),
        pytest.param(
            "namespace",
            pod({ENABLE_KEY: "0", "staggerimages": "1"}),
            POLICIES,
            {ENABLE_KEY: "0", "staggerimages": "1"},
            [],
            None,
            [],
            id="namespace:opted-out",
        ),
        pytest.param(
            "scheduler",
            pod({"staggerimages": "1"}, schedulerName="straggler"),
            POLICIES,
            {ENABLE_KEY: "1", "staggerimages": "1", GROUP: ..., STAGGERED: "1"},
            ["stagger-wait"],
            "default-scheduler",
            [REPLACED],
            id="scheduler:in-a-policy",
        ),
        pytest.param(
            "scheduler",
            pod(None, schedulerName="peer-scheduler"),
            [ALL_ENABLED],
            {ENABLE_KEY: "1", GROUP: ..., STAGGERED: "1"},
            ["stagger-wait"],
            "default-scheduler",
            ["stagger: schedulerName peer-scheduler replaced by default-scheduler"],
            id="scheduler:no-labels-policy-on-enable",
        ),
        pytest.param(
            "scheduler",
            pod({"staggerimages": "1"}, schedulerName="other"),
            POLICIES,
            {"staggerimages": "1"},
            [],
            "other",
            [],
            id="scheduler:other-untouched",
        ),
        pytest.param(
            "label",
            pod({"staggerimages": "1"}, schedulerName="straggler"),
            POLICIES,
            {"staggerimages": "1"},
            [],
            "straggler",
            [],
            id="label:not-labelled-untouched",
        ),
    ],
)
def test_the_patch_of_each_route(
    route: Route,
    obj: dict[str, Any],
    policies: list[Any],
    want_labels: dict[str, Any],
    want_inits: list[str],
    scheduler: str | None,
    warnings: list[str],
) -> None:
    response = respond(obj, route=route, policies=policies)
    after = patched(copy.deepcopy(obj), response)
    validate(after)
    got = labels(after)
    assert set(got) == set(want_labels)
    assert all(got[key] == value for key, value in want_labels.items() if value is not ...)
    assert inits(after) == want_inits
    assert after["spec"].get("schedulerName") == scheduler
    assert response.get("warnings", []) == warnings


def test_evict_mode_asks_about_the_pod_as_it_will_be_labelled() -> None:
    obj = pod({"app": "old"})
    obj["metadata"]["ownerReferences"] = [OWNER]

    def question(route: Route, target: dict[str, Any]) -> admission.EvictQuestion | None:
        return admission.evict_question(
            review_of(target),
            policies=[EVICT],
            names=NAMES,
            settings=SETTINGS,
            route=route,
            scheduler_names=SCHEDULERS,
        )

    assert question("label", obj) is None  # not labelled: the label route does not opt it in
    asked = question("namespace", obj)
    assert asked is not None and asked.owner == "rs-uid-1"
    opted_out = copy.deepcopy(obj)
    opted_out["metadata"]["labels"][ENABLE_KEY] = "0"
    assert question("namespace", opted_out) is None
    assert question("scheduler", obj) is None
    assert question("scheduler", {**obj, "spec": {**obj["spec"], "schedulerName": "straggler"}}) is not None
    # Let through: labelled, the ticket annotated, no hold.
    answer = EvictAnswer(outcome="admit", reason="paced", now=1_700_000_000.0, ticket="t-1")
    after = patched(copy.deepcopy(obj), respond(obj, route="namespace", policies=[EVICT], evict=answer))
    validate(after)
    assert labels(after)[ENABLE_KEY] == "1" and STAGGERED not in labels(after)
    assert after["metadata"]["annotations"][NAMES.ticket_annotation] == "t-1"


# --- mutated once, whichever webhooks match ----------------------------------------------------------


Matches = Callable[[dict[str, Any]], bool]


def api_server_chain(obj: dict[str, Any], *, namespace_opted: bool) -> tuple[dict[str, Any], int]:
    """The webhooks as the chart registers them, called as the API server does (in order, each when its
    selection matches the object as it is then; those called before a later change called once more:
    reinvocationPolicy IfNeeded). The object as stored, and the number of calls."""
    hooks: list[tuple[Route, Matches]] = [
        ("label", lambda o: labels(o).get(ENABLE_KEY) == "1"),
        ("namespace", lambda o: namespace_opted),
        ("scheduler", lambda o: o["spec"].get("schedulerName") in SCHEDULERS),
    ]
    calls = 0
    invoked: set[Route] = set()
    reinvoke: set[Route] = set()
    for round_ in (0, 1):
        for route, matches in hooks:
            if (round_ == 1 and route not in reinvoke) or not matches(obj):
                continue
            calls += 1
            after = patched(copy.deepcopy(obj), respond(obj, route=route))
            if after != obj and round_ == 0:
                reinvoke |= invoked
                invoked = set()
            obj = after
            if round_ == 0:
                invoked.add(route)
    return obj, calls


enable_values = st.sampled_from([None, "1", "0", "true"])
schedulers = st.sampled_from([None, "default-scheduler", "straggler", "peer-scheduler", "other"])


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    enable=enable_values,
    scheduler=schedulers,
    namespace_opted=st.booleans(),
    app=st.sampled_from([None, "web", "batch"]),
    images=st.booleans(),
    own_init=st.booleans(),
)
def test_a_pod_is_mutated_once_whichever_webhooks_match(
    enable: str | None,
    scheduler: str | None,
    namespace_opted: bool,
    app: str | None,
    images: bool,
    own_init: bool,
) -> None:
    own_labels = {
        **({ENABLE_KEY: enable} if enable is not None else {}),
        **({"app": app} if app else {}),
        **({"staggerimages": "1"} if images else {}),
    }
    spec: dict[str, Any] = {}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if own_init:
        spec["initContainers"] = [{"name": "setup", "image": "busybox"}]
    obj = pod(own_labels or None, **spec)
    stored, _ = api_server_chain(copy.deepcopy(obj), namespace_opted=namespace_opted)
    validate(stored)
    opted = enable == "1" or (enable is None and (namespace_opted or scheduler in SCHEDULERS))
    assert inits(stored).count("stagger-wait") == (1 if opted else 0)
    assert ("setup" in inits(stored)) == own_init
    assert labels(stored).get(ENABLE_KEY) == ("1" if opted else enable)
    if enable in (None, "1") and scheduler in SCHEDULERS:
        assert stored["spec"]["schedulerName"] == "default-scheduler"
    else:
        assert stored["spec"].get("schedulerName") == scheduler
    if not opted:
        assert stored == obj
    # Created again as stored (a reinvocation of everything): nothing more to do.
    again, _ = api_server_chain(copy.deepcopy(stored), namespace_opted=namespace_opted)
    assert again == stored


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(pod_ish, st.sampled_from(["namespace", "scheduler"]), st.sampled_from([None, "straggler", 5]))
def test_any_pod_is_admitted_on_any_route_and_its_patch_applies(
    obj: dict[str, Any], route: Route, scheduler: object
) -> None:
    if scheduler is not None and isinstance(obj.get("spec"), dict):
        obj["spec"]["schedulerName"] = scheduler
    response = respond(obj, route=route)
    patched(copy.deepcopy(obj), response)


# --- the setting ------------------------------------------------------------------------------------------


BASE = ["--insecure-http", "--image", "stagger:test"]


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param([], {}, (), id="default-none"),
        pytest.param(["--scheduler-names", "straggler"], {}, ("straggler",), id="flag"),
        pytest.param(
            [], {"STAGGER_SCHEDULER_NAMES": "a.example, b,,a.example"}, ("a.example", "b"), id="env-list"
        ),
        pytest.param(
            ["--scheduler-names", "flag"], {"STAGGER_SCHEDULER_NAMES": "env"}, ("flag",), id="flag-wins"
        ),
    ],
)
def test_scheduler_names_setting(argv: list[str], environ: dict[str, str], expected: tuple[str, ...]) -> None:
    assert parse_settings([*BASE, *argv], environ).inject.scheduler_names == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("default-scheduler", "must not name default-scheduler", id="default"),
        pytest.param("straggler,Bad_Name", "lowercase", id="not-a-name"),
    ],
)
def test_bad_scheduler_names_are_refused(text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as refused:
        parse_settings([*BASE, "--scheduler-names", text], {})
    assert str(refused.value).startswith("--scheduler-names: ")
