"""PATCH bodies: JSON patch (RFC 6902, via `jsonpatch`), JSON merge patch (RFC 7386) and Kubernetes
strategic merge patch, driven by the OpenAPI `x-kubernetes-patch-strategy` /
`x-kubernetes-patch-merge-key` annotations as the real server's patcher is.

Strategic merge patch, as implemented: maps merge recursively and `null` deletes a key; a list whose
field has strategy `merge` merges its items by the merge key (`name` for containers, env, volumes...,
`containerPort` for ports, `type` for conditions), a list of scalars with strategy `merge` (finalizers)
is a union; other lists are replaced. Directives: `$patch: replace|delete|merge` on maps and list
items, `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
Server-side apply is not emulated (415).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from sim.emulator import errors
from sim.emulator.schema import Node, Schemas

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
SUPPORTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

_DELETE = object()  # a map carried `$patch: delete`


class PatchError(ValueError):
    pass


def _load(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as err:
        raise errors.bad_request(f"error decoding patch: {err}") from err


def apply_patch(
    content_type: str, original: dict[str, Any], body: bytes, *, schemas: Schemas, definition: str
) -> Any:
    """The patched object (not yet decoded/validated). ApiError 400/415/422 like the real server."""
    content_type = content_type.split(";")[0].strip().lower()
    if content_type == JSON_PATCH:
        operations = _load(body)
        if not isinstance(operations, list):
            raise errors.bad_request(
                f"error decoding patch: json: cannot unmarshal {_json_kind(operations)} into Go value of type "
                "[]handlers.jsonPatchOp"
            )
        try:
            return jsonpatch.apply_patch(original, operations)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as err:
            # handlers/patch.go applyJSPatch: NewGenericServerResponse(422), the cause not shown.
            raise unprocessable(GENERIC_422) from err
    if content_type == MERGE_PATCH:
        patch = _load(body)
        if not isinstance(patch, dict):
            raise errors.bad_request(f"error decoding patch: {_not_a_map(patch)}")
        return merge_patch(original, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        patch = _load(body)
        if not isinstance(patch, dict):
            raise errors.bad_request(_not_a_map(patch))
        try:
            return strategic_merge_patch(original, patch, schemas=schemas, node=schemas.root(definition))
        except PatchError as err:
            raise unprocessable(str(err)) from err
    raise errors.unsupported_patch_type()


GENERIC_422 = "the server rejected our request due to an error in our request"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def _not_a_map(value: Any) -> str:
    return f"json: cannot unmarshal {_json_kind(value)} into Go value of type map[string]interface {{}}"


def unprocessable(message: str) -> errors.ApiError:
    return errors.ApiError(errors.failure(code=422, reason="Invalid", message=message, details={}))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(
    original: dict[str, Any], patch: dict[str, Any], *, schemas: Schemas, node: Node | None
) -> Any:
    merged = _merge_map(copy.deepcopy(original), patch, schemas, node)
    return {} if merged is _DELETE else merged


def _strip(value: Any, schemas: Schemas, node: Node | None) -> Any:
    """A patch value with nothing to merge into: directives removed, nested maps/lists handled."""
    if isinstance(value, dict):
        merged = _merge_map({}, value, schemas, node)
        return {} if merged is _DELETE else merged
    if isinstance(value, list):
        return _merge_list([], value, schemas, node)
    return value


def _merge_map(original: dict[str, Any], patch: dict[str, Any], schemas: Schemas, node: Node | None) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {
            k: _strip(v, schemas, schemas.field(node, k)) for k, v in patch.items() if not k.startswith("$")
        }
    if directive not in (None, "merge"):
        raise PatchError(f"Unknown patch type: {directive} in map: {patch}")
    result = dict(original)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.partition("/")[2]] = list(value or [])
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            target = key.partition("/")[2]
            result[target] = [x for x in result.get(target) or [] if x not in (value or [])]
            continue
        child = schemas.field(node, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            base = result.get(key)
            merged = _merge_map(base if isinstance(base, dict) else {}, value, schemas, child)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            base = result.get(key)
            result[key] = _merge_list(base if isinstance(base, list) else [], value, schemas, child)
        else:
            result[key] = value
    for key, order in orders.items():
        child = schemas.field(node, key)
        merge_key = (child or {}).get("x-kubernetes-patch-merge-key")
        if isinstance(result.get(key), list):
            result[key] = _reorder(result[key], order, merge_key)
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or [])
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _reorder(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        return json.dumps(
            item.get(merge_key) if merge_key and isinstance(item, dict) else item, sort_keys=True
        )

    wanted = [ident(o) for o in order]
    placed = [next(i for i in items if ident(i) == w) for w in wanted if any(ident(i) == w for i in items)]
    return placed + [i for i in items if ident(i) not in wanted]


def _merge_list(original: list[Any], patch: list[Any], schemas: Schemas, node: Node | None) -> list[Any]:
    strategy = str((node or {}).get("x-kubernetes-patch-strategy") or "")
    items_node = schemas.items(node)
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [
            _strip(x, schemas, items_node)
            for x in patch
            if not (isinstance(x, dict) and x.get("$patch") == "replace")
        ]
    if "merge" not in strategy.split(","):
        return [_strip(x, schemas, items_node) for x in patch]
    merge_key = (node or {}).get("x-kubernetes-patch-merge-key")
    if not merge_key:
        result = list(original)
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    result = list(original)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}")
        if merge_key not in item:
            raise PatchError(f"map: {json.dumps(item)} does not contain declared merge key: {merge_key}")
        matches = [
            i
            for i, existing in enumerate(result)
            if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
        ]
        if item.get("$patch") == "delete":
            result = [existing for i, existing in enumerate(result) if i not in matches]
            continue
        if matches:
            merged = _merge_map(result[matches[0]], item, schemas, items_node)
            if merged is _DELETE:
                result.pop(matches[0])
            else:
                result[matches[0]] = merged
        else:
            result.append(_strip(item, schemas, items_node))
    return result
