"""Fuzzing the controller's admission endpoints (`POST /mutate/pods`, `POST /mutate/jobs`) over real HTTPS:
one controller process for the module (`python -m webhook` with trustme certificates, a token, and the API
emulator as its API server, so that evict mode asks real group counts), reused by every example.

What is sent: AdmissionReviews of pods and Jobs in lock, gate and evict policies (hold by nodeSelector and
by stub) with any part of them replaced by a value of another type or removed (request, object, metadata,
labels, spec, containers, podFailurePolicy...), wrong apiVersion or kind, no uid, truncated JSON, random
bytes, bodies over `--max-body`, and any Content-Type.

What must come back (docs/contracts.md and webhook/admission/): a body that is not an AdmissionReview
request gets a 4xx (400, or 413 over the body limit) with a JSON `{"error": reason}`; a review gets a 200
AdmissionReview that echoes its uid and allows the object; a patch, when there is one, is a JSON Patch
that applies cleanly (jsonpatch) to the object sent. The documented "admitted unchanged" warning of an
internal error is only accepted for the one malformed pod the code refuses to patch on purpose (an enabled
pod whose spec or metadata is not an object); never a 5xx, never any other internal error or traceback in
the log, and a good review is mutated as before at the end.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import requests
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st

from stagger.matching import pod_labels
from tests.fuzz.controller import RunningController, start_controller
from tests.fuzz.jsondocs import json_values
from tests.fuzz.jsondocs import places as places_in
from tests.webhook.reviews import ENABLE
from webhook.admission import INTERNAL_ERROR_WARNING
from webhook.admission import pods as admission_pods

pytestmark = pytest.mark.e2e

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
POLICIES = """\
staggeringPolicies:
- name: image-pull
  labelSelector: {matchLabels: {staggerimages: "1"}}
  groupingExpression: .spec.containers[0].image
  pacer: {exponential: {minInitial: 4, multiplier: 4, maxStagger: 16}}
- name: gated
  labelSelector: {matchLabels: {app: batch}}
  pacer: {maxConcurrent: {value: 2}}
  mode: gate
- name: evict-node
  labelSelector: {matchLabels: {app: old}}
  bypassLabelSelector: {matchLabels: {canary: "1"}}
  pacer: {maxConcurrent: {value: 1}}
  mode: evict
- name: evict-stub
  labelSelector: {matchLabels: {app: legacy}}
  pacer: {maxConcurrent: {value: 1}}
  mode: evict
  hold: stub
