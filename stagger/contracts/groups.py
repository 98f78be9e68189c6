"""The group pacer service on the wire (docs/contracts.md, "Group grants"): what lockd asks the controller's
leader (`POST /v1/groups/grant`, `POST /v1/groups/wait`) and what a controller replica that does not lead
asks the leader (`POST /v1/groups/admit`), with the answers.

Each body has its type, the function its sender builds it with, and the reader its receiver applies to the
decoded JSON; lockd and the controller both import them. A body crosses a network, so a reader checks
every field it keeps and raises `BodyError` naming the first one that is not the contract's shape: the
controller answers that with a 400, lockd and a replica count it as an unreachable leader."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

from stagger.contracts.errors import BodyError
from stagger.objectnames import PodKey

__all__ = [
    "ADMIT_PATH",
    "GRANT_PATH",
    "MAX_ADMIT_PAIRS",
    "MAX_WAIT_PODS",
    "MAX_WAIT_SECONDS",
    "WAIT_PATH",
    "AdmitAnswer",
    "AdmitRequest",
    "BodyError",
    "GrantAnswer",
    "GrantRequest",
    "NotLeaderBody",
    "PodName",
    "WaitAnswer",
    "WaitAsk",
    "WaitReply",
    "WaitRequest",
    "admit_answer",
    "admit_request",
    "decode_json",
    "grant_answer",
    "pod_name",
    "pod_names",
    "read_admit_answer",
    "read_admit_request",
    "read_grant_answer",
    "read_grant_request",
    "read_wait_answer",
    "read_wait_request",
    "wait_answer",
    "wait_request",
]

GRANT_PATH: Final = "/v1/groups/grant"
WAIT_PATH: Final = "/v1/groups/wait"
ADMIT_PATH: Final = "/v1/groups/admit"

MAX_WAIT_SECONDS: Final = 60.0
MAX_WAIT_PODS: Final = 5000  # more than any node's queue bound (maxQueue, 1,000 by default)
MAX_ADMIT_PAIRS: Final = 256  # (policy, key) pairs of one pod: one per staggering policy, at most
_MAX_NAME: Final = 253
_MAX_KEY: Final = 4096  # a grouping key (values found by a JSONPath expression, joined)
# A grant answer without retryAfter: ask again this soon.
_DEFAULT_RETRY_SECONDS: Final = 1.0


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


@dataclass(frozen=True)
class WaitAsk:
    """A node's wait as the controller reads it: the pods it names (with the uid each was named with, ""
    when none) and whether the controller should grant them in its answer (`grant: true`)."""

    node: str
    wait: float
    pods: list[PodKey]
    uids: dict[PodKey, str]
    grant: bool


@dataclass(frozen=True)
class WaitReply:
    """The controller's answer to a wait as lockd reads it: pods that may go (`grantable`: they ask
    `POST /v1/groups/grant`) and pods it granted in the answer (`granted`, with their uids as the wait named
    them), reserved for `granted_for` seconds from when it answered."""

    grantable: list[PodKey]
    granted: list[tuple[PodKey, str]]
    granted_for: float


# The senders' side: each body as its sender builds it.


def pod_name(namespace: str, name: str, uid: str = "") -> PodName:
    """A pod as a wait and its answer name it: with its uid when there is one."""
    named: PodName = {"namespace": namespace, "name": name}
    if uid:
        named["uid"] = uid
    return named


def pod_names(keys: Iterable[PodKey], *, uids: Mapping[PodKey, str]) -> list[PodName]:
    """Pods as a wait's answer names them: as the request did (with its uid when it gave one)."""
    return [pod_name(namespace, name, uids.get((namespace, name), "")) for namespace, name in keys]


def grant_answer(*, granted: bool, reason: str, retry_after: float) -> GrantAnswer:
    return {"granted": granted, "reason": reason, "retryAfter": round(retry_after, 3)}


def wait_request(*, node: str, wait: float, pods: Iterable[tuple[PodKey, str]], grant: bool) -> WaitRequest:
    """lockd's wait naming `pods` (each with its uid, "" when unknown)."""
    return {
        "node": node,
        "wait": wait,
        "pods": [pod_name(namespace, name, uid) for (namespace, name), uid in pods],
        "grant": grant,
    }


