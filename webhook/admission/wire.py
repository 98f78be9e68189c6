"""The shapes on the wire between the API server and the admission webhook: admission.k8s.io/v1
AdmissionReview (request and response) and RFC 6902 JSON Patch operations. The group pacer service's
(lockd and the controller's replicas -> the leader) are in `stagger.contracts.groups`.

Typing only: what arrives is untrusted JSON and is checked field by field by `webhook.admission`; these
say what a well-formed review holds (the fields of kube-apiserver's Admission v1 reference) and what we
send back.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, Required, TypedDict

from stagger.contracts.errors import ErrorBody  # every stagger API's error answer, defined once

__all__ = [
    "API_VERSION",
    "KIND",
    "AdmissionRequest",
    "AdmissionResponse",
    "ErrorBody",
    "GroupVersionKind",
    "GroupVersionResource",
    "Operation",
    "PatchOperation",
    "ReviewIn",
    "ReviewOut",
    "Status",
    "UserInfo",
]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: str  # "" for the core group (pods)
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


class AdmissionRequest(TypedDict, total=False):
    uid: Required[str]  # echoed in the response: it pairs the answer with the request
    kind: Required[GroupVersionKind]
    resource: Required[GroupVersionResource]
    subResource: str
    requestKind: GroupVersionKind
    requestResource: GroupVersionResource
    requestSubResource: str
    name: str  # empty on CREATE when the object uses generateName
    namespace: str
    operation: Required[Operation]
    userInfo: Required[UserInfo]
    object: dict[str, Any]  # the object as it would be stored (null on DELETE)
    oldObject: dict[str, Any]  # on UPDATE and DELETE
    dryRun: bool  # nothing will be persisted; a webhook with side effects must not act
    options: dict[str, Any]  # CreateOptions, UpdateOptions, ...


class ReviewIn(TypedDict):
    """The body the API server POSTs to the webhook."""

    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class Status(TypedDict, total=False):
    """metav1.Status: why a request is denied (stagger never denies; here for completeness)."""

    code: int
    message: str
    reason: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]  # base64 of the JSON Patch document
    warnings: NotRequired[list[str]]  # shown by kubectl and clients as "Warning: ..."
    status: NotRequired[Status]
    auditAnnotations: NotRequired[dict[str, str]]


class ReviewOut(TypedDict):
    """The body the webhook answers with (HTTP 200)."""

    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


class PatchOperation(TypedDict):
    """One RFC 6902 operation; stagger only adds (to a new member, or inserts into an array)."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str  # a JSON Pointer (RFC 6901): "~" is written "~0" and "/" "~1" inside a member name
    value: NotRequired[Any]