"""
SETTINGS = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# --- the controller -----------------------------------------------------------------------------------


@dataclass
class Hook(RunningController):
    """The running controller and an HTTPS session that trusts its certificate."""

    def post(
        self, path: str, body: bytes, *, content_type: str | None = "application/json"
    ) -> requests.Response:
        headers = {} if content_type is None else {"Content-Type": content_type}
        return self.http.post(self.process.url + path, data=body, headers=headers, timeout=10)


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hook]:
    folder = tmp_path_factory.mktemp("admission-fuzz")
    with start_controller(folder, policies=POLICIES, token="fuzz-token", max_body=MAX_BODY) as started:
        # Evict mode is decided on the leader's counts: wait until it grants.
        started.process.wait_for_line(r"granting: \d+ enabled pods")
        running = Hook(process=started.process, http=started.http)
        # One pod of each evict-mode policy takes its group's one place (reserved for 60 s), so that the
        # pods of these groups that follow are held: the hold's patch is fuzzed too.
        for warm_up in (EVICT_NODE, EVICT_STUB):
            answer = running.post("/mutate/pods", json.dumps(warm_up).encode()).json()
            assert "patch" in answer["response"], answer
        yield running


# --- what is sent --------------------------------------------------------------------------------------


def pod(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-",
            "namespace": "shop",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web",
                    "uid": "rs-1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [{"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}],
            **spec,
        },
    }


def job(labels: dict[str, str], *, restart: str = "Never", **spec: Any) -> dict[str, Any]:
    template = pod(labels, restartPolicy=restart)
    del template["metadata"]["ownerReferences"], template["apiVersion"], template["kind"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": "shop"},
        "spec": {"template": template, **spec},
    }


def review_of(obj: Any, *, kind: str = "Pod") -> dict[str, Any]:
    group, resource = ("batch", "jobs") if kind == "Job" else ("", "pods")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": obj,
            "dryRun": False,
        },
    }


EVICT_NODE = review_of(pod({ENABLE: "1", "app": "old"}, nodeSelector={"disk": "ssd"}))
EVICT_STUB = review_of(
    pod({ENABLE: "1", "app": "legacy"}, initContainers=[{"name": "setup", "image": "busybox"}])
)
POD_REVIEWS = (
    review_of(pod({ENABLE: "1"})),
    review_of(
        pod({ENABLE: "1", "staggerimages": "1"}, initContainers=[{"name": "setup", "image": "busybox"}])
    ),
    review_of(pod({ENABLE: "1", "app": "batch"}, schedulingGates=[{"name": "other"}])),
    EVICT_NODE,
    review_of(pod({ENABLE: "1", "app": "old", "canary": "1"})),
    EVICT_STUB,
    review_of(pod({"app": "web"})),
    # Twice as often: evict mode's holds build the largest patches.
    EVICT_NODE,
    EVICT_STUB,
)
JOB_REVIEWS = (
    review_of(job({ENABLE: "1", "app": "old"}), kind="Job"),
    review_of(
        job(
            {ENABLE: "1", "app": "legacy"},
            podFailurePolicy={
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
                    {"action": "Count", "onPodConditions": [{"type": "ConfigIssue"}]},
                ]
            },
        ),
        kind="Job",
    ),
    review_of(
        job(
            {ENABLE: "1", "app": "old"},
            podFailurePolicy={
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
        ),
        kind="Job",
    ),
    review_of(job({ENABLE: "1", "app": "old"}, restart="OnFailure"), kind="Job"),
)


def changed(
    review: dict[str, Any], *path: str | int, value: Any = None, remove: bool = False
) -> dict[str, Any]:
    """A copy of `review` with the member at `path` (under request.object) set to `value`, or removed."""
    copied = copy.deepcopy(review)
    target = copied["request"]["object"]
    for step in path[:-1]:
        target = target[step]
    if remove:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return copied


# One value of each JSON type (falsy and not): replacing a member by one of another type is what most often
# breaks code that expects that type (copied: the drawn review is changed in place).
SAMPLES = (None, True, False, 0, 5, -1, 1.5, "", "x", [], [5], ["x"], [{}], [None], {}, {"x": 5})


def other_type(current: Any) -> st.SearchStrategy[Any]:
    """A value of another JSON type than `current` (most of the time), or any JSON value."""
    others = [value for value in SAMPLES if type(value) is not type(current)]
    return (
        st.sampled_from(others).map(copy.deepcopy) | st.sampled_from(others).map(copy.deepcopy) | json_values
    )


# Field names the code reads (so that adding one, with a wrong value, reaches it).
FIELDS = (
    "metadata",
    "labels",
    "annotations",
    "namespace",
    "name",
    "generateName",
    "ownerReferences",
    "controller",
    "kind",
    "uid",
    "spec",
    "containers",
    "initContainers",
    "schedulingGates",
    "nodeSelector",
    "restartPolicy",
    "resources",
    "ports",
    "template",
    "podFailurePolicy",
    "rules",
    "onPodConditions",
    "action",
    "type",
    "status",
    "podReplacementPolicy",
    "operation",
    "subResource",
    "resource",
    "group",
    "dryRun",
    "object",
    "request",
    "apiVersion",
)


@st.composite
def broken_reviews(draw: st.DrawFn, bases: tuple[dict[str, Any], ...]) -> Any:
    """A good review with one to three places (mostly inside the object) replaced by a value of another type,
    removed, or given a field the code reads with a wrong value."""
    body: Any = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        places = list(places_in(body))
        inside = [path for path in places if path[:2] == ("request", "object")]
        # Mostly a member the code reads (FIELDS; its name drawn first, so that a name found once is as likely
        # as one found everywhere), else anywhere, mostly in the object.
        names = sorted({path[-1] for path in inside if path and path[-1] in FIELDS})
        chosen = draw(st.sampled_from(names)) if names and draw(st.integers(0, 9)) < 7 else None
        known = [path for path in inside if path and path[-1] == chosen]
        path = draw(st.sampled_from(known or (inside if draw(st.integers(0, 9)) < 8 else places) or places))
        target = body
        for step in path[:-1]:
            target = target[step]
        node = target if not path else target[path[-1]]
        action = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
        if action == "add" and isinstance(node, dict):
            node[draw(st.sampled_from(FIELDS))] = draw(other_type(None))
        elif not path:
            body = draw(other_type(body))
        elif action == "remove":
            del target[path[-1]]
        else:
            target[path[-1]] = draw(other_type(node))
    return body


CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "application/json; charset=latin-1",
        "application/yaml",
    ]
)

# --- what must come back --------------------------------------------------------------------------------


def is_review(body: Any) -> bool:
    """An AdmissionReview request the controller must answer with 200 (docs/contracts.md): an object with
    apiVersion admission.k8s.io/v1, kind AdmissionReview, a request object with a non-empty string uid and
    an object."""
    request = body.get("request") if isinstance(body, dict) else None
    return (
        isinstance(request, dict)
        and body.get("apiVersion") == "admission.k8s.io/v1"
        and body.get("kind") == "AdmissionReview"
        and isinstance(request.get("uid"), str)
        and bool(request["uid"])
        and isinstance(request.get("object"), dict)
    )


def unpatchable_on_purpose(body: dict[str, Any]) -> bool:
    """The malformed pod webhook.admission.mutation refuses on purpose (an internal error by design, admitted
    unchanged with the warning): an enabled pod being created whose spec or metadata is not an object."""
    request = body["request"]
    obj = request["object"]
    return (
        request.get("operation", "CREATE") == "CREATE"
        and pod_labels(obj).get(ENABLE) == "1"
        and not (isinstance(obj.get("spec"), dict) and isinstance(obj.get("metadata"), dict))
    )


def check_answer(response: requests.Response, sent: Any) -> None:
    assert response.status_code < 500, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    answer = response.json()
    if not is_review(sent):
        if currently_in_test_context():
            event(f"refused {response.status_code}")
        assert response.status_code in (400, 413), answer
        assert set(answer) == {"error"} and isinstance(answer["error"], str) and answer["error"], answer
        return
    assert response.status_code == 200, answer
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    out = answer["response"]
    assert out["uid"] == sent["request"]["uid"] and out["allowed"] is True
    if currently_in_test_context():  # shown by --hypothesis-show-statistics
        event("patched" if "patch" in out else "warned" if out.get("warnings") else "allowed")
    if INTERNAL_ERROR_WARNING in out.get("warnings", ()):
        assert unpatchable_on_purpose(sent), f"an internal error admitting {sent!r}"
    if "patch" in out:
        assert out["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(out["patch"], validate=True))
        # Raises (and fails the example) for a patch that does not apply to the object sent.
        jsonpatch.apply_patch(copy.deepcopy(sent["request"]["object"]), operations)
    else:
        assert "patchType" not in out


def _allowed_errors() -> re.Pattern[str]:
    """The log of the documented malformed pod (see `unpatchable_on_purpose`): the ValueErrors that
    webhook.admission.mutation raises on purpose, first with their traceback, later as one line naming the
    source line."""
    source = Path(admission_pods.__file__)
    lines = [
        number
        for number, line in enumerate(source.read_text().splitlines(), start=1)
        if re.search(r'raise ValueError\("the pod has no (spec|metadata)"\)', line)
    ]
    assert len(lines) == 2, "webhook.admission.mutation no longer refuses a pod without spec or metadata"
    where = "|".join(f"{re.escape(str(source))}:{number}" for number in lines)
    return re.compile(
        rf"ValueError: the pod has no (spec|metadata)\n*\Z|\(ValueError at ({where}), \d+ times\)"
    )


ALLOWED_ERRORS = _allowed_errors()


def check_log(hook: Hook) -> None:
    """No traceback, ERROR or CRITICAL record but those of the documented malformed pod."""
    for record in re.split(r"(?m)^(?=\d{4}-\d\d-\d\d \d\d:)", hook.new_log()):
        if "Traceback" in record or " ERROR " in record or " CRITICAL " in record:
            assert ALLOWED_ERRORS.search(record.strip() + "\n"), record


def send(hook: Hook, path: str, sent: Any, body: bytes, content_type: str | None) -> None:
    check_answer(hook.post(path, body, content_type=content_type), sent)
    check_log(hook)


# --- the tests -----------------------------------------------------------------------------------------


@SETTINGS
@given(sent=broken_reviews(POD_REVIEWS), content_type=CONTENT_TYPES)
@example(sent=POD_REVIEWS[0], content_type="application/json")
# Regressions: a held stub pod without containers got a "replace" that does not apply; with `containers: 5`
# an internal error.
@example(sent=changed(EVICT_STUB, "spec", "containers", remove=True), content_type="application/json")
@example(sent=changed(EVICT_STUB, "spec", "containers", value=5), content_type="application/json")
def test_any_broken_pod_review_is_answered_by_the_contract(
    hook: Hook, sent: Any, content_type: str | None
) -> None:
    send(hook, "/mutate/pods", sent, json.dumps(sent).encode(), content_type)


@settings(SETTINGS, max_examples=300)
@given(sent=broken_reviews(JOB_REVIEWS), content_type=CONTENT_TYPES)
@example(sent=JOB_REVIEWS[0], content_type="application/json")
# Regression: `onPodConditions: 5` in a rule was an internal error.
@example(
    sent=changed(JOB_REVIEWS[2], "spec", "podFailurePolicy", "rules", 0, "onPodConditions", value=5),
    content_type="application/json",
)
def test_any_broken_job_review_is_answered_by_the_contract(
    hook: Hook, sent: Any, content_type: str | None
) -> None:
    send(hook, "/mutate/jobs", sent, json.dumps(sent).encode(), content_type)


@settings(SETTINGS, max_examples=60)
@given(
    path=st.sampled_from(["/mutate/pods", "/mutate/jobs"]),
    raw=st.binary(max_size=200)
    | st.builds(
        lambda review, cut: json.dumps(review).encode()[:cut],
        st.sampled_from(POD_REVIEWS + JOB_REVIEWS),
        st.integers(min_value=0, max_value=400),
    ),
    content_type=CONTENT_TYPES,
)
def test_truncated_json_and_random_bytes_get_400_with_a_reason(
    hook: Hook, path: str, raw: bytes, content_type: str | None
) -> None:
    try:
        sent: Any = json.loads(raw)
    except ValueError:
        sent = None  # not JSON: 400
    send(hook, path, sent, raw, content_type)


@settings(SETTINGS, max_examples=8)
@given(path=st.sampled_from(["/mutate/pods", "/mutate/jobs"]), size=st.integers(MAX_BODY + 1, 2 * MAX_BODY))
def test_bodies_over_the_limit_get_413(hook: Hook, path: str, size: int) -> None:
    big = copy.deepcopy(POD_REVIEWS[0])
    big["request"]["object"]["metadata"]["annotations"] = {"filler": "x" * size}
    response = hook.post(path, json.dumps(big).encode())
    assert response.status_code == 413
    assert response.json() == {"error": f"request body too large: at most {MAX_BODY} bytes"}
    check_log(hook)


SWEEP_VALUES = (None, 5, "x", [5], {"x": 5})
_REMOVED = object()


def swept(review: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, the review) for every member under `request` of `review` removed, and replaced by each value
    of SWEEP_VALUES of another type; each with its own uid, so that a log line names its case."""
    places = [path for path in places_in(review["request"]) if path]
    for number, (path, value) in enumerate(
        (path, value) for path in places for value in (_REMOVED, *SWEEP_VALUES)
    ):
        copied = copy.deepcopy(review)
        target = copied["request"]
        for step in path[:-1]:
            target = target[step]
        if value is _REMOVED:
            del target[path[-1]]
        elif type(value) is type(target[path[-1]]):
            continue
        else:
            target[path[-1]] = copy.deepcopy(value)
        if isinstance(copied["request"], dict) and path != ("uid",):
            copied["request"]["uid"] = f"sweep-{number}"
        yield (
            f"request/{'/'.join(map(str, path))} {'removed' if value is _REMOVED else json.dumps(value)}",
            copied,
        )