def wait_answer(
    *,
    uids: Mapping[PodKey, str],
    grantable: Iterable[PodKey] = (),
    granted: Iterable[PodKey] | None = None,
    granted_for: float = 0.0,
) -> WaitAnswer:
    """The controller's answer to a wait: the pods that may go, or (a wait with `grant: true`) those it
    granted, reserved for `granted_for` seconds; each named as the request named it (`uids`)."""
    answer: WaitAnswer = {"grantable": pod_names(grantable, uids=uids)}
    if granted is not None:
        answer["granted"] = pod_names(granted, uids=uids)
        answer["grantedFor"] = round(granted_for, 3)
    return answer


def admit_request(
    *,
    pacer_groups: Iterable[tuple[str, str]],
    bypassed_groups: Iterable[tuple[str, str]],
    owner: str,
    dry_run: bool,
) -> AdmitRequest:
    return {
        "pacerGroups": [list(pair) for pair in pacer_groups],
        "bypassedGroups": [list(pair) for pair in bypassed_groups],
        "owner": owner,
        "dryRun": dry_run,
    }


def admit_answer(*, admit: bool, reason: str, ticket: str | None, held_since: float | None) -> AdmitAnswer:
    answer: AdmitAnswer = {"admit": admit, "reason": reason}
    if ticket is not None:
        answer["ticket"] = ticket
    if held_since is not None:
        answer["heldSince"] = held_since
    return answer


# The receivers' side: the controller reads the requests, lockd and the replicas the answers.


