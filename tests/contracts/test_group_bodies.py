"""The group pacer service's bodies (`stagger.contracts.groups`): each request and answer, as its sender
builds it and through JSON, is read back equal by its receiver's reader: the grant request and answer,
the wait request and both shapes of its answer, the admit request and the admit answer the replicas read
from the leader (examples, and hypothesis over names, uids, pairs and numbers), and an error answer's
reason; and a body that is not the contract's shape is a `BodyError` naming the field (a 400 on the
controller, an unreachable controller on lockd), with the texts the API's tests and docs rely on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger.contracts import groups as contract
from stagger.contracts.errors import read_error
from stagger.contracts.groups import BodyError, GrantRequest, PodName, WaitReply


def wire(body: object) -> object:
    """A body as the other end decodes it: through JSON, as aiohttp sends and reads it."""
    return json.loads(json.dumps(body).encode())


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=40)
uids = st.one_of(st.just(""), st.uuids().map(str))
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
pod_keys = st.tuples(names, names)
pairs = st.tuples(names, st.text(max_size=60))


# The requests, read by the controller.


def test_a_grant_request_as_lockd_sends_it_is_what_the_controller_reads() -> None:
    sent: GrantRequest = {"namespace": "shop", "name": "web-1", "uid": "u-1", "group": "g1", "node": "n1"}
    assert contract.read_grant_request(wire(sent)) == sent
    bare: GrantRequest = {"namespace": "shop", "name": "web-1", "uid": "u-1"}
    assert contract.read_grant_request(wire(bare)) == bare


@given(pods=st.dictionaries(pod_keys, uids, max_size=20), wait=st.floats(0, 60), grant=st.booleans())
def test_a_wait_as_lockd_builds_it_is_what_the_controller_reads(
    pods: dict[tuple[str, str], str], wait: float, grant: bool
) -> None:
    sent = contract.wait_request(node="n1", wait=wait, pods=pods.items(), grant=grant)
    assert contract.read_wait_request(wire(sent)) == contract.WaitAsk(
        node="n1",
        wait=wait,
        pods=list(pods),
        uids={key: uid for key, uid in pods.items() if uid},
        grant=grant,
    )


@given(
    pacer=st.lists(pairs, min_size=1, max_size=5),
    bypassed=st.lists(pairs, max_size=5),
    owner=uids,
    dry_run=st.booleans(),
)
def test_an_admit_request_as_a_replica_builds_it_is_what_the_leader_reads(
    pacer: list[tuple[str, str]], bypassed: list[tuple[str, str]], owner: str, dry_run: bool
) -> None:
    sent = contract.admit_request(pacer_groups=pacer, bypassed_groups=bypassed, owner=owner, dry_run=dry_run)
    assert contract.read_admit_request(wire(sent)) == sent
    assert sent["pacerGroups"] == [list(pair) for pair in pacer]


# The answers, read by lockd and by the replicas.


@given(granted=st.booleans(), reason=st.text(max_size=80), retry_after=seconds)
def test_a_grant_answer_is_what_lockd_reads(granted: bool, reason: str, retry_after: float) -> None:
    sent = contract.grant_answer(granted=granted, reason=reason, retry_after=retry_after)
    assert contract.read_grant_answer(wire(sent)) == sent
    assert sent["retryAfter"] == round(retry_after, 3)


@given(found=st.dictionaries(pod_keys, uids, max_size=20), granted_for=seconds, grant=st.booleans())
def test_a_wait_answer_of_either_shape_is_what_lockd_reads(
    found: dict[tuple[str, str], str], granted_for: float, grant: bool
) -> None:
    if grant:
        sent = contract.wait_answer(granted=found, granted_for=granted_for, uids=found)
    else:
        sent = contract.wait_answer(grantable=found, uids=found)
    reply = contract.read_wait_answer(wire(sent))
    if grant:
        assert reply == WaitReply(
            grantable=[], granted=list(found.items()), granted_for=round(granted_for, 3)
        )
    else:
        assert reply == WaitReply(grantable=list(found), granted=[], granted_for=0.0)


@pytest.mark.parametrize(
    ("ticket", "held_since"),
    [
        pytest.param(None, None, id="bare"),
        pytest.param("t-1", None, id="ticket"),
        pytest.param(None, 1_700_000_000.5, id="held-since"),
        pytest.param("t-2", 1_700_000_000.0, id="both"),
    ],
)
@pytest.mark.parametrize("admit", [True, False])
def test_an_admit_answer_is_what_the_replica_reads(
    admit: bool, ticket: str | None, held_since: float | None
) -> None:
    sent = contract.admit_answer(
        admit=admit, reason="group p/k: 1 of 2 starting", ticket=ticket, held_since=held_since
    )
    assert contract.read_admit_answer(wire(sent)) == sent
    assert ("ticket" in sent, "heldSince" in sent) == (ticket is not None, held_since is not None)


@given(
    admit=st.booleans(), reason=st.text(max_size=80), ticket=st.text(min_size=1, max_size=40), held=seconds
)
def test_any_admit_answer_round_trips(admit: bool, reason: str, ticket: str, held: float) -> None:
    sent = contract.admit_answer(admit=admit, reason=reason, ticket=ticket, held_since=held)
    assert contract.read_admit_answer(wire(sent)) == sent


@pytest.mark.parametrize(
    ("data", "read"),
    [
        pytest.param(
            {"admit": "yes", "reason": 7}, {"admit": False, "reason": "7"}, id="admit-not-true-holds"
        ),
        pytest.param(
            {"admit": True, "ticket": "", "heldSince": True}, {"admit": True, "reason": ""}, id="bad-extras"
        ),
        pytest.param(
            {"admit": True, "heldSince": 5}, {"admit": True, "reason": "", "heldSince": 5.0}, id="int"
        ),
    ],
)
def test_an_admit_answer_is_read_leniently_past_its_shape(data: dict[str, Any], read: dict[str, Any]) -> None:
    assert contract.read_admit_answer(data) == read


# Bodies that are not the contract's shape.


@pytest.mark.parametrize(
    ("data", "granted", "retry"),
    [
        pytest.param({"granted": True, "reason": "ok", "retryAfter": 0}, True, 0.0, id="yes"),
        pytest.param({"granted": False, "reason": "full", "retryAfter": 2.5}, False, 2.5, id="no"),
        pytest.param({"granted": False}, False, 1.0, id="default-retry"),
    ],
)
def test_grant_answers_fill_in_their_defaults(data: dict[str, Any], granted: bool, retry: float) -> None:
    answer = contract.read_grant_answer(data)
    assert (answer["granted"], answer["retryAfter"]) == (granted, retry)


@pytest.mark.parametrize(
    ("read", "data", "field"),
    [
        pytest.param(contract.read_grant_answer, [], "answer is not {granted", id="answer-not-an-object"),
        pytest.param(contract.read_grant_answer, {"granted": "yes"}, "granted: bool", id="granted-not-bool"),
        pytest.param(
            contract.read_grant_answer, {"granted": True, "retryAfter": -1}, "retryAfter", id="neg-retry"
        ),
        pytest.param(
            contract.read_grant_answer, {"granted": True, "retryAfter": True}, "retryAfter", id="bool-retry"
        ),
        pytest.param(
            contract.read_wait_answer, {"granted": []}, "answer is not {grantable", id="no-grantable"
        ),
        pytest.param(
            contract.read_wait_answer, {"grantable": [], "granted": {}}, "granted", id="granted-not-list"
        ),
        pytest.param(
            contract.read_wait_answer,
            {"grantable": [], "granted": [{"namespace": "d"}]},
            "granted",
            id="no-name",
        ),
        pytest.param(
            contract.read_wait_answer,
            {"grantable": [], "granted": [{"namespace": "d", "name": "p", "uid": 1}]},
            "granted entries",
            id="bad-uid",
        ),
        pytest.param(
            contract.read_wait_answer, {"grantable": [], "grantedFor": -1}, "grantedFor", id="neg-for"
        ),
        pytest.param(contract.read_admit_answer, "admit", "answer is not {admit", id="admit-answer-string"),
        pytest.param(contract.read_grant_request, [1], "JSON object", id="grant-not-object"),
        pytest.param(contract.read_grant_request, {"name": "p"}, "namespace", id="grant-no-namespace"),
        pytest.param(
            contract.read_grant_request, {"namespace": "d", "name": 7}, "name must", id="name-not-string"
        ),
        pytest.param(
            contract.read_grant_request, {"namespace": "d", "name": "p", "node": ""}, "node", id="empty-node"
        ),
        pytest.param(contract.read_wait_request, {"pods": []}, "node", id="wait-no-node"),
        pytest.param(
            contract.read_wait_request,
            {"node": "n", "wait": 61, "pods": []},
            "wait must be",
            id="wait-too-long",
        ),
        pytest.param(
            contract.read_wait_request,
            {"node": "n", "grant": 1, "pods": []},
            "grant must",
            id="grant-not-bool",
        ),
        pytest.param(contract.read_wait_request, {"node": "n"}, "pods must", id="no-pods"),
        pytest.param(
            contract.read_wait_request,
            {"node": "n", "pods": [{"namespace": "d"}]},
            "pods[0].name",
            id="pod-no-name",
        ),
        pytest.param(
            contract.read_admit_request, {"pacerGroups": []}, "pacerGroups must name", id="no-pairs"
        ),
        pytest.param(
            contract.read_admit_request, {"pacerGroups": [["p"]]}, "pacerGroups[0]", id="half-a-pair"
        ),
        pytest.param(
            contract.read_admit_request, {"pacerGroups": [["p", "k"]], "dryRun": "no"}, "dryRun", id="dry-run"
        ),
        pytest.param(
            contract.read_admit_request, {"pacerGroups": [["p", "k"]], "owner": 3}, "owner", id="owner"
        ),
    ],
)
def test_a_body_not_of_the_contracts_shape_is_an_error_naming_the_field(
    read: Any, data: object, field: str
) -> None:
    with pytest.raises(BodyError) as raised:
        read(data)
    assert field in str(raised.value)
    assert isinstance(raised.value, ValueError)  # what the ends' handlers of a bad answer catch


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(b"", "the body is not JSON: Expecting value", id="empty"),
        pytest.param(b"{nope", "the body is not JSON: Expecting property name", id="not-json"),
        pytest.param(b"\xff\xfe\xfd", "the body is not JSON", id="not-utf8"),
        pytest.param(b"[" * 100_000, "the body is not JSON", id="too-deep"),
    ],
)
def test_a_body_that_is_not_json_is_an_error(raw: bytes, reason: str) -> None:
    with pytest.raises(BodyError) as raised:
        contract.decode_json(raw)
    assert str(raised.value).startswith(reason)


def test_a_pod_is_named_with_its_uid_only_when_it_has_one() -> None:
    plain: PodName = {"namespace": "shop", "name": "web-2"}
    assert contract.pod_name("shop", "web-2") == plain
    assert contract.pod_names([("shop", "web-2"), ("shop", "web-3")], uids={("shop", "web-3"): "u3"}) == [
        plain,
        {"namespace": "shop", "name": "web-3", "uid": "u3"},
    ]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(
            {"error": "not the leader: c-1 leads", "leader": "c-1"}, "not the leader: c-1 leads", id="503"
        ),
        pytest.param({"error": ""}, None, id="empty"),
        pytest.param({"error": 5}, None, id="not-a-string"),
        pytest.param(["error"], None, id="not-an-object"),
    ],
)
def test_an_error_answer_gives_its_reason(data: object, reason: str | None) -> None:
    assert read_error(data) == reason
