"""Fuzzing the controller's group grant API (`POST /v1/groups/grant`, `/v1/groups/wait`, `/v1/groups/admit`)
over real HTTPS: one controller process for the module (`python -m webhook` with trustme certificates and a
token file, leading on the API emulator), with six pods of one group in its book, two of them granted, and
one evict-mode claim (so that its `/status` has counts and a reservation to keep), reused by every example.

What is sent: good bodies with fields removed, added or given values of another type, random JSON values,
random bytes, truncated JSON, arrays over the limits (5,001 pods, 257 pairs), bodies over `--max-body`,
and missing, wrong or malformed `Authorization` headers.

What must come back (docs/contracts.md, "lockd → controller: group grants" and "evict-mode admission"):
`401` without the token (checked before the body is read), `400 {"error": ...}` naming the bad field (or
saying the body is not a JSON object), `413` JSON over the body limit, `200` for a body of the documented
shape; never a 5xx, never a traceback or ERROR line in the log; and a refused request changes nothing: the
`groups` section of `/status` (pods, counts, reservations) is the same before and after it.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, currently_in_test_context, event, example, given, settings
from hypothesis import strategies as st

from tests.emulator.webhook_server import configuration, hook
from tests.fuzz.controller import RunningController, start_controller
from tests.fuzz.jsondocs import json_values
from tests.fuzz.jsondocs import places as places_in
from tests.webhook.reviews import ENABLE, enabled, image_policy, pod

pytestmark = pytest.mark.e2e

logger = logging.getLogger(__name__)

TOKEN = "fuzz-grant-token"
MAX_BODY = 512 * 1024
PODS = 6
GRANTED = 2
SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# --- the controller -----------------------------------------------------------------------------------


@dataclass
class Controller(RunningController):
    def post(
        self, path: str, body: bytes, *, authorization: str | bytes | None = f"Bearer {TOKEN}"
    ) -> requests.Response:
        headers: dict[str, str | bytes] = {"Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        return self.http.post(self.process.url + path, data=body, headers=headers, timeout=10)

    def groups(self) -> dict[str, Any]:
        """The `groups` section of /status, without what changes with the clock alone (ages)."""
        response = self.http.get(self.process.url + "/status", timeout=10)
        assert response.status_code == 200
        section = dict(response.json()["groups"])
        for item in section["reservations"]["items"]:
            del item["ageSeconds"], item["heldForSeconds"]
        return section


def _until(check: Any, *, within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, "never got there"
        time.sleep(0.05)
    return found


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    folder = tmp_path_factory.mktemp("grants-fuzz")
    with (
        start_controller(folder, policies=image_policy("lock"), token=TOKEN, max_body=MAX_BODY) as started,
        requests.Session() as api,
    ):
        api.trust_env = False
        api.headers["Authorization"] = "Bearer sim"
        server, process = started.server, started.process
        registered = configuration(
            "stagger",
            hook(
                "pods.stagger.example.com",
                {"url": f"{process.url}/mutate/pods", "caBundle": started.certs.ca_bundle},
                objectSelector={"matchLabels": {ENABLE: "1"}},
                failurePolicy="Fail",
                sideEffects="None",
            ),
        )
        created = api.post(
            server.url + "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            json=registered,
        )
        assert created.status_code == 201, created.text
        running = Controller(process=process, http=started.http)
        _until(lambda: running.groups().get("granting"))
        for index in range(PODS):
            made = api.post(
                server.url + "/api/v1/namespaces/default/pods",
                json=pod(f"web-{index}", labels=enabled(staggerimages="1")),
            )
            assert made.status_code == 201, made.text
        _until(lambda: running.groups()["pods"] == PODS)
        for index in range(GRANTED):
            answer = running.post(
                "/v1/groups/grant",
                json.dumps({"namespace": "default", "name": f"web-{index}"}).encode(),
            )
            assert answer.json()["granted"] is True, answer.text
        # An evict-mode claim, so that `reservations` has an item to keep too.
        claim = {"pacerGroups": [["image-pull", "busybox"]], "owner": "rs-1", "dryRun": False}
        answer = running.post("/v1/groups/admit", json.dumps(claim).encode())
        assert answer.json()["admit"] is True, answer.text
        assert running.groups()["reservations"]["count"] == 1
        yield running


# --- what is sent --------------------------------------------------------------------------------------

GRANT = {"namespace": "default", "name": "web-5", "uid": "0f1e", "group": "g1", "node": "node-1"}
WAIT = {"node": "node-1", "wait": 0, "pods": [{"namespace": "default", "name": "web-5"}]}
ADMIT = {"pacerGroups": [["image-pull", "nginx:1.25"]], "bypassedGroups": [], "owner": "", "dryRun": True}
GOOD = {"/v1/groups/grant": GRANT, "/v1/groups/wait": WAIT, "/v1/groups/admit": ADMIT}
FIELDS = (
    "namespace",
    "name",
    "uid",
    "group",
    "node",
    "wait",
    "pods",
    "pacerGroups",
    "bypassedGroups",
    "owner",
    "dryRun",
)

# A value of each JSON type first (copied: the drawn body is changed in place), and strings over the limits.
junk = (
    st.sampled_from(
        [None, True, False, 0, -1, 61, 1e300, 1.5, "", "x", [], [5], ["x"], {}, {"x": 5}, [{}], [None]]
    )
    | st.sampled_from(["x" * 254, "x" * 4097, ["", "k"], ["p", "k", "x"], ["p", 5], [None, "k"]])
).map(copy.deepcopy) | json_values


@st.composite
def broken(draw: st.DrawFn, good: dict[str, Any]) -> Any:
    """`good` with one to three places replaced by another value, removed, or a field added."""
    body: Any = copy.deepcopy(good)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(list(places_in(body))))
        target = body
        for step in path[:-1]:
            target = target[step]
        node = target if not path else target[path[-1]]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "add" and isinstance(node, dict):
            node[draw(st.sampled_from(FIELDS) | st.text(max_size=5))] = draw(junk)
        elif not path:
            body = draw(junk)
        elif action == "remove":
            del target[path[-1]]
        else:
            target[path[-1]] = draw(junk)
    return body


def huge(path: str, count: int) -> dict[str, Any]:
    """A body with an array just over its limit (`count` entries)."""
    if path == "/v1/groups/wait":
        return {**WAIT, "pods": [{"namespace": "default", "name": f"p-{i}"} for i in range(count)]}
    if path == "/v1/groups/admit":
        return {**ADMIT, "pacerGroups": [["image-pull", f"k{i}"] for i in range(count)]}
    return {**GRANT, "name": "x" * count}


# --- the contract --------------------------------------------------------------------------------------


def _name_problem(body: dict[str, Any], field: str, *, required: bool = True) -> list[str]:
    value = body.get(field)
    if value is None and not required:
        return []
    return [] if isinstance(value, str) and 0 < len(value) <= 253 else [field]


def _pairs_problem(body: dict[str, Any], field: str, *, at_least_one: bool) -> list[str]:
    value = body.get(field, [])
    if not isinstance(value, list) or len(value) > 256 or (at_least_one and not value):
        return [field]
    for pair in value:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(part, str) for part in pair)
            and 0 < len(pair[0]) <= 253
            and len(pair[1]) <= 4096
        ):
            return [field]
    return []


def problems(path: str, body: Any) -> list[str] | None:
    """The fields of `body` that are not of the documented shape ([] when it is one; None when it is not a
    JSON object at all). Extra fields are ignored."""
    if not isinstance(body, dict):
        return None
    if path == "/v1/groups/grant":
        return (
            _name_problem(body, "namespace")
            + _name_problem(body, "name")
            + _name_problem(body, "uid", required=False)
            + _name_problem(body, "group", required=False)
            + _name_problem(body, "node", required=False)
        )
    if path == "/v1/groups/wait":
        found = _name_problem(body, "node")
        wait = body.get("wait", 30)
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
            found.append("wait")
        pods = body.get("pods")
        if (
            not isinstance(pods, list)
            or len(pods) > 5000
            or not all(
                isinstance(pod, dict) and not _name_problem(pod, "namespace") + _name_problem(pod, "name")
                for pod in pods
            )
        ):
            found.append("pods")
        return found
    dry_run = body.get("dryRun", False)
    owner = body.get("owner", "")
    return (
        ([] if isinstance(dry_run, bool) else ["dryRun"])
        + ([] if isinstance(owner, str) and len(owner) <= 253 else ["owner"])
        + _pairs_problem(body, "pacerGroups", at_least_one=True)
        + _pairs_problem(body, "bypassedGroups", at_least_one=False)
    )


def check_log(controller: Controller) -> None:
    log = controller.new_log()
    assert "Traceback" not in log and " ERROR " not in log and " CRITICAL " not in log, log


def send(
    controller: Controller, path: str, raw: bytes, *, authorization: str | bytes | None = f"Bearer {TOKEN}"
) -> tuple[int, Any]:
    before = controller.groups()
    response = controller.post(path, raw, authorization=authorization)
    if currently_in_test_context():
        event(f"{path} {response.status_code}")  # shown by --hypothesis-show-statistics
    assert response.status_code < 500, (response.text, controller.process.log[-4000:])
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    answer = response.json()
    if response.status_code != 200:
        assert isinstance(answer, dict) and isinstance(answer.get("error"), str) and answer["error"], answer
        # A refused request changes nothing.
        assert controller.groups() == before
    check_log(controller)
    return response.status_code, answer


def expect(path: str, body: Any, status: int, answer: Any) -> None:
    """The answer the contract gives `body` (sent with the token): 200 for the documented shape, else 400
    naming one of the bad fields."""
    found = problems(path, body)
    if found == []:
        assert status == 200, answer
        return
    assert status == 400, answer
    if found is None:
        assert "JSON" in answer["error"], answer
    else:
        assert any(field in answer["error"] for field in found), (found, answer)


def prepared(path: str, body: Any) -> Any:
    """A long poll of the documented shape waits at most 0 s here."""
    if path == "/v1/groups/wait" and problems(path, body) == []:
        body = {**body, "wait": 0}
    return body


PATHS = st.sampled_from(sorted(GOOD))

# --- the tests -----------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), path=PATHS)
def test_any_broken_body_gets_400_naming_the_field_and_changes_nothing(
    controller: Controller, data: st.DataObject, path: str
) -> None:
    body = prepared(path, data.draw(broken(GOOD[path]) | json_values, label="body"))
    status, answer = send(controller, path, json.dumps(body).encode())
    expect(path, body, status, answer)


@settings(SETTINGS, max_examples=60)
@given(
    path=PATHS,
    raw=st.binary(max_size=100)
    | st.builds(
        lambda body, cut: json.dumps(body).encode()[:cut],
        st.sampled_from(list(GOOD.values())),
        st.integers(0, 120),
    ),
)
def test_random_bytes_and_truncated_json_get_400(controller: Controller, path: str, raw: bytes) -> None:
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = None  # not JSON
    body = prepared(path, body)
    status, answer = send(controller, path, json.dumps(body).encode() if isinstance(body, dict) else raw)
    expect(path, body, status, answer)


@settings(SETTINGS, max_examples=6)
@given(path=PATHS, over=st.integers(min_value=1, max_value=50))
def test_arrays_and_strings_over_their_limits_get_400(controller: Controller, path: str, over: int) -> None:
    limit = {"/v1/groups/wait": 5000, "/v1/groups/admit": 256, "/v1/groups/grant": 253}[path]
    body = huge(path, limit + over)
    status, answer = send(controller, path, json.dumps(body).encode())
    assert status == 400
    expect(path, body, status, answer)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param("/v1/groups/grant", {"name": "web-5"}, "namespace", id="grant-no-namespace"),
        pytest.param("/v1/groups/grant", {**GRANT, "name": 5}, "name", id="grant-name-number"),
        pytest.param("/v1/groups/grant", {**GRANT, "uid": ""}, "uid", id="grant-empty-uid"),
        pytest.param("/v1/groups/grant", {**GRANT, "node": ["n"]}, "node", id="grant-node-list"),
        pytest.param("/v1/groups/wait", {**WAIT, "wait": 61}, "wait", id="wait-too-long"),
        pytest.param("/v1/groups/wait", {**WAIT, "wait": True}, "wait", id="wait-bool"),
        pytest.param("/v1/groups/wait", {**WAIT, "pods": {}}, "pods", id="wait-pods-object"),
        pytest.param(
            "/v1/groups/wait",
            {**WAIT, "pods": [{"namespace": "default"}]},
            "pods[0].name",
            id="wait-pod-no-name",
        ),
        pytest.param(
            "/v1/groups/admit", {**ADMIT, "pacerGroups": []}, "pacerGroups", id="admit-no-pacer-groups"
        ),
        pytest.param(
            "/v1/groups/admit",
            {**ADMIT, "bypassedGroups": [["p"]]},
            "bypassedGroups[0]",
            id="admit-short-pair",
        ),
        pytest.param("/v1/groups/admit", {**ADMIT, "dryRun": "yes"}, "dryRun", id="admit-dry-run-string"),
        pytest.param("/v1/groups/admit", {**ADMIT, "owner": 7}, "owner", id="admit-owner-number"),
    ],
)
def test_a_bad_field_is_named(controller: Controller, path: str, body: dict[str, Any], field: str) -> None:
    status, answer = send(controller, path, json.dumps(body).encode())
    assert status == 400 and field in answer["error"], answer
    expect(path, body, status, answer)


SWEEP_VALUES = (None, 5, -1, "", "x", [5], {"x": 5})
_REMOVED = object()


@pytest.mark.parametrize("path", [pytest.param(path, id=path.rsplit("/", 1)[1]) for path in sorted(GOOD)])
def test_every_member_removed_or_of_another_type(controller: Controller, path: str) -> None:
    """Not random: each member of the good body, one at a time, removed or replaced by a value of each other
    type (the fuzzing above combines several)."""
    good = GOOD[path]
    for place in (place for place in places_in(good) if place):
        for value in (_REMOVED, *SWEEP_VALUES):
            body = copy.deepcopy(good)
            target = body
            for step in place[:-1]:
                target = target[step]
            if value is _REMOVED:
                del target[place[-1]]
            elif type(value) is type(target[place[-1]]):
                continue
            else:
                target[place[-1]] = copy.deepcopy(value)
            body = prepared(path, body)
            status, answer = send(controller, path, json.dumps(body).encode())
            try:
                expect(path, body, status, answer)
            except AssertionError as error:
                raise AssertionError(
                    f"{place} {'removed' if value is _REMOVED else value!r}: {error}"
                ) from error


@pytest.mark.parametrize("path", [pytest.param(path, id=path.rsplit("/", 1)[1]) for path in sorted(GOOD)])
def test_a_body_over_the_limit_gets_413(controller: Controller, path: str) -> None:
    body = {**GOOD[path], "filler": "x" * MAX_BODY}
    status, answer = send(controller, path, json.dumps(body).encode())
    assert status == 413, answer


def accepted(authorization: str | bytes | None) -> bool:
    """The documented header: `Bearer <token>` (the scheme's case and the spaces around the token aside)."""
    if not isinstance(authorization, str):
        return False
    scheme, _, given = authorization.strip().partition(" ")
    return scheme.lower() == "bearer" and given.strip() == TOKEN


# Header values requests will send (no CR, LF or NUL; no leading space, which would fold the header).
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
).filter(lambda text: not text[:1].isspace())
header_bytes = st.binary(max_size=40).filter(
    lambda raw: not re.search(rb"[\r\n\x00]", raw) and not raw[:1].isspace()
)
authorizations = st.one_of(
    st.none(),
    st.just(f"Bearer {TOKEN}"),
    st.sampled_from(
        [
            "",
            "Bearer",
            "Bearer ",
            f"Basic {TOKEN}",
            f"Bearer {TOKEN}x",
            f"Bearer {TOKEN[:-1]}",
            f"{TOKEN}",
            f"Bearer\t{TOKEN}",
            f"bearer {TOKEN}",
            f"BEARER  {TOKEN} ",
        ]
    ),
    st.builds(
        lambda scheme, given: f"{scheme} {given}",
        st.sampled_from(["Bearer", "bearer", "Token", "Basic"]),
        header_text,
    ),
    header_text,
    st.builds(lambda given: b"Bearer " + given, header_bytes),
    header_bytes,
)


