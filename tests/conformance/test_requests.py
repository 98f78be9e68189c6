"""Request formats: body media types (the apiserver's negotiation: JSON, YAML or protobuf; none given is
JSON), patch types and patch failures (k8s.io/apiserver/pkg/endpoints/handlers/patch.go), and label
selector syntax errors (k8s.io/apimachinery/pkg/labels/selector.go)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.support import JSON_PATCH, MERGE, STRATEGIC, Conn, Reply, pod

GENERIC_422 = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "the server rejected our request due to an error in our request",
    "reason": "Invalid",
    "details": {},
    "code": 422,
}


async def raw(kube: Conn, method: str, path: str, data: bytes, headers: dict[str, str]) -> Reply:
    async with kube.session.request(
        method,
        kube.base + path,
        data=data,
        headers=headers,
        ssl=kube.ssl,
        skip_auto_headers=() if "Content-Type" in headers else ("Content-Type",),
    ) as response:
        return Reply(response.status, await response.json(content_type=None))


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream", "application/x-yaml"])
async def test_a_body_in_another_format_is_415(kube: Conn, content_type: str) -> None:
    reply = await raw(
        kube, "POST", kube.configmaps, b'{"metadata": {"name": "c"}}', {"Content-Type": content_type}
    )
    assert reply.status_fields() == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        "reason": "UnsupportedMediaType",
        "code": 415,
    }


async def test_a_body_without_a_content_type_is_json_and_yaml_is_understood(kube: Conn) -> None:
    assert (await raw(kube, "POST", kube.configmaps, b'{"metadata": {"name": "a"}}', {})).status == 201
    yaml_body = b"metadata:\n  name: b\ndata:\n  k: v\n"
    created = await raw(kube, "POST", kube.configmaps, yaml_body, {"Content-Type": "application/yaml"})
    assert (created.status, created.body["data"]) == (201, {"k": "v"})


async def test_a_patch_needs_a_patch_type(kube: Conn) -> None:
    await kube.created(kube.pods, pod("p"))
    for headers in ({}, {"Content-Type": "application/json"}):
        reply = await raw(kube, "PATCH", f"{kube.pods}/p", b"{}", headers)
        assert reply.status_fields() == {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": "415: Unsupported Media Type",
            "reason": "UnsupportedMediaType",
            "details": {},
            "code": 415,
        }


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "test", "path": "/metadata/labels/app", "value": "other"}],
        [{"op": "replace", "path": "/metadata/nope/x", "value": "x"}],
        [{"op": "bogus", "path": "/x"}],
    ],
    ids=["test-fails", "missing-path", "unknown-op"],
)
async def test_a_json_patch_that_fails_is_a_bare_422(kube: Conn, operations: list[dict[str, Any]]) -> None:
    await kube.created(kube.pods, pod("p", labels={"app": "web"}))
    reply = await kube.patch(f"{kube.pods}/p", operations, JSON_PATCH)
    assert reply.status_fields() == GENERIC_422


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (
            {"op": "add"},
            JSON_PATCH,
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp",
        ),
        (
            [1],
            MERGE,
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        ([1], STRATEGIC, "json: cannot unmarshal array into Go value of type map[string]interface {}"),
    ],
    ids=["json-patch-object", "merge-array", "strategic-array"],
)
async def test_a_patch_of_the_wrong_shape_is_400(
    kube: Conn, body: Any, content_type: str, message: str
) -> None:
    await kube.created(kube.pods, pod("p"))
    reply = await kube.patch(f"{kube.pods}/p", body, content_type)
    assert (reply.status, reply.body["reason"], reply.body["message"]) == (400, "BadRequest", message)


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a===b", "unable to parse requirement: found '=', expected: identifier"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
    ],
)
async def test_label_selector_syntax_errors(kube: Conn, selector: str, message: str) -> None:
    reply = await kube.get(kube.pods, params={"labelSelector": selector})
    assert (reply.status, reply.body["reason"], reply.body["message"]) == (400, "BadRequest", message)