def decode_json(raw: bytes) -> object:
    """A request's body as JSON; raises BodyError when it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise BodyError(f"the body is not JSON: {err}") from err


def _object(data: object) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise BodyError("the body must be a JSON object")
    return data


def _name(body: Mapping[str, Any], field: str, *, required: bool = True) -> str:
    value = body.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise BodyError(f"{field} must be a non-empty string of at most {_MAX_NAME} characters")
    return value


def read_grant_request(data: object) -> GrantRequest:
    """The body of `POST /v1/groups/grant`, decoded."""
    body = _object(data)
    request: GrantRequest = {
        "namespace": _name(body, "namespace"),
        "name": _name(body, "name"),
        "uid": _name(body, "uid", required=False),
    }
    if body.get("group") is not None:
        request["group"] = _name(body, "group")
    if body.get("node") is not None:
        request["node"] = _name(body, "node")
    return request


def read_wait_request(data: object) -> WaitAsk:
    """The body of `POST /v1/groups/wait`, decoded."""
    body = _object(data)
    node = _name(body, "node")
    wait = body.get("wait", 30)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise BodyError(f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}")
    grant = body.get("grant", False)
    if not isinstance(grant, bool):
        raise BodyError("grant must be true or false")
    pods = body.get("pods")
    if not isinstance(pods, list) or len(pods) > MAX_WAIT_PODS:
        raise BodyError(f"pods must be a list of at most {MAX_WAIT_PODS} {{namespace, name}} objects")
    keys: list[PodKey] = []
    uids: dict[PodKey, str] = {}
    for index, pod in enumerate(pods):
        if not isinstance(pod, Mapping):
            raise BodyError(f"pods[{index}] must be an object {{namespace, name}}")
        try:
            key = (_name(pod, "namespace"), _name(pod, "name"))
            uid = _name(pod, "uid", required=False)
        except BodyError as err:
            raise BodyError(f"pods[{index}].{err}") from err
        keys.append(key)
        if uid:
            uids[key] = uid
    return WaitAsk(node=node, wait=float(wait), pods=keys, uids=uids, grant=grant)


def _pairs(body: Mapping[str, Any], field: str) -> list[list[str]]:
    value = body.get(field, [])
    if not isinstance(value, list) or len(value) > MAX_ADMIT_PAIRS:
        raise BodyError(f"{field} must be a list of at most {MAX_ADMIT_PAIRS} [policy, key] pairs")
    pairs: list[list[str]] = []
    for index, pair in enumerate(value):
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(part, str) for part in pair)
            or not pair[0]
            or len(pair[0]) > _MAX_NAME
            or len(pair[1]) > _MAX_KEY
        ):
            raise BodyError(f"{field}[{index}] must be [policy name, grouping key] (two strings)")
        pairs.append([pair[0], pair[1]])
    return pairs


def read_admit_request(data: object) -> AdmitRequest:
    """The body of `POST /v1/groups/admit`, decoded."""
    body = _object(data)
    dry_run = body.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise BodyError("dryRun must be true or false")
    owner = body.get("owner", "")
    if not isinstance(owner, str) or len(owner) > _MAX_NAME:
        raise BodyError(f"owner must be a string of at most {_MAX_NAME} characters (a uid)")
    pacer_groups = _pairs(body, "pacerGroups")
    if not pacer_groups:
        raise BodyError("pacerGroups must name at least one [policy, key] pair")
    return {
        "pacerGroups": pacer_groups,
        "bypassedGroups": _pairs(body, "bypassedGroups"),
        "owner": owner,
        "dryRun": dry_run,
    }


def _seconds(data: Mapping[str, Any], field_name: str, *, default: float) -> float:
    value = data.get(field_name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BodyError(f"{field_name} must be a number of seconds >= 0 (got {value!r})")
    return float(value)


def read_grant_answer(data: object) -> GrantAnswer:
    """The controller's answer to `POST /v1/groups/grant`, with `reason` and `retryAfter` filled in when
    they are missing."""
    if not isinstance(data, Mapping) or not isinstance(data.get("granted"), bool):
        raise BodyError(f"answer is not {{granted: bool, reason, retryAfter}}: {str(data)[:200]}")
    return {
        "granted": data["granted"],
        "reason": str(data.get("reason") or ""),
        "retryAfter": _seconds(data, "retryAfter", default=_DEFAULT_RETRY_SECONDS),
    }


def _pod_list(data: Mapping[str, Any], field_name: str) -> list[tuple[PodKey, str]]:
    pods = data.get(field_name, [])
    if not isinstance(pods, list):
        raise BodyError(f"{field_name} must be a list of {{namespace, name}}: {str(pods)[:200]}")
    entries: list[tuple[PodKey, str]] = []
    for pod in pods:
        if (
            not isinstance(pod, Mapping)
            or not isinstance(pod.get("namespace"), str)
            or not isinstance(pod.get("name"), str)
            or not isinstance(pod.get("uid", ""), str)
        ):
            raise BodyError(f"{field_name} entries must be {{namespace, name[, uid]}}: {str(pod)[:200]}")
        entries.append(((pod["namespace"], pod["name"]), pod.get("uid", "")))
    return entries


def read_wait_answer(data: object) -> WaitReply:
    """The controller's answer to `POST /v1/groups/wait`."""
    if not isinstance(data, Mapping) or not isinstance(data.get("grantable"), list):
        raise BodyError(f"answer is not {{grantable: [{{namespace, name}}]}}: {str(data)[:200]}")
    return WaitReply(
        grantable=[key for key, _ in _pod_list(data, "grantable")],
        granted=_pod_list(data, "granted"),
        granted_for=_seconds(data, "grantedFor", default=0.0),
    )


def read_admit_answer(data: object) -> AdmitAnswer:
    """The leader's answer to `POST /v1/groups/admit`. Lenient past its being an object: anything but
    `admit: true` holds the pod, and a `ticket` or `heldSince` of another type is left out."""
    if not isinstance(data, Mapping):
        raise BodyError(f"answer is not {{admit: bool, reason}}: {str(data)[:200]}")
    answer: AdmitAnswer = {"admit": data.get("admit") is True, "reason": str(data.get("reason") or "")}
    ticket = data.get("ticket")
    if isinstance(ticket, str) and ticket:
        answer["ticket"] = ticket
    held_since = data.get("heldSince")
    if isinstance(held_since, int | float) and not isinstance(held_since, bool):
        answer["heldSince"] = float(held_since)
    return answer
