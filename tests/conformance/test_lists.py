"""Lists and watches by resourceVersion: ValidateListOptions / validateWatchOptions
(k8s.io/apimachinery/pkg/apis/meta/internalversion/validation v0.36), storage.ValidateListOptions and the
cacher's version rules (k8s.io/apiserver/pkg/storage v0.36; docs: "Resource versions" in the API concepts,
https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.support import Conn, invalid_message

LABEL = {"conformance": "lists"}  # the real namespace also holds kube-root-ca.crt


def configmap(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": LABEL},
        "data": {"v": value},
    }


async def listed(kube: Conn, **params: str) -> tuple[str, list[tuple[str, str]]]:
    reply = await kube.get(kube.configmaps, params={"labelSelector": "conformance=lists", **params})
    assert reply.status == 200, reply.body
    items = [(item["metadata"]["name"], item["data"]["v"]) for item in reply.body["items"]]
    return reply.body["metadata"]["resourceVersion"], items


async def history(kube: Conn) -> tuple[str, str]:
    """a=1 (returns its version), a=2 (returns its version), then b=1."""
    first = (await kube.created(kube.configmaps, configmap("a", "1")))["metadata"]["resourceVersion"]
    second = await kube.put(f"{kube.configmaps}/a", configmap("a", "2"))
    assert second.status == 200
    await kube.created(kube.configmaps, configmap("b", "1"))
    return first, second.body["metadata"]["resourceVersion"]


async def test_exact_lists_read_the_state_at_that_version(kube: Conn) -> None:
    first, second = await history(kube)
    assert await listed(kube, resourceVersion=first, resourceVersionMatch="Exact") == (first, [("a", "1")])
    assert await listed(kube, resourceVersion=second, resourceVersionMatch="Exact") == (second, [("a", "2")])
    # A version with a limit and no match is the legacy exact read.
    assert await listed(kube, resourceVersion=first, limit="5") == (first, [("a", "1")])
    version, items = await listed(kube, resourceVersion=first, resourceVersionMatch="NotOlderThan")
    assert items == [("a", "2"), ("b", "1")]
    assert int(version) > int(second)
    version, items = await listed(kube, resourceVersion=first)
    assert items == [("a", "2"), ("b", "1")]


async def test_a_deleted_object_is_in_the_state_before_its_deletion(kube: Conn) -> None:
    first, _ = await history(kube)
    deleted = await kube.delete(f"{kube.configmaps}/a")
    assert deleted.status == 200
    _, now = await listed(kube)
    assert now == [("b", "1")]
    assert (await listed(kube, resourceVersion=first, resourceVersionMatch="Exact"))[1] == [("a", "1")]


async def test_pages_continue_at_the_first_pages_version(kube: Conn) -> None:
    for name in ("c1", "c2", "c3"):
        await kube.created(kube.configmaps, configmap(name, "old"))
    version, page = await listed(kube, limit="1")
    reply = await kube.get(kube.configmaps, params={"labelSelector": "conformance=lists", "limit": "1"})
    token = reply.body["metadata"]["continue"]
    assert "remainingItemCount" not in reply.body["metadata"]  # only counted without selectors
    unselected = await kube.get(kube.configmaps, params={"limit": "1"})
    assert unselected.body["metadata"]["remainingItemCount"] >= 2
    assert (await kube.put(f"{kube.configmaps}/c2", configmap("c2", "new"))).status == 200
    assert (await kube.delete(f"{kube.configmaps}/c3")).status == 200
    await kube.created(kube.configmaps, configmap("c4", "new"))
    rest = await kube.get(kube.configmaps, params={"labelSelector": "conformance=lists", "continue": token})
    assert rest.status == 200
    assert [(i["metadata"]["name"], i["data"]["v"]) for i in rest.body["items"]] == [
        ("c2", "old"),
        ("c3", "old"),
    ]
    assert rest.body["metadata"]["resourceVersion"] == reply.body["metadata"]["resourceVersion"]
    assert page == [("c1", "old")] and version


@pytest.mark.parametrize(
    ("params", "errors"),
    [
        (
            {"resourceVersionMatch": "Exact"},
            [
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            ],
        ),
        (
            {"resourceVersionMatch": "NotOlderThan"},
            [
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            ],
        ),
        (
            {"resourceVersionMatch": "Bogus", "resourceVersion": "1"},
            [
                'resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""'
            ],
        ),
        (
            {"resourceVersionMatch": "Exact", "resourceVersion": "0"},
            [
                'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
            ],
        ),
        (
            {"sendInitialEvents": "true"},
            ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"],
        ),
        (
            {"watch": "1", "resourceVersionMatch": "Exact", "resourceVersion": "1"},
            [
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
                "sendInitialEvents is provided",
                'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"',
            ],
        ),
        (
            {"watch": "1", "sendInitialEvents": "true"},
            [
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            ],
        ),
    ],
    ids=[
        "exact-alone",
        "not-older-alone",
        "bogus",
        "exact-zero",
        "initial-events-list",
        "watch-exact",
        "watch-initial",
    ],
)
async def test_contradicting_options_are_invalid_list_options(
    kube: Conn, params: dict[str, str], errors: list[str]
) -> None:
    reply = await kube.get(kube.configmaps, params=params)
    assert reply.status == 422
    assert reply.body["message"] == invalid_message("ListOptions.meta.k8s.io", "", *errors)
    assert {k: v for k, v in reply.body["details"].items() if k != "causes"} == {
        "group": "meta.k8s.io",
        "kind": "ListOptions",
    }


@pytest.mark.parametrize(
    ("value", "why"), [("abc", "invalid syntax"), ("-1", "invalid syntax"), ("9" * 23, "value out of range")]
)
async def test_a_version_that_is_not_a_number(kube: Conn, value: str, why: str) -> None:
    problem = f'resourceVersion: Invalid value: "{value}": strconv.ParseUint: parsing "{value}": {why}'
    listed_reply = await kube.get(kube.configmaps, params={"resourceVersion": value})
    assert listed_reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": f"invalid resource version: {problem}",
        "reason": "BadRequest",
        "code": 400,
    }
    watched = await kube.get(
        kube.configmaps, params={"watch": "1", "resourceVersion": value, "timeoutSeconds": "1"}
    )
    assert watched.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": problem,
        "code": 500,
    }


@pytest.mark.parametrize("match", ["", "Exact", "NotOlderThan"])
async def test_a_version_from_the_future_is_a_timeout(kube: Conn, match: str) -> None:
    params = {"resourceVersion": "99999999999"}
    if match:
        params["resourceVersionMatch"] = match
    reply = await kube.get(kube.configmaps, params=params)
    assert reply.status == 504
    assert reply.body["reason"] == "Timeout"
    assert reply.body["message"].startswith("Timeout: Too large resource version: 99999999999, current: ")
    assert reply.body["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }


async def test_continue_tokens(kube: Conn) -> None:
    for name in ("c1", "c2"):
        await kube.created(kube.configmaps, configmap(name, "x"))
    first = await kube.get(kube.configmaps, params={"limit": "1"})
    token = first.body["metadata"]["continue"]
    with_version = await kube.get(kube.configmaps, params={"continue": token, "resourceVersion": "5"})
    assert (with_version.status, with_version.body["message"]) == (
        400,
        "specifying resource version is not allowed when using continue",
    )
    garbage = await kube.get(kube.configmaps, params={"continue": "garbage"})
    assert garbage.status == 400
    # The rest of the message is the JSON decoder's own words (Go's and Python's differ).
    assert garbage.body["message"].startswith("invalid continue token: continue key is not valid: ")