@pytest.mark.parametrize(
    ("path", "review"),
    [pytest.param("/mutate/pods", review, id=f"pod-{index}") for index, review in enumerate(POD_REVIEWS[:7])]
    + [pytest.param("/mutate/jobs", review, id=f"job-{index}") for index, review in enumerate(JOB_REVIEWS)],
)
def test_every_member_removed_or_of_another_type(hook: Hook, path: str, review: dict[str, Any]) -> None:
    """Not random: each member of the review, one at a time (the fuzzing above combines several)."""
    for where, sent in swept(review):
        try:
            check_answer(hook.post(path, json.dumps(sent).encode()), sent)
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}") from error
    check_log(hook)


@pytest.mark.parametrize(
    ("depth", "nested_too_deeply"),
    [
        pytest.param(100, False, id="100"),
        pytest.param(300, False, id="300"),
        pytest.param(2_000, True, id="2000"),
        pytest.param(30_000, True, id="30000"),
    ],
)
def test_deep_nesting_is_answered(hook: Hook, depth: int, nested_too_deeply: bool) -> None:
    """Nested values in a container of a pod held with stubs, whose resources the patch copies: answered and
    copied, or (too deep for the JSON parser) refused with a reason; never an internal error."""
    nested = "[" * depth + "]" * depth
    raw = json.dumps(EVICT_STUB).replace(
        '"image": "nginx:1.25"', f'"image": "nginx:1.25", "resources": {{"x": {nested}}}'
    )
    response = hook.post("/mutate/pods", raw.encode())
    if nested_too_deeply:
        assert response.status_code == 400 and "nested too deeply" in response.json()["error"]
    else:
        check_answer(response, json.loads(raw))
        assert "patch" in response.json()["response"]
    check_log(hook)


