"""A minimal OpenAPI v3 surface: just what `kubectl apply` reads to learn that the server validates
fields itself (the `fieldValidation` parameter of each kind's PATCH operation). Without it kubectl
falls back to downloading the v2 spec for client-side validation and gives up. No schemas are served.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.emulator.resources import KUBERNETES_VERSION, ResourceType, group_versions, types_in

_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force")


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _object_path(rtype: ResourceType) -> str:
    base = "/" + _gv_path(rtype.group, rtype.version)
    if rtype.namespaced:
        return f"{base}/namespaces/{{namespace}}/{rtype.name}/{{name}}"
    return f"{base}/{rtype.name}/{{name}}"


def group_version_document(group: str, version: str) -> dict[str, Any] | None:
    types = types_in(group, version)
    if types is None:
        return None
    paths: dict[str, Any] = {}
    for rtype in types:
        if "patch" not in rtype.verbs:
            continue  # create-only kinds (tokenreviews) have no PATCH operation to describe
        parameters = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
        if rtype.namespaced:
            parameters.append(
                {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}
            )
        parameters += [{"name": p, "in": "query", "schema": {"type": "string"}} for p in _PARAMETERS]
        paths[_object_path(rtype)] = {
            "patch": {
                "operationId": f"patch{rtype.kind}",
                "parameters": parameters,
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": rtype.kind},
                "responses": {"200": {"description": "OK"}},
            },
        }
    major, minor = KUBERNETES_VERSION
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{major}.{minor}.0"},
        "paths": paths,
    }


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()


def root_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, version in group_versions():
        document = group_version_document(group, version)
        assert document is not None
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(document)}"}
    return {"paths": paths}


def document_for_path(path: str) -> dict[str, Any] | None:
    """`/openapi/v3` or `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] != ["openapi", "v3"]:
        return None
    rest = parts[2:]
    if not rest:
        return root_document()
    if len(rest) == 2 and rest[0] == "api":
        return group_version_document("", rest[1])
    if len(rest) == 3 and rest[0] == "apis":
        return group_version_document(rest[1], rest[2])
    return None
