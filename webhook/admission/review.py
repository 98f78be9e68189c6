"""One AdmissionReview in, one answer out: a body that is not an AdmissionReview request is a 400 with the
reason; otherwise the object is allowed, with the patch and warnings of the mutation when the request
is one it applies to, and admitted unchanged with a warning when building the patch raised (the caller
hears of the exception to log and count it). Admission never denies."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from webhook.admission import wire

__all__ = [
    "INTERNAL_ERROR_WARNING",
    "Mutate",
    "answer_review",
    "is_create",
    "is_pod_create",
    "request_problem",
]


INTERNAL_ERROR_WARNING = "stagger: internal error, pod admitted unchanged"


def request_problem(body: object) -> str | None:
    """Why `body` is not an AdmissionReview request we can answer, or None."""
    if not isinstance(body, Mapping):
        return "the body must be a JSON object (an AdmissionReview)"
    if body.get("apiVersion") != wire.API_VERSION:
        return f"apiVersion must be {wire.API_VERSION} (got {body.get('apiVersion')!r:.80})"
    if body.get("kind") != wire.KIND:
        return f"kind must be {wire.KIND} (got {body.get('kind')!r:.80})"
    request = body.get("request")
    if not isinstance(request, Mapping):
        return "request must be an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return "request.uid must be a non-empty string"
    if not isinstance(request.get("object"), Mapping):
        return "request.object must be an object"
    return None


def is_create(request: Mapping[str, Any], *, kind: str, group: str, resource: str) -> bool:
    """An object of `kind` being created (the webhooks are registered for nothing else, but a
    misconfiguration must not get our patch applied to something else)."""
    operation = request.get("operation", "CREATE")
    requested = request.get("resource")
    if operation != "CREATE" or request["object"].get("kind", kind) != kind or request.get("subResource"):
        return False
    return not isinstance(requested, Mapping) or (requested.get("group"), requested.get("resource")) == (
        group,
        resource,
    )


Mutate = Callable[[Mapping[str, Any], str | None], tuple[list[wire.PatchOperation], list[str]]]


"""(the object, the request's namespace) -> (JSON patch, warnings)."""


def answer_review(
    body: object,
    *,
    applies: Callable[[Mapping[str, Any]], bool],
    mutate: Mutate,
    internal_errors: list[Exception] | None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The answer to one AdmissionReview: 400 when it is not one; else allowed, with `mutate`'s patch and
    warnings when the request `applies`; an exception admits the object unchanged (see `review`)."""
    problem = request_problem(body)
    if problem is not None:
        return 400, {"error": problem}
    assert isinstance(body, Mapping)  # checked by request_problem
    request = body["request"]
    response: wire.AdmissionResponse = {"uid": request["uid"], "allowed": True}
    try:
        if applies(request):
            namespace = request.get("namespace")
            ops, warnings = mutate(request["object"], namespace if isinstance(namespace, str) else None)
            if ops:
                patch = json.dumps(ops, separators=(",", ":")).encode("utf-8")
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(patch).decode("ascii")
            if warnings:
                response["warnings"] = warnings
    except Exception as error:  # never let a bug in stagger block a pod or a Job
        if internal_errors is not None:
            internal_errors.append(error)
        response = {"uid": request["uid"], "allowed": True, "warnings": [INTERNAL_ERROR_WARNING]}
    return 200, {"apiVersion": wire.API_VERSION, "kind": wire.KIND, "response": response}


def is_pod_create(request: Mapping[str, Any]) -> bool:
    return is_create(request, kind="Pod", group="", resource="pods")
