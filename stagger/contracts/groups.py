"""The group pacer service on the wire (docs/contracts.md, "Group grants"): what lockd asks the controller's
leader (`POST /v1/groups/grant`, `POST /v1/groups/wait`) and what a controller replica that does not lead
asks the leader (`POST /v1/groups/admit`), with the answers. lockd and the controller both import these."""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict

GRANT_PATH: Final = "/v1/groups/grant"
WAIT_PATH: Final = "/v1/groups/wait"
ADMIT_PATH: Final = "/v1/groups/admit"


class GrantRequest(TypedDict):
    """`POST /v1/groups/grant`: may this pod of a staggering group start now? lockd always sends `group` and
    `node`; the controller needs neither (its book knows the pod's groups) and logs them when present."""

    namespace: str
    name: str
    uid: str
    group: NotRequired[str]  # the group label's value
    node: NotRequired[str]


class GrantAnswer(TypedDict):
    granted: bool
    reason: str
    retryAfter: float


class PodName(TypedDict):
    namespace: str
    name: str
    uid: NotRequired[str]  # in a wait: the pod's metadata.uid, so that a grant is never for another pod


def pod_name(namespace: str, name: str, uid: str = "") -> PodName:
    """A pod as a wait and its answer name it: with its uid when there is one."""
    named: PodName = {"namespace": namespace, "name": name}
    if uid:
        named["uid"] = uid
    return named


class WaitRequest(TypedDict):
    """`POST /v1/groups/wait`: answer when any of these held pods (stepping aside on `node`) may go. With
    `grant: true` the controller also grants them in the answer (reserved as `POST /v1/groups/grant`
    would), so that the node starts them without a request of its own for each."""

    node: str
    wait: float
    pods: list[PodName]
    grant: NotRequired[bool]


class WaitAnswer(TypedDict):
    """`grantable`: pods that may go (a wait without `grant`). `granted`: pods granted and reserved for
    `grantedFor` seconds (a wait with `grant: true`), as named in the request."""

    grantable: list[PodName]
    granted: NotRequired[list[PodName]]
    grantedFor: NotRequired[float]


class NotLeaderBody(TypedDict):
    error: str
    leader: str | None


class AdmitRequest(TypedDict):
    """`POST /v1/groups/admit`: a replica that does not lead asks the leader whether to let a pod in evict
    mode through at admission or to hold it. Pairs are [policy, key]."""

    pacerGroups: list[list[str]]
    bypassedGroups: list[list[str]]
    owner: str  # the uid of the pod's controller
    dryRun: bool


class AdmitAnswer(TypedDict):
    admit: bool
    reason: str
    ticket: NotRequired[str]  # the claimed place's id, annotated on the pod
    heldSince: NotRequired[float]  # epoch seconds: the first hold of the pod's chain
