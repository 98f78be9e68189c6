"""What an API request asks, read from its headers, query and body (as the real server's request info
and option decoding): the user, the verb, integer parameters, selectors, the body, dry run, field
validation and the options admission sees. ``sim.emulator.handlers`` serves the request."""

from __future__ import annotations

import json
from typing import Any

import yaml
from aiohttp import web

from sim.emulator import errors
from sim.emulator.admission import UserInfo
from sim.emulator.registry import FieldValidation
from sim.emulator.resources import ResourcePath, ResourceType
from sim.emulator.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from stagger.objects import Obj


def user_of(request: web.Request) -> UserInfo:
    """The emulator has no authentication: the bearer token (or Impersonate-User) names the user."""
    impersonated = request.headers.get("Impersonate-User")
    if impersonated:
        return {"username": impersonated, "groups": ["system:authenticated"]}
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer ") and auth[7:].strip():
        return {"username": auth[7:].strip(), "groups": ["system:authenticated"]}
    return {"username": "system:anonymous", "groups": ["system:unauthenticated"]}


def verb_of(method: str, target: ResourcePath, query: Any) -> str:
    if method == "GET":
        if target.name is not None:
            return "get"
        return "watch" if target.legacy_watch or query.get("watch") in ("true", "1") else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if target.name is not None else "deletecollection",
    }.get(method, method.lower())


def int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError as err:
        raise errors.bad_request(f'invalid value for {name}: "{raw}" is not an integer') from err


def selectors(rtype: ResourceType, query: Any) -> tuple[LabelSelector, FieldSelector]:
    try:
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""), supported=rtype.field_labels)
    except SelectorError as err:
        raise errors.bad_request(str(err)) from err
    return labels, fields


async def read_body(request: web.Request) -> Any:
    """The request's JSON or YAML body (no Content-Type: JSON, as the real server assumes)."""
    raw = await request.read()
    header = request.headers.get("Content-Type")
    content_type = (request.content_type if header else "application/json").lower()
    if content_type not in ("application/json", "application/yaml"):
        raise errors.unsupported_media_type()
    if not raw:
        return None
    if content_type == "application/yaml":
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise errors.bad_request(f"error converting YAML to JSON: {err}") from err
    try:
        return json.loads(raw)
    except ValueError as err:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {err}") from err


def dry_run_of(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    unknown = [v for v in values if v != "All"]
    if unknown:
        raise errors.bad_request(f'dryRun: Unsupported value: "{unknown[0]}": supported values: "All"')
    return bool(values)


def field_validation_of(request: web.Request) -> FieldValidation:
    value = request.query.get("fieldValidation", "") or "Warn"
    if value not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{value}": supported values: "Ignore", "Strict", "Warn"'
        )
    return value  # type: ignore[return-value]


def options_of(kind: str, request: web.Request, extra: Obj | None = None) -> Obj:
    options: Obj = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if request.query.get("fieldManager"):
        options["fieldManager"] = request.query["fieldManager"]
    if request.query.getall("dryRun", []):
        options["dryRun"] = request.query.getall("dryRun")
    options.update(extra or {})
    return options


def delete_options_of(request: web.Request, body: Any) -> Obj:
    options: Obj = dict(body) if isinstance(body, dict) else {}
    grace = int_param(request.query, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    for name in ("propagationPolicy", "orphanDependents"):
        if request.query.get(name):
            options[name] = request.query[name]
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
        raise errors.bad_request(
            f'propagationPolicy: Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"'
        )
    return options