def _review_with(**fields: Any) -> dict[str, Any]:
    """POD_REVIEWS[0] with top-level fields (or, as `request_<name>`, request fields) set or, to None, removed."""
    body = copy.deepcopy(POD_REVIEWS[0])
    for name, value in fields.items():
        target, key = (
            (body["request"], name.removeprefix("request_")) if name.startswith("request_") else (body, name)
        )
        if value is None:
            del target[key]
        else:
            target[key] = value
    return body


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        pytest.param(_review_with(apiVersion="admission.k8s.io/v1beta1"), "apiVersion must be", id="v1beta1"),
        pytest.param(_review_with(apiVersion=None), "apiVersion must be", id="no-apiVersion"),
        pytest.param(_review_with(kind="Pod"), "kind must be AdmissionReview", id="kind-pod"),
        pytest.param(_review_with(request=None), "request must be an object", id="no-request"),
        pytest.param(_review_with(request=[]), "request must be an object", id="request-list"),
        pytest.param(_review_with(request_uid=None), "request.uid must be", id="no-uid"),
        pytest.param(_review_with(request_uid=""), "request.uid must be", id="empty-uid"),
        pytest.param(_review_with(request_uid=7), "request.uid must be", id="uid-number"),
        pytest.param(_review_with(request_object=None), "request.object must be", id="no-object"),
        pytest.param(_review_with(request_object=["Pod"]), "request.object must be", id="object-list"),
        pytest.param([], "must be a JSON object", id="array"),
        pytest.param("AdmissionReview", "must be a JSON object", id="string"),
    ],
)
@pytest.mark.parametrize(
    "path", [pytest.param("/mutate/pods", id="pods"), pytest.param("/mutate/jobs", id="jobs")]
)
def test_what_is_not_a_review_gets_400_with_the_reason(hook: Hook, path: str, sent: Any, reason: str) -> None:
    response = hook.post(path, json.dumps(sent).encode())
    check_answer(response, sent)
    assert response.status_code == 400 and reason in response.json()["error"]
    check_log(hook)


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        pytest.param("/mutate/pods", POD_REVIEWS[0], id="pod"),
        pytest.param("/mutate/jobs", JOB_REVIEWS[0], id="job"),
    ],
)
def test_a_good_review_is_still_mutated_after_the_fuzzing(
    hook: Hook, path: str, sent: dict[str, Any]
) -> None:
    response = hook.post(path, json.dumps(sent).encode())
    assert response.status_code == 200
    assert "patch" in response.json()["response"]
    check_answer(response, sent)
    check_log(hook)
    assert hook.process.proc.poll() is None
