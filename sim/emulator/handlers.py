"""The HTTP shell of the API server emulator: parse the request (``sim.emulator.requestinfo``), run
admission, call the registry, render the answer (JSON object, Table, PartialObjectMetadata or Status).
No semantics live here."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sim.emulator import errors, listoptions, openapi, patch, podactions, tokens
from sim.emulator.admission import Attributes, GroupVersionKind, Operation
from sim.emulator.errors import ApiError
from sim.emulator.listoptions import ListOptions
from sim.emulator.registry import Registry, StaleRead
from sim.emulator.render import error_response, json_response, negotiate, render_list, render_object
from sim.emulator.requestinfo import (
    delete_options_of,
    dry_run_of,
    field_validation_of,
    int_param,
    options_of,
    read_body,
    selectors,
    user_of,
    verb_of,
)
from sim.emulator.resources import (
    DiscoveryPath,
    ResourcePath,
    ResourceType,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    builtin,
    parse_path,
    version_info,
)
from sim.emulator.state import STATE, ApiState
from sim.emulator.watch import serve_watch
from stagger.objects import Obj

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- handlers


async def handle(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    state.request_total += 1
    try:
        target = parse_path(request.path)
        if isinstance(target, DiscoveryPath):
            state.request_counts[("get", "discovery")] += 1
            return discovery(request, target)
        if target is None:
            state.request_counts[(request.method.lower(), "unknown")] += 1
            raise errors.path_not_found()
        verb = verb_of(request.method, target, request.query)
        resource = target.rtype.name + (f"/{target.subresource}" if target.subresource else "")
        state.request_counts[(verb, resource)] += 1
        handler = _HANDLERS.get(verb)
        if handler is None or (verb not in target.rtype.verbs and not target.subresource):
            raise errors.method_not_allowed()
        return await handler(request, state, target)
    except ApiError as err:
        return error_response(err)


def discovery(request: web.Request, target: DiscoveryPath) -> web.Response:
    if request.method != "GET":
        raise errors.method_not_allowed()
    if target.kind == "health":
        return web.Response(text="ok")
    if target.kind == "version":
        return json_response(version_info(request.app[STATE].settings.kubernetes_version))
    if target.kind == "openapi":
        document = openapi.document_for_path(request.path)
        if document is None:
            raise errors.path_not_found()
        return json_response(document)
    if target.kind == "openid-configuration":
        return _openid_response(request, tokens.openid_configuration(), content_type="application/json")
    if target.kind == "jwks":
        return _openid_response(
            request, request.app[STATE].signer.jwks(), content_type=tokens.JWKS_MEDIA_TYPE
        )
    if target.kind == "api":
        return json_response(api_versions(f"{request.url.host}:{request.url.port}"))
    if target.kind == "apis":
        return json_response(api_group_list())
    found = (
        api_group(target.group) if target.kind == "group" else api_resource_list(target.group, target.version)
    )
    if found is None:
        raise errors.path_not_found()
    return json_response(found)


def _accepts(accept: str, media_type: str) -> bool:
    """go-restful's check of a route's one `Produces` type against the Accept header (none: anything)."""
    if not accept.strip():
        return True
    kind = media_type.split("/")[0]
    ranges = {part.split(";")[0].strip() for part in accept.split(",")}
    return bool(ranges & {media_type, "*/*", f"{kind}/*"})


def _openid_response(request: web.Request, body: Obj, *, content_type: str) -> web.Response:
    """routes/openidmetadata.go's answer: its own media type, and cacheable for an hour (it overrides the
    API server's `private, no-cache`) since the keys of a static key file do not change. A go-restful
    route, so an Accept header that does not allow its type gets go-restful's plain-text 406 (a real
    kube-apiserver answers `Accept: application/json` for the keys so)."""
    if not _accepts(request.headers.get("Accept", ""), content_type):
        return web.Response(
            status=406,
            text=f"406: Not Acceptable\n\nAvailable representations: {content_type}",
            content_type="text/plain",
        )
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type=content_type,
        headers={"Cache-Control": "public, max-age=3600"},
    )


def _namespace_of(target: ResourcePath) -> str:
    return (target.namespace or "") if target.rtype.namespaced else ""


async def get_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource not in ("", "status"):
        raise errors.method_not_allowed()
    assert target.name is not None
    obj = state.registry.get(target.rtype, _namespace_of(target), target.name)
    rendering = negotiate(request.headers.get("Accept", ""), request.query.get("includeObject", ""))
    return json_response(render_object(target.rtype, obj, rendering, now=time.time()))


async def list_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource:
        raise errors.method_not_allowed()
    options = ListOptions.parse(request.query, limit=max(0, int_param(request.query, "limit") or 0))
    listoptions.validate(options, watch=False)
    labels, fields = selectors(target.rtype, request.query)
    listed = state.registry.list_objects(
        target.rtype,
        namespace=target.namespace if target.rtype.namespaced else None,
        labels=labels,
        fields=fields,
        limit=options.limit,
        continue_token=options.continue_token,
        at_rv=listoptions.list_version(options, current=state.store.rv),
    )
    rendering = negotiate(request.headers.get("Accept", ""), request.query.get("includeObject", ""))
    return json_response(render_list(target.rtype, listed, rendering, now=time.time()))


async def watch_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource:
        raise errors.method_not_allowed()
    listoptions.validate(ListOptions.parse(request.query, limit=0), watch=True)
    labels, fields = selectors(target.rtype, request.query)
    rendering = negotiate(request.headers.get("Accept", ""), request.query.get("includeObject", ""))
    return await serve_watch(
        request,
        state,
        target,
        predicate=state.registry.predicate(target.rtype, labels, fields),
        render=lambda obj: render_object(
            target.rtype, state.registry.to_view(target.rtype, obj), rendering, now=time.time()
        ),
        view=f"{target.rtype.api_version}:{rendering.mode}:{rendering.include}",
    )


def _gvk(rtype: ResourceType) -> GroupVersionKind:
    return {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}


async def _admit(
    request: web.Request,
    state: ApiState,
    *,
    operation: Operation,
    rtype: ResourceType,
    subresource: str = "",
    kind: GroupVersionKind | None = None,
    namespace: str,
    name: str,
    obj: Obj | None,
    old: Obj | None,
    options: Obj,
    dry_run: bool,
) -> tuple[Obj | None, tuple[str, ...]]:
    configurations = list(
        state.store.objects(
            builtin("admissionregistration.k8s.io", "mutatingwebhookconfigurations").storage_key
        )
    )
    if not configurations or state.dispatcher is None:
        return obj, ()
    attrs = Attributes(
        operation=operation,
        rtype=rtype,
        subresource=subresource,
        kind=kind or _gvk(rtype),
        namespace=namespace,
        name=name,
        obj=obj,
        old=old,
        options=options,
        dry_run=dry_run,
        user=user_of(request),
    )
    labels = state.registry.namespace_labels(namespace) if namespace else None
    return await state.dispatcher.admit(attrs, configurations=configurations, namespace_labels=labels)


async def create_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource == "eviction":
        return await _evict(request, state, target)
    if target.subresource == "binding":
        return await _bind(request, state, target)
    if target.subresource == "token":
        return await _request_token(request, state, target)
    if target.name is not None or target.subresource:
        raise errors.method_not_allowed()
    if target.rtype.kind == "TokenReview":
        return await _review_token(request, state, target)
    if target.rtype.namespaced and target.namespace is None:
        raise errors.method_not_allowed()
    return await _create(request, state, target, await read_body(request))


async def _create(
    request: web.Request, state: ApiState, target: ResourcePath, body: Any
) -> web.StreamResponse:
    """POST, or a PUT to a missing object of a kind whose strategy allows create on update (name set)."""
    rtype = target.rtype
    dry_run = dry_run_of(request)
    decoded = state.registry.decode(
        rtype,
        body,
        namespace=target.namespace,
        name=target.name,
        create=True,
        field_validation=field_validation_of(request),
    )
    metadata = decoded.obj["metadata"]
    if target.name is not None:
        metadata.pop("resourceVersion", None)  # a PUT's precondition has nothing to hold against
    obj, warnings = await _admit(
        request,
        state,
        operation="CREATE",
        rtype=rtype,
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        obj=decoded.obj,
        old=None,
        options=options_of("CreateOptions", request),
        dry_run=dry_run,
    )
    assert obj is not None
    created = state.registry.create(
        rtype,
        obj,
        now=time.time(),
        dry_run=dry_run,
        schema_errors=decoded.schema_errors if obj is decoded.obj else None,
    )
    return json_response(created, status=201, warnings=decoded.warnings + warnings)


async def _update(
    request: web.Request,
    state: ApiState,
    target: ResourcePath,
    compute: Callable[[Obj], Obj],
    *,
    warnings: tuple[str, ...] = (),
) -> web.StreamResponse:
    """The GuaranteedUpdate loop: read, compute the new object, admit, write if nothing changed meanwhile."""
    rtype, name = target.rtype, target.name
    assert name is not None
    namespace = _namespace_of(target)
    dry_run = dry_run_of(request)
    for _ in range(max(1, state.settings.update_retries)):
        current = state.registry.get(rtype, namespace, name)
        decoded = state.registry.decode(
            rtype,
            compute(current),
            namespace=namespace if rtype.namespaced else None,
            name=name,
            create=False,
            field_validation=field_validation_of(request),
        )
        obj, admit_warnings = await _admit(
            request,
            state,
            operation="UPDATE",
            rtype=rtype,
            subresource=target.subresource,
            namespace=namespace,
            name=name,
            obj=decoded.obj,
            old=current,
            options=options_of("UpdateOptions", request),
            dry_run=dry_run,
        )
        assert obj is not None
        try:
            updated = state.registry.update(
                rtype,
                obj,
                base=current,
                subresource=target.subresource,
                now=time.time(),
                dry_run=dry_run,
                schema_errors=decoded.schema_errors if obj is decoded.obj else None,
            )
        except StaleRead:
            continue
        return json_response(updated, warnings=warnings + decoded.warnings + admit_warnings)
    raise errors.conflict(rtype.group, rtype.name, name, errors.MODIFIED_CONFLICT)


async def update_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource not in ("", "status"):
        raise errors.method_not_allowed()
    body = await read_body(request)
    body_name = ((body.get("metadata") or {}) if isinstance(body, dict) else {}).get("name")
    if body_name and body_name != target.name:
        # Checked before the object is read, as the real update handler does.
        raise errors.bad_request(
            f"the name of the object ({body_name}) does not match the name on the URL ({target.name})"
        )
    if target.rtype.create_on_update and not target.subresource:
        assert target.name is not None
        try:
            state.registry.get(target.rtype, _namespace_of(target), target.name)
        except ApiError as err:
            if err.code != 404:
                raise
            # The strategy's AllowCreateOnUpdate (leases, events): the PUT creates the object.
            return await _create(request, state, target, body)
    return await _update(request, state, target, lambda current: body)


async def patch_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource not in ("", "status"):
        raise errors.method_not_allowed()
    content_type = request.headers.get("Content-Type", "")
    if content_type.split(";")[0].strip() not in patch.SUPPORTED:
        raise errors.unsupported_patch_type()
    raw = await request.read()
    rtype = target.rtype

    def compute(current: Obj) -> Obj:
        patched = patch.apply_patch(
            content_type, current, raw, schemas=state.schemas, definition=rtype.schema
        )
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch produced something that is not an object")
        return patched

    return await _update(request, state, target, compute)


async def delete_handler(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    if target.subresource:
        raise errors.method_not_allowed()
    assert target.name is not None
    options = delete_options_of(request, await read_body(request))
    return await _delete_one(request, state, target.rtype, _namespace_of(target), target.name, options)


async def _delete_one(
    request: web.Request, state: ApiState, rtype: ResourceType, namespace: str, name: str, options: Obj
) -> web.Response:
    dry_run = dry_run_of(request)
    current = state.registry.get(rtype, namespace, name)
    _, warnings = await _admit(
        request,
        state,
        operation="DELETE",
        rtype=rtype,
        namespace=namespace,
        name=name,
        obj=None,
        old=current,
        options={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **options},
        dry_run=dry_run,
    )
    status, body = state.registry.delete(rtype, namespace, name, options, now=time.time(), dry_run=dry_run)
    return json_response(body, status=status, warnings=warnings)


async def deletecollection_handler(
    request: web.Request, state: ApiState, target: ResourcePath
) -> web.StreamResponse:
    if target.subresource:
        raise errors.method_not_allowed()
    rtype = target.rtype
    labels, fields = selectors(rtype, request.query)
    options = delete_options_of(request, await read_body(request))
    listed = state.registry.list_objects(
        rtype, namespace=target.namespace if rtype.namespaced else None, labels=labels, fields=fields
    )
    deleted: list[Obj] = []
    for obj in listed["items"]:
        metadata = obj["metadata"]
        try:
            await _delete_one(
                request, state, rtype, metadata.get("namespace", ""), metadata["name"], dict(options)
            )
        except ApiError as err:
            if err.code != 404:
                raise
        deleted.append(obj)
    return json_response({**listed, "items": deleted})


async def _pod_action(
    request: web.Request,
    state: ApiState,
    target: ResourcePath,
    *,
    subresource: str,
    kind: GroupVersionKind,
    action: Callable[..., Obj | errors.Status],
    check_exists: bool,
) -> web.StreamResponse:
    """POST pods/NAME/eviction, pods/NAME/binding and serviceaccounts/NAME/token: admission on the
    subresource, then the action."""
    assert target.name is not None
    namespace = _namespace_of(target)
    body = await read_body(request)
    if not isinstance(body, dict):
        api_version = f"{kind['group']}/{kind['version']}" if kind["group"] else kind["version"]
        raise errors.bad_request(f"the body must be a {api_version} {kind['kind']}")
    if check_exists:
        state.registry.get(target.rtype, namespace, target.name)  # 404 before admission, as the real handler
    dry_run = dry_run_of(request)
    admitted, warnings = await _admit(
        request,
        state,
        operation="CREATE",
        rtype=target.rtype,
        subresource=subresource,
        kind=kind,
        namespace=namespace,
        name=target.name,
        obj=body,
        old=None,
        options=options_of("CreateOptions", request),
        dry_run=dry_run,
    )
    status = action(
        state.registry, namespace, target.name, admitted or body, now=time.time(), dry_run=dry_run
    )
    return json_response(status, status=201, warnings=warnings)


async def _evict(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    return await _pod_action(
        request,
        state,
        target,
        subresource="eviction",
        kind={"group": "policy", "version": "v1", "kind": "Eviction"},
        action=podactions.evict,
        check_exists=True,
    )


async def _bind(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    return await _pod_action(
        request,
        state,
        target,
        subresource="binding",
        kind={"group": "", "version": "v1", "kind": "Binding"},
        action=podactions.bind,
        check_exists=False,
    )


async def _request_token(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    def issue(registry: Registry, namespace: str, name: str, body: Obj, *, now: float, dry_run: bool) -> Obj:
        # On the token clock (settings.token_clock); a dry run answers a token too: TokenREST stores nothing.
        del now, dry_run
        clock = state.settings.token_clock()
        return tokens.request_token(
            registry, state.signer, namespace=namespace, name=name, body=body, now=clock
        )

    kind: GroupVersionKind = {"group": tokens.GROUP, "version": tokens.VERSION, "kind": "TokenRequest"}
    return await _pod_action(
        request, state, target, subresource="token", kind=kind, action=issue, check_exists=False
    )


async def _review_token(request: web.Request, state: ApiState, target: ResourcePath) -> web.StreamResponse:
    """POST tokenreviews: admitted like any create, answered and never stored."""
    body = tokens.typed_body(await read_body(request), "TokenReview")
    admitted, warnings = await _admit(
        request,
        state,
        operation="CREATE",
        rtype=target.rtype,
        namespace="",
        name="",
        obj=body,
        old=None,
        options=options_of("CreateOptions", request),
        dry_run=dry_run_of(request),
    )
    review = tokens.review_token(
        state.registry, state.signer, admitted or body, now=state.settings.token_clock()
    )
    return json_response(review, status=201, warnings=warnings)


_HANDLERS: dict[str, Callable[[web.Request, ApiState, ResourcePath], Awaitable[web.StreamResponse]]] = {
    "get": get_handler,
    "list": list_handler,
    "watch": watch_handler,
    "create": create_handler,
    "update": update_handler,
    "patch": patch_handler,
    "delete": delete_handler,
    "deletecollection": deletecollection_handler,
}
