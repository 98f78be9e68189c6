"""Answer representations: the JSON object, a `meta.k8s.io` Table or PartialObjectMetadata as the
Accept header asks (kubectl asks for Tables), Status errors, and `Warning` headers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict

from sim.emulator import table
from sim.emulator.errors import ApiError
from sim.emulator.resources import ResourceType
from stagger.objects import Obj


@dataclass(frozen=True)
class Rendering:
    mode: Literal["json", "table", "metadata"] = "json"
    table_version: str = "meta.k8s.io/v1"
    include: table.IncludeObject = "Metadata"


def negotiate(accept: str, include: str) -> Rendering:
    """Pick the representation from Accept, first acceptable entry first (kubectl lists Table first)."""
    include_object: table.IncludeObject = "Metadata"
    if include == "None":
        include_object = "None"
    elif include == "Object":
        include_object = "Object"
    for entry in accept.split(","):
        media, *params = [p.strip() for p in entry.split(";")]
        options = dict(p.partition("=")[::2] for p in params)
        if media not in ("application/json", "*/*", "application/*"):
            continue
        kind, group, version = options.get("as"), options.get("g"), options.get("v", "v1")
        if kind is None:
            return Rendering()
        if group == "meta.k8s.io" and version in ("v1", "v1beta1"):
            if kind == "Table":
                return Rendering("table", f"meta.k8s.io/{version}", include_object)
            if kind in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                return Rendering("metadata", f"meta.k8s.io/{version}")
    return Rendering()


def json_response(body: Any, *, status: int = 200, warnings: tuple[str, ...] = ()) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict()
    for warning in warnings:
        # RFC 7234 warn-text, the form the real server uses: 299 - "text"
        headers.add("Warning", '299 - "' + warning.replace("\\", "\\\\").replace('"', '\\"') + '"')
    if (
        isinstance(body, dict)
        and body.get("kind") == "Status"
        and (body.get("details") or {}).get("retryAfterSeconds")
    ):
        headers["Retry-After"] = str(body["details"]["retryAfterSeconds"])
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def error_response(error: ApiError) -> web.Response:
    return json_response(error.status, status=error.code)


def render_object(rtype: ResourceType, obj: Obj, rendering: Rendering, *, now: float) -> Obj:
    if rendering.mode == "table":
        return table.to_table(
            rtype,
            [obj],
            now=now,
            include=rendering.include,
            list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            api_version=rendering.table_version,
        )
    if rendering.mode == "metadata":
        return {**table.partial_metadata(obj), "apiVersion": rendering.table_version}
    return obj


def render_list(rtype: ResourceType, listed: Obj, rendering: Rendering, *, now: float) -> Obj:
    if rendering.mode == "table":
        return table.to_table(
            rtype,
            listed["items"],
            now=now,
            include=rendering.include,
            list_meta=listed["metadata"],
            api_version=rendering.table_version,
        )
    if rendering.mode == "metadata":
        return {
            "kind": "PartialObjectMetadataList",
            "apiVersion": rendering.table_version,
            "metadata": listed["metadata"],
            "items": [
                {**table.partial_metadata(o), "apiVersion": rendering.table_version} for o in listed["items"]
            ],
        }
    return listed
