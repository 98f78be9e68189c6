"""Kubernetes `Status` errors, shaped exactly like the real API server's (k8s.io/apimachinery/pkg/api/errors).

Each constructor mirrors one `errors.NewXxx` helper: same `reason`, `code`, `message` wording and
`details` (note that for NotFound/AlreadyExists/Conflict/Forbidden `details.kind` is the *resource*
name, e.g. "pods", while for Invalid it is the Kind, e.g. "Pod" — the real server does the same).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict


class StatusCause(TypedDict, total=False):
    reason: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    uid: str
    causes: list[StatusCause]
    retryAfterSeconds: int


class Status(TypedDict):
    kind: Literal["Status"]
    apiVersion: Literal["v1"]
    metadata: dict[str, Any]
    status: Literal["Success", "Failure"]
    message: NotRequired[str]
    reason: NotRequired[str]
    details: NotRequired[StatusDetails]
    code: NotRequired[int]


class ApiError(Exception):
    """An error answered to the client as a `Status` object with `status.code` as the HTTP status."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.get("message", ""))
        self.status = status

    @property
    def code(self) -> int:
        return self.status["code"]

    @property
    def reason(self) -> str:
        return self.status.get("reason", "")


def failure(*, code: int, reason: str, message: str, details: StatusDetails | None = None) -> Status:
    status: Status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = details
    return status


def failure_without_reason(*, code: int, message: str) -> Status:
    """A Failure Status made from a plain Go error (no reason, no details), as the watch path answers a
    version it cannot parse."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    }


def success(*, code: int | None, details: StatusDetails | None = None) -> Status:
    """A Success Status; `code=None` leaves it out, as the generic store's DELETE answer does
    (k8s.io/apiserver/pkg/registry/generic/registry/store.go: Status{Status: Success, Details: ...})."""
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if code is not None:
        status["code"] = code
    if details is not None:
        status["details"] = details
    return status  # type: ignore[return-value]


def qualified(group: str, name: str) -> str:
    """`pods`, `deployments.apps`: how the real server names a group resource or group kind in messages."""
    return f"{name}.{group}" if group else name


def _resource_details(group: str, resource: str, name: str) -> StatusDetails:
    details: StatusDetails = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        failure(
            code=404,
            reason="NotFound",
            message=f'{qualified(group, resource)} "{name}" not found',
            details=_resource_details(group, resource, name),
        )
    )


def path_not_found() -> ApiError:
    return ApiError(
        failure(
            code=404,
            reason="NotFound",
            message="the server could not find the requested resource",
            details={},
        )
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        failure(
            code=409,
            reason="AlreadyExists",
            message=f'{qualified(group, resource)} "{name}" already exists',
            details=_resource_details(group, resource, name),
        )
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        failure(
            code=409,
            reason="Conflict",
            message=f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}',
            details=_resource_details(group, resource, name),
        )
    )


MODIFIED_CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def forbidden(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        failure(
            code=403,
            reason="Forbidden",
            message=f'{qualified(group, resource)} "{name}" is forbidden: {why}',
            details=_resource_details(group, resource, name),
        )
    )


def bad_request(message: str) -> ApiError:
    return ApiError(failure(code=400, reason="BadRequest", message=message))


def method_not_allowed() -> ApiError:
    return ApiError(
        failure(
            code=405,
            reason="MethodNotAllowed",
            message="the server does not allow this method on the requested resource",
            details={},
        )
    )


# What the real server's body decoding accepts (its protobuf included, which the emulator does not decode).
BODY_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def unsupported_media_type() -> ApiError:
    """A body in a format the server does not decode (apiserver's negotiation errUnsupportedMediaType)."""
    return ApiError(
        failure(
            code=415,
            reason="UnsupportedMediaType",
            message="the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(BODY_MEDIA_TYPES),
        )
    )


def unsupported_patch_type() -> ApiError:
    """A PATCH whose Content-Type is no patch type (handlers/patch.go: NewGenericServerResponse(415))."""
    return ApiError(
        failure(code=415, reason="UnsupportedMediaType", message="415: Unsupported Media Type", details={})
    )


def expired(message: str, *, continue_token: str = "") -> ApiError:
    status = failure(code=410, reason="Expired", message=message)
    if continue_token:
        status["metadata"] = {"continue": continue_token}
    return ApiError(status)


LIST_TOO_OLD = "The resourceVersion for the provided list is too old."
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def too_many_requests(message: str, *, causes: list[StatusCause], retry_after: int = 0) -> ApiError:
    details: StatusDetails = {"causes": causes}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(failure(code=429, reason="TooManyRequests", message=message, details=details))


def internal_error(message: str) -> ApiError:
    return ApiError(
        failure(
            code=500,
            reason="InternalError",
            message=f"Internal error occurred: {message}",
            details={"causes": [{"message": message}]},
        )
    )


class _Omit:
    """field.OmitValueType: an error printed without its value ("Invalid value: detail")."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: `kind` is the Go ErrorType's string (FieldValueRequired, FieldValueInvalid, ...).
    `value=OMIT` prints no value, as field.OmitValueType does."""

    kind: Literal[
        "FieldValueRequired",
        "FieldValueInvalid",
        "FieldValueForbidden",
        "FieldValueNotSupported",
        "FieldValueDuplicate",
        "FieldValueTypeInvalid",
        "FieldValueTooLong",
        "FieldValueTooMany",
    ]
    field: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    def body(self) -> str:
        """The text after `field: `, as `field.Error.ErrorBody()` writes it."""
        if self.kind == "FieldValueRequired":
            head = "Required value"
        elif self.kind == "FieldValueForbidden":
            head = "Forbidden"
        elif self.kind == "FieldValueDuplicate":
            head = f"Duplicate value: {_go_value(self.value)}"
        elif self.kind == "FieldValueNotSupported":
            head = f"Unsupported value: {_go_value(self.value)}"
            if self.supported:
                head += ": supported values: " + ", ".join(f'"{s}"' for s in self.supported)
        elif self.kind == "FieldValueTooLong":
            head = "Too long"
        elif self.value is OMIT:
            head = "Too many" if self.kind == "FieldValueTooMany" else "Invalid value"
        elif self.kind == "FieldValueTooMany":
            head = f"Too many: {_go_value(self.value)}"
        else:
            head = f"Invalid value: {_go_value(self.value)}"
        return f"{head}: {self.detail}" if self.detail else head

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


class GoRendered(str):
    """A bad value already printed as the real server prints it (e.g. an internal Go struct)."""


def _go_value(value: Any) -> str:
    if isinstance(value, GoRendered):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def invalid(group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """errors.NewInvalid: each distinct error once, as a cause and in the message (in brackets when there
    are several). field.ErrorList.ToAggregate drops repeats from the message; since v1.37 every built-in
    strategy also runs declarative validation, whose ErrorList.Filter goes through ToAggregate, so the
    causes lose them too (v1.36 listed a repeated check's error twice there)."""
    first: dict[str, FieldError] = {}
    for error in errors:
        first.setdefault(str(error), error)
    distinct_errors = list(first.values())
    causes: list[StatusCause] = [
        {"reason": e.kind, "message": e.body(), "field": e.field} for e in distinct_errors
    ]
    distinct = [str(e) for e in distinct_errors]
    summary = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    details: StatusDetails = {"name": name} if name else {}  # omitempty: ListOptions have no name
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(
        failure(
            code=422,
            reason="Invalid",
            message=f'{qualified(group, kind)} "{name}" is invalid: {summary}',
            details=details,
        )
    )
