"""The group grant API that lockd calls (docs/contracts.md, "lockd → controller: group grants"):

- `POST /v1/groups/grant`: may this pod start now? A grant is reserved at once (counted as starting)
  so that concurrent asks from other nodes never over-grant.
- `POST /v1/groups/wait`: a node's long poll: answered as soon as any of the listed held pods may go
  (or after `wait` seconds with none). lockd keeps one such request open per node, so a group that
  gains room reaches the node within milliseconds, and the controller's load grows with nodes, not
  with waiting pods.

Both need `Authorization: Bearer <token>` (compared in constant time; 401 otherwise) and are answered
only by the leader once its counts are rebuilt; any other replica answers 503 naming the leader.
The parsing here is pure; the handlers only translate.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from stagger.contracts import groups as contract
from stagger.groupbook import PodKey
from stagger.serving import json_response
from webhook.admission import wire

__all__ = [
    "MAX_ADMIT_PAIRS",
    "MAX_WAIT_PODS",
    "MAX_WAIT_SECONDS",
    "WaitAsk",
    "parse_admit",
    "parse_grant",
    "parse_wait",
    "pod_names",
]

logger = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 60.0
MAX_WAIT_PODS = 5000  # more than any node's queue bound (maxQueue, 1,000 by default)
MAX_ADMIT_PAIRS = 256  # (policy, key) pairs of one pod: one per staggering policy, at most
_MAX_NAME = 253
_MAX_KEY = 4096  # a grouping key (values found by a JSONPath expression, joined)


def _name(body: Mapping[str, Any], field: str, *, required: bool = True) -> str:
    value = body.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value or len(value) > _MAX_NAME:
        raise ValueError(f"{field} must be a non-empty string of at most {_MAX_NAME} characters")
    return value


def _object(raw: bytes) -> Mapping[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"the body is not JSON: {err}") from err
    if not isinstance(body, Mapping):
        raise ValueError("the body must be a JSON object")
    return body


def parse_grant(raw: bytes) -> contract.GrantRequest:
    """The body of `POST /v1/groups/grant`; raises ValueError naming the bad field."""
    body = _object(raw)
    request: contract.GrantRequest = {
        "namespace": _name(body, "namespace"),
        "name": _name(body, "name"),
        "uid": _name(body, "uid", required=False),
    }
    if body.get("group") is not None:
        request["group"] = _name(body, "group")
    if body.get("node") is not None:
        request["node"] = _name(body, "node")
    return request


@dataclass(frozen=True)
class WaitAsk:
    """A node's wait: the pods it names (with the uid each was named with, "" when none) and whether the
    controller should grant them in its answer (`grant: true`)."""

    node: str
    wait: float
    pods: list[PodKey]
    uids: dict[PodKey, str]
    grant: bool


def parse_wait(raw: bytes) -> WaitAsk:
    """The body of `POST /v1/groups/wait`; raises ValueError naming the bad field."""
    body = _object(raw)
    node = _name(body, "node")
    wait = body.get("wait", 30)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_SECONDS:
        raise ValueError(f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}")
    grant = body.get("grant", False)
    if not isinstance(grant, bool):
        raise ValueError("grant must be true or false")
    pods = body.get("pods")
    if not isinstance(pods, list) or len(pods) > MAX_WAIT_PODS:
        raise ValueError(f"pods must be a list of at most {MAX_WAIT_PODS} {{namespace, name}} objects")
    keys: list[PodKey] = []
    uids: dict[PodKey, str] = {}
    for index, pod in enumerate(pods):
        if not isinstance(pod, Mapping):
            raise ValueError(f"pods[{index}] must be an object {{namespace, name}}")
        try:
            key = (_name(pod, "namespace"), _name(pod, "name"))
            uid = _name(pod, "uid", required=False)
        except ValueError as err:
            raise ValueError(f"pods[{index}].{err}") from err
        keys.append(key)
        if uid:
            uids[key] = uid
    return WaitAsk(node=node, wait=float(wait), pods=keys, uids=uids, grant=grant)


def pod_names(keys: Iterable[PodKey], *, uids: Mapping[PodKey, str]) -> list[contract.PodName]:
    """Pods as a wait's answer names them: as the request did (with its uid when it gave one)."""
    return [contract.pod_name(namespace, name, uids.get((namespace, name), "")) for namespace, name in keys]


def _pairs(body: Mapping[str, Any], field: str) -> list[list[str]]:
    value = body.get(field, [])
    if not isinstance(value, list) or len(value) > MAX_ADMIT_PAIRS:
        raise ValueError(f"{field} must be a list of at most {MAX_ADMIT_PAIRS} [policy, key] pairs")
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
            raise ValueError(f"{field}[{index}] must be [policy name, grouping key] (two strings)")
        pairs.append([pair[0], pair[1]])
    return pairs


def parse_admit(raw: bytes) -> contract.AdmitRequest:
    """The body of `POST /v1/groups/admit`; raises ValueError naming the bad field."""
    body = _object(raw)
    dry_run = body.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ValueError("dryRun must be true or false")
    owner = body.get("owner", "")
    if not isinstance(owner, str) or len(owner) > _MAX_NAME:
        raise ValueError(f"owner must be a string of at most {_MAX_NAME} characters (a uid)")
    pacer_groups = _pairs(body, "pacerGroups")
    if not pacer_groups:
        raise ValueError("pacerGroups must name at least one [policy, key] pair")
    return {
        "pacerGroups": pacer_groups,
        "bypassedGroups": _pairs(body, "bypassedGroups"),
        "owner": owner,
        "dryRun": dry_run,
    }


def bad_request(reason: str) -> web.Response:
    body: wire.ErrorBody = {"error": reason}
    return json_response(body, status=400)


def unauthorized() -> web.Response:
    body: wire.ErrorBody = {"error": "a valid 'Authorization: Bearer <token>' header is required"}
    return json_response(body, status=401, headers={"WWW-Authenticate": 'Bearer realm="stagger"'})


def not_granting(*, leader: str | None, is_leader: bool) -> web.Response:
    if is_leader:
        reason = "this replica leads but is still rebuilding its group counts from the API"
    elif leader:
        reason = f"not the leader: {leader} leads"
    else:
        reason = "no leader elected yet"
    body: contract.NotLeaderBody = {"error": reason, "leader": leader}
    response = json_response(body, status=503, headers={"Retry-After": "1"})
    if not is_leader:
        # The caller came through the leader Service, which picks a pod per connection (kube-proxy keeps a
        # connection on the pod it chose): closing this one makes its next request find the leader. Kept
        # alive, lockd asked this replica again and again after an election (python -m sim chaos --seed 48).
        response.force_close()
    return response