@settings(SETTINGS, max_examples=150)
@given(path=PATHS, authorization=authorizations, good=st.booleans())
@example(path="/v1/groups/grant", authorization=f"Bearer {TOKEN}", good=True)
@example(path="/v1/groups/grant", authorization=None, good=True)
# Non-ASCII bytes in the token.
@example(path="/v1/groups/grant", authorization=b"Bearer \xff\xfe", good=True)
def test_without_the_token_401_and_nothing_changes(
    controller: Controller, path: str, authorization: str | bytes | None, good: bool
) -> None:
    body: Any = GOOD[path] if good else {"garbage": True}
    if path == "/v1/groups/grant" and good:
        body = {**GRANT, "name": "no-such-pod"}  # granted or not, a pod not in the book reserves nothing
    status, answer = send(controller, path, json.dumps(body).encode(), authorization=authorization)
    if accepted(authorization):
        expect(path, body, status, answer)
    else:
        # A control character is malformed HTTP: the parser refuses it (JSON 400) before any handler.
        raw = authorization.encode("latin-1") if isinstance(authorization, str) else authorization or b""
        assert status == (400 if re.search(rb"[\x00-\x08\x0a-\x1f\x7f]", raw) else 401), answer
        assert ("Bearer" if status == 401 else "malformed HTTP") in answer["error"]


def test_the_controller_still_grants_after_the_fuzzing(controller: Controller) -> None:
    before = controller.groups()
    assert before["pods"] == PODS and before["granting"] is True
    answer = controller.post(
        "/v1/groups/grant", json.dumps({"namespace": "default", "name": "web-0"}).encode()
    )
    assert answer.status_code == 200 and answer.json()["granted"] is True  # idempotent: still granted
    check_log(controller)
    assert controller.process.proc.poll() is None
