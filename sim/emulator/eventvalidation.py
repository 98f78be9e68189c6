"""Event validation, as pkg/apis/core/validation/events.go (v1.36) does it: on the core form of the event
(field paths use core names: involvedObject, message, count, source ...), with rules that depend on the
API version of the request.

* Every version (legacyValidateEvent): without eventTime, involvedObject.namespace must match the
  event's namespace; with eventTime, reportingController (called reportingComponent in core/v1),
  reportingInstance, action and reason are required, with length limits.
* events.k8s.io/v1 also (ValidateEventCreate): ObjectMeta, eventTime required, type Normal or
  Warning, the deprecated fields unset, series.count >= 2 with lastObservedTime; on update most fields
  are immutable (ValidateEventUpdate).
"""

from __future__ import annotations

from typing import Any

from sim.emulator.errors import FieldError
from sim.emulator.names import dns1123_subdomain_problems, label_value_problems, qualified_name_problems
from sim.emulator.strategy import event_to_core, prune_nulls
from stagger.objects import Obj

REPORTING_INSTANCE_LIMIT = 128
ACTION_LIMIT = 128
REASON_LIMIT = 128
NOTE_LIMIT = 1024
# ValidateEventUpdate's immutable fields, in its order (reason is checked twice there, so it is here).
_IMMUTABLE = (
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "reason",
    "type",
)
_IMMUTABLE_AFTER_TIME = ("action", "related", "reportingComponent", "reportingInstance")


def _invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, detail, value)


def _legacy_errors(event: Obj, *, core: bool) -> list[FieldError]:
    """legacyValidateEvent, on the core form (`core`: the request came to the core/v1 API)."""
    errors: list[FieldError] = []
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    involved_ns = (event.get("involvedObject") or {}).get("namespace") or ""
    if not event.get("eventTime"):
        if (not involved_ns and namespace not in ("", "default")) or (
            involved_ns and namespace != involved_ns
        ):
            errors.append(_invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errors.append(_invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
        controller_field = "reportingComponent" if core else "reportingController"
        controller = event.get("reportingComponent") or ""
        if not controller:
            errors.append(FieldError("FieldValueRequired", controller_field))
        errors.extend(_invalid(controller_field, controller, p) for p in qualified_name_problems(controller))
        for path, limit in (("reportingInstance", REPORTING_INSTANCE_LIMIT), ("action", ACTION_LIMIT)):
            errors.extend(_required_within(path, event.get(path) or "", limit))
        errors.extend(_required_within("reason", event.get("reason") or "", REASON_LIMIT))
        if len(event.get("message") or "") > NOTE_LIMIT:
            errors.append(_invalid("message", "", f"can have at most {NOTE_LIMIT} characters"))
    errors.extend(_invalid("namespace", namespace, p) for p in dns1123_subdomain_problems(namespace))
    return errors


def _required_within(path: str, value: str, limit: int) -> list[FieldError]:
    if not value:
        return [FieldError("FieldValueRequired", path)]
    if len(value) > limit:
        return [_invalid(path, "", f"can have at most {limit} characters")]
    return []


def _object_meta_errors(event: Obj) -> list[FieldError]:
    """ValidateObjectMeta with NameIsDNSSubdomain (events.k8s.io/v1 only)."""
    metadata = event.get("metadata") or {}
    errors: list[FieldError] = []
    name = metadata.get("name") or ""
    if not name:
        errors.append(FieldError("FieldValueRequired", "metadata.name", "name or generateName is required"))
    else:
        errors.extend(_invalid("metadata.name", name, p) for p in dns1123_subdomain_problems(name))
    for key, value in (metadata.get("labels") or {}).items():
        errors.extend(_invalid("metadata.labels", key, p) for p in qualified_name_problems(key))
        errors.extend(_invalid("metadata.labels", value, p) for p in label_value_problems(str(value)))
    for key in metadata.get("annotations") or {}:
        errors.extend(_invalid("metadata.annotations", key, p) for p in qualified_name_problems(key.lower()))
    return errors


def _series_errors(event: Obj) -> list[FieldError]:
    series = event.get("series")
    if not isinstance(series, dict):
        return []
    errors: list[FieldError] = []
    if (series.get("count") or 0) < 2:
        errors.append(_invalid("series.count", "", "should be at least 2"))
    if not series.get("lastObservedTime"):
        errors.append(FieldError("FieldValueRequired", "series.lastObservedTime"))
    return errors


def _strict_errors(event: Obj) -> list[FieldError]:
    """ValidateEventCreate's rules for events.k8s.io/v1 beyond the legacy ones."""
    errors = _object_meta_errors(event) + _series_errors(event)
    if not event.get("eventTime"):
        errors.append(FieldError("FieldValueRequired", "eventTime"))
    kind = event.get("type") or ""
    if kind not in ("Normal", "Warning"):
        errors.append(_invalid("type", "", f"has invalid value: {kind}"))
    for path in ("firstTimestamp", "lastTimestamp"):
        if event.get(path):
            errors.append(_invalid(path, "", "needs to be unset"))
    if event.get("count"):
        errors.append(_invalid("count", "", "needs to be unset"))
    source = event.get("source") or {}
    if source.get("component") or source.get("host"):
        errors.append(_invalid("source", "", "needs to be unset"))
    return errors


def validate_event(event: Obj, *, new_api: bool) -> list[FieldError]:
    """ValidateEventCreate. `event` is in the request's version; `new_api`: it came to events.k8s.io/v1."""
    core = event_to_core(event) if new_api else event
    errors = _legacy_errors(core, core=not new_api)
    if new_api:
        errors.extend(_strict_errors(core))
    return errors


def validate_event_update(new: Obj, old: Obj, *, new_api: bool) -> list[FieldError]:
    """ValidateEventUpdate: the legacy rules, and for events.k8s.io/v1 the immutable fields."""
    new_core = event_to_core(new) if new_api else new
    old_core = event_to_core(old) if new_api else old
    errors = _legacy_errors(new_core, core=not new_api)
    if not new_api:
        return errors
    if prune_nulls(new_core.get("series")) != prune_nulls(old_core.get("series")):
        errors.extend(_series_errors(new_core))
    for path in _IMMUTABLE:
        errors.extend(_immutable(new_core, old_core, path))
    if (new_core.get("eventTime") or "")[:26] != (old_core.get("eventTime") or "")[:26]:
        errors.extend(_immutable(new_core, old_core, "eventTime"))
    for path in _IMMUTABLE_AFTER_TIME:
        shown = "reportingController" if path == "reportingComponent" else path
        errors.extend(_immutable(new_core, old_core, path, shown=shown))
    return errors


def _immutable(new: Obj, old: Obj, key: str, *, shown: str = "") -> list[FieldError]:
    """ValidateImmutableField. The real value is Go's rendering of the internal type; the emulator shows
    the JSON of the field (the same for strings and numbers)."""
    value, before = prune_nulls(new.get(key)), prune_nulls(old.get(key))
    if (value or None) == (before or None):
        return []
    return [_invalid(shown or key, value if value is not None else "", "field is immutable")]
