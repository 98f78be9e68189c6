"""Evict mode at admission (webhook.admission), pure: which pods may be held (`evict_ineligible`), the
question asked of the leader (`evict_question`), and the patch for each answer — let through (ticket,
granted-at), held by nodeSelector, held by idle stubs (every container replaced, resources and ports
kept), or paced in lock mode — each patched pod validated against the Kubernetes 1.35 schema. And Jobs
(`job_mutation`, `review_job`): the DisruptionTarget Ignore rule added, or the Job left alone with a
warning (restartPolicy OnFailure, a conflicting rule of its own, no room for a rule)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from stagger.timestamps import parse_rfc3339
from tests.admission.test_review import (
    ENABLE,
    EVICT,
    NAMES,
    SETTINGS,
    P,
    patched,
    pod,
    review_of,
    staggering,
    validate,
)
from webhook import admission
from webhook.admission import EvictAnswer

NOW = 1_700_000_000.0
STUB = replace(staggering("stubbed", labels={"app": "gang"}, mode="evict", grouping=None), hold="stub")
POLICIES = [EVICT, STUB]
OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "old-7d9",
    "uid": "rs-uid-1",
    "controller": True,
}


def owned(labels: dict[str, str], *, owner: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj = pod({**ENABLE, **labels}, **spec)
    obj["metadata"]["ownerReferences"] = [owner or OWNER]
    return obj


def respond(obj: dict[str, Any], answer: EvictAnswer | None, **request: Any) -> dict[str, Any]:
    status, body = admission.review(
        review_of(obj, **request), policies=POLICIES, names=NAMES, settings=SETTINGS, evict=answer
    )
    assert status == 200
    response = dict(body["response"])  # type: ignore[typeddict-item]
    assert response["allowed"] is True
    return response


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


# --- who may be held ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "annotated", "why"),
    [
        pytest.param(None, {}, "a bare pod", id="bare-pod"),
        pytest.param({"kind": "DaemonSet", "uid": "d", "controller": True}, {}, "DaemonSet", id="daemonset"),
        pytest.param(
            {"kind": "Node", "uid": "n", "controller": True}, {}, "static pod", id="static-by-owner"
        ),
        pytest.param(OWNER, {"kubernetes.io/config.mirror": "x"}, "static pod", id="mirror-pod"),
        pytest.param(
            {"kind": "Job", "uid": "j", "controller": True}, {}, "count an eviction", id="job-no-rule"
        ),
        pytest.param(
            {"kind": "ReplicaSet", "uid": "r", "controller": False}, {}, "a bare pod", id="not-controller"
        ),
        pytest.param(OWNER, {}, None, id="replicaset"),
        pytest.param({"kind": "StatefulSet", "uid": "s", "controller": True}, {}, None, id="statefulset"),
        pytest.param(
            {"kind": "Job", "uid": "j", "controller": True}, {f"{P}/evictable": "1"}, None, id="job-ok"
        ),
    ],
)
def test_who_may_be_held(owner: dict[str, Any] | None, annotated: dict[str, str], why: str | None) -> None:
    obj = pod({**ENABLE, "app": "old"})
    if owner is not None:
        obj["metadata"]["ownerReferences"] = [owner]
    obj["metadata"]["annotations"] = annotated
    reason = admission.evict_ineligible(obj, names=NAMES)
    assert (reason is None) == (why is None)
    if why is not None:
        assert reason is not None and why in reason
        # Asked nothing; paced in lock mode with the reason as a warning, even with an answer to hold.
        assert (
            admission.evict_question(review_of(obj), policies=POLICIES, names=NAMES, settings=SETTINGS)
            is None
        )
        response = respond(obj, EvictAnswer(outcome="hold", reason="no room", now=NOW))
        assert any(why in warning and "lock mode" in warning for warning in response["warnings"])
        after = patched(obj, response)
        assert labels(after)[f"{P}/staggered"] == "1"
        assert "nodeSelector" not in after["spec"] and f"{P}/hold" not in annotations(after)


# --- the question --------------------------------------------------------------------------------------------


def test_the_question_names_the_groups_the_owner_and_dry_run() -> None:
    obj = owned({"app": "old"})
    question = admission.evict_question(
        review_of(obj, dryRun=True), policies=POLICIES, names=NAMES, settings=SETTINGS
    )
    assert question == admission.EvictQuestion(
        pacer_groups=(("evicting", ""),), bypassed_groups=(), owner="rs-uid-1", dry_run=True
    )


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(owned({"app": "web"}), id="not-in-an-evict-policy"),
        pytest.param(pod({"app": "old"}), id="not-enabled"),
        pytest.param({"not": "a pod"}, id="not-a-pod"),
        pytest.param(
            owned({"app": "old"}, initContainers=[{"name": "stagger-wait", "image": "x"}]), id="reinvoked"
        ),
    ],
)
def test_no_question(obj: dict[str, Any]) -> None:
    assert admission.evict_question(review_of(obj), policies=POLICIES, names=NAMES, settings=SETTINGS) is None


def test_no_question_for_garbage() -> None:
    assert admission.evict_question("nope", policies=POLICIES, names=NAMES, settings=SETTINGS) is None
    assert admission.evict_question({"request": 1}, policies=POLICIES, names=NAMES, settings=SETTINGS) is None


# --- the answers ---------------------------------------------------------------------------------------------


def test_let_through_with_its_ticket() -> None:
    obj = owned({"app": "old"})
    answer = EvictAnswer(outcome="admit", reason="reserved", now=NOW, ticket="abc123", held_since=NOW - 42)
    after = patched(obj, respond(obj, answer))
    validate(after)
    assert f"{P}/staggered" not in labels(after)
    assert labels(after)[f"{P}/group"].startswith("g")
    notes = annotations(after)
    assert notes[f"{P}/ticket"] == "abc123"
    assert parse_rfc3339(notes[f"{P}/granted-at"]) == pytest.approx(NOW)
    assert parse_rfc3339(notes[f"{P}/held-since"]) == pytest.approx(NOW - 42)
    assert [c["name"] for c in after["spec"]["initContainers"]] == [
        "stagger-wait"
    ]  # node pacing still applies
    assert "nodeSelector" not in after["spec"]


def test_held_by_node_selector() -> None:
    obj = owned({"app": "old"}, nodeSelector={"disk": "ssd"})
    after = patched(obj, respond(obj, EvictAnswer(outcome="hold", reason="no room", now=NOW)))
    validate(after)
    assert labels(after)[f"{P}/staggered"] == "1"
    assert after["spec"]["nodeSelector"] == {"disk": "ssd", f"{P}/hold": "true"}
    notes = annotations(after)
    assert notes[f"{P}/hold"] == "nodeSelector"
    assert parse_rfc3339(notes[f"{P}/held-since"]) == pytest.approx(NOW)
    assert f"{P}/ticket" not in notes


def test_held_again_keeps_the_chain_s_first_hold() -> None:
    obj = owned({"app": "old"})
    answer = EvictAnswer(outcome="hold", reason="leader unreachable", now=NOW, held_since=NOW - 300)
    after = patched(obj, respond(obj, answer))
    assert parse_rfc3339(annotations(after)[f"{P}/held-since"]) == pytest.approx(NOW - 300)


def test_held_by_stubs_keeps_resources_and_ports_and_nothing_else() -> None:
    app = {
        "name": "app",
        "image": "registry.example/app:1",
        "command": ["/app"],
        "env": [{"name": "SECRET", "value": "x"}],
        "ports": [{"containerPort": 8080, "name": "http"}],
        "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
    }
    sidecar = {
        "name": "proxy",
        "image": "envoy",
        "restartPolicy": "Always",
        "resources": {"requests": {"cpu": "100m"}},
    }
    setup = {
        "name": "migrate",
        "image": "registry.example/migrate:1",
        "resources": {"requests": {"cpu": "1"}},
    }
    obj = owned(
        {"app": "gang"},
        initContainers=[setup, sidecar],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    obj["spec"]["containers"] = [app]
    before = copy.deepcopy(obj)
    after = patched(obj, respond(obj, EvictAnswer(outcome="hold", reason="no room", now=NOW)))
    validate(after)
    assert obj == before  # the input is not changed
    inits = after["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["stagger-hold", "migrate", "proxy"]
    assert inits[0]["command"] == ["python", "-m", "webhook.idle"] and inits[0]["image"] == SETTINGS.image
    assert inits[1]["resources"] == setup["resources"] and inits[1]["image"] == SETTINGS.image
    assert inits[2]["restartPolicy"] == "Always"
    (stub,) = after["spec"]["containers"]
    assert stub["name"] == "app" and stub["image"] == SETTINGS.image
    assert stub["command"] == ["python", "-m", "webhook.idle"]
    assert stub["resources"] == app["resources"] and stub["ports"] == app["ports"]
    for gone in ("env", "volumeMounts", "readinessProbe"):
        assert gone not in stub
    assert stub["securityContext"]["runAsNonRoot"] is True
    assert after["spec"]["volumes"] == obj["spec"]["volumes"]
    assert annotations(after)[f"{P}/hold"] == "stub"
    assert "nodeSelector" not in after["spec"]
    # Admission reinvoked on the stubbed pod: nothing more.
    assert respond(after, EvictAnswer(outcome="hold", reason="again", now=NOW)) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(None, id="nobody-asked"),
        pytest.param(EvictAnswer(outcome="lock", reason="no API server", now=NOW), id="no-group-pacing"),
    ],
)
def test_no_answer_paces_in_lock_mode(answer: EvictAnswer | None) -> None:
    obj = owned({"app": "old"})
    response = respond(obj, answer)
    assert any("lock mode" in warning for warning in response["warnings"])
    after = patched(obj, response)
    validate(after)
    assert labels(after)[f"{P}/staggered"] == "1"
    assert "nodeSelector" not in after["spec"]


# --- Jobs ----------------------------------------------------------------------------------------------------


def job(
    *,
    restart: str = "Never",
    failure_policy: dict[str, Any] | None = None,
    template_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "completions": 30,
        "parallelism": 10,
        "template": {
            "metadata": {
                "labels": template_labels if template_labels is not None else {**ENABLE, "app": "old"}
            },
            "spec": {"restartPolicy": restart, "containers": [{"name": "work", "image": "busybox"}]},
        },
    }
    if failure_policy is not None:
        spec["podFailurePolicy"] = failure_policy
    # As the API server defaults it before admission (batch/v1 SetDefaults_Job).
    spec["podReplacementPolicy"] = "TerminatingOrFailed" if failure_policy is None else "Failed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crunch", "namespace": "shop", "labels": dict(ENABLE)},
        "spec": spec,
    }


def job_review(obj: dict[str, Any]) -> dict[str, Any]:
    status, body = admission.review_job(
        review_of(
            obj,
            kind={"group": "batch", "version": "v1", "kind": "Job"},
            resource={"group": "batch", "version": "v1", "resource": "jobs"},
        ),
        policies=POLICIES,
        names=NAMES,
    )
    assert status == 200
    return dict(body["response"])  # type: ignore[typeddict-item]


IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
EXIT_RULE = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}


@pytest.mark.parametrize(
    ("failure_policy", "rules"),
    [
        pytest.param(None, [IGNORE], id="no-policy"),
        pytest.param({"rules": [EXIT_RULE]}, [IGNORE, EXIT_RULE], id="rule-goes-first"),
        pytest.param({"rules": [IGNORE]}, [IGNORE], id="already-there"),
        pytest.param(
            {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
                ]
            },
            [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}],
            id="already-there-with-status",
        ),
    ],
)
def test_a_job_gets_the_ignore_rule(failure_policy: dict[str, Any] | None, rules: list[Any]) -> None:
    obj = job(failure_policy=failure_policy)
    response = job_review(obj)
    assert "warnings" not in response
    after = patched(obj, response)
    validate(after)
    assert after["spec"]["podFailurePolicy"]["rules"] == rules
    assert after["spec"]["podReplacementPolicy"] == "Failed"  # the only value allowed with a podFailurePolicy
    assert after["spec"]["template"]["metadata"]["annotations"] == {f"{P}/evictable": "1"}


@pytest.mark.parametrize(
    ("obj", "warned"),
    [
        pytest.param(job(restart="OnFailure"), "restartPolicy OnFailure", id="on-failure"),
        pytest.param(
            job(
                failure_policy={
                    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
                }
            ),
            "not Ignore",
            id="conflicting-rule",
        ),
        pytest.param(job(failure_policy={"rules": [EXIT_RULE] * 20}), "20 rules", id="no-room"),
    ],
)
def test_a_job_left_alone_with_a_warning(obj: dict[str, Any], warned: str) -> None:
    response = job_review(obj)
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert warned in warning and "lock mode" in warning


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(job(template_labels={"app": "old"}), id="template-not-enabled"),
        pytest.param(job(template_labels={**ENABLE, "app": "web"}), id="not-evict-mode"),
    ],
)
def test_other_jobs_untouched(obj: dict[str, Any]) -> None:
    assert job_review(obj) == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_job_review_refuses_what_is_not_a_review() -> None:
    status, body = admission.review_job({"kind": "nope"}, policies=POLICIES, names=NAMES)
    assert status == 400 and "apiVersion" in body["error"]  # type: ignore[typeddict-item]
