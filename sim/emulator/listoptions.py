"""List and watch options: which state a list reads, and the checks the real server makes first.

* k8s.io/apimachinery/pkg/apis/meta/internalversion/validation ValidateListOptions / validateWatchOptions
  (v0.36): resourceVersionMatch needs resourceVersion, not with continue, Exact or NotOlderThan, not
  Exact with "0"; sendInitialEvents is for watches, with resourceVersionMatch=NotOlderThan. 422 Invalid
  on kind ListOptions.meta.k8s.io.
* k8s.io/apiserver/pkg/storage/interfaces.go ValidateListOptions and the cacher (v0.36): the version
  must parse as an unsigned integer (400 "invalid resource version: ..."; a watch answers 500); a
  continue token excludes a version; Exact, or a version with a limit and no match (the legacy exact
  case), reads the state at that version, which must not be older than what is kept (410 Expired "The
  resourceVersion for the provided list is too old.") nor newer than the newest (504 "Too large resource
  version"); any other version reads the current state, after the same too-large check.
The emulator rebuilds past states from its per-resource watch history (`Store.snapshot`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.emulator import errors
from sim.emulator.errors import ApiError, FieldError

EXACT, NOT_OLDER_THAN = "Exact", "NotOlderThan"
_UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class ListOptions:
    resource_version: str
    match: str
    continue_token: str
    limit: int
    send_initial_events: str | None  # "true"/"false" as given, None when absent

    @classmethod
    def parse(cls, query: Any, *, limit: int) -> ListOptions:
        return cls(
            resource_version=query.get("resourceVersion", ""),
            match=query.get("resourceVersionMatch", ""),
            continue_token=query.get("continue", ""),
            limit=limit,
            send_initial_events=query.get("sendInitialEvents"),
        )


def _forbidden(detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", "resourceVersionMatch", detail)


def _list_problems(options: ListOptions) -> list[FieldError]:
    problems: list[FieldError] = []
    match = options.match
    if match:
        if not options.resource_version:
            problems.append(
                _forbidden("resourceVersionMatch is forbidden unless resourceVersion is provided")
            )
        if options.continue_token:
            problems.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
        if match not in (EXACT, NOT_OLDER_THAN):
            problems.append(
                FieldError(
                    "FieldValueNotSupported",
                    "resourceVersionMatch",
                    value=match,
                    supported=(EXACT, NOT_OLDER_THAN, ""),
                )
            )
        if match == EXACT and options.resource_version == "0":
            problems.append(_forbidden('resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if options.send_initial_events is not None:
        problems.append(
            FieldError("FieldValueForbidden", "sendInitialEvents", "sendInitialEvents is forbidden for list")
        )
    return problems


def _watch_problems(options: ListOptions) -> list[FieldError]:
    problems: list[FieldError] = []
    match = options.match
    if options.send_initial_events is not None and match != NOT_OLDER_THAN:
        problems.append(
            _forbidden(f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}")
        )
    if match:
        if options.send_initial_events is None:
            problems.append(
                _forbidden("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            )
        if match != NOT_OLDER_THAN:
            problems.append(
                FieldError(
                    "FieldValueNotSupported", "resourceVersionMatch", value=match, supported=(NOT_OLDER_THAN,)
                )
            )
        if options.continue_token:
            problems.append(_forbidden("resourceVersionMatch is forbidden when continue is provided"))
    return problems


def validate(options: ListOptions, *, watch: bool) -> None:
    """422 when the options contradict each other (before anything is read)."""
    problems = _watch_problems(options) if watch else _list_problems(options)
    if problems:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", problems)


def parse_problem(value: str) -> str | None:
    """Why the versioner cannot parse `value` (strconv.ParseUint's words), or None."""
    if not value.isascii() or not value.isdigit():
        return (
            f'resourceVersion: Invalid value: "{value}": strconv.ParseUint: parsing "{value}": invalid syntax'
        )
    if int(value) > _UINT64_MAX:
        return f'resourceVersion: Invalid value: "{value}": strconv.ParseUint: parsing "{value}": value out of range'
    return None


def parse_resource_version(value: str, *, watch: bool = False) -> int:
    problem = parse_problem(value)
    if problem is None:
        return int(value)
    if watch:
        # The watch path reports the versioner's error as it is: an internal error without a reason.
        raise ApiError(errors.failure_without_reason(code=500, message=problem))
    raise errors.bad_request(f"invalid resource version: {problem}")


def too_large(requested: int, current: int) -> ApiError:
    """storage.NewTooLargeResourceVersionError: the emulator is never behind, so it answers at once."""
    return ApiError(
        errors.failure(
            code=504,
            reason="Timeout",
            message=f"Timeout: Too large resource version: {requested}, current: {current}",
            details={
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            },
        )
    )


def list_version(options: ListOptions, *, current: int) -> int | None:
    """The version whose state a list reads (None: the current state); raises for a bad or future one."""
    if options.continue_token:
        if options.resource_version not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        return None  # the token says where
    if not options.resource_version:
        return None
    requested = parse_resource_version(options.resource_version)
    exact = options.match == EXACT or (not options.match and options.limit > 0 and requested > 0)
    if requested > current:
        raise too_large(requested, current)
    return requested if exact else None
