"""The group API's refusals (`POST /v1/groups/grant`, `/v1/groups/wait`, `/v1/groups/admit`), as the
handlers in `webhook.groups.api` answer them: 400 naming the bad field, 401 without the token, 503 from a
replica that does not grant (naming the leader). The bodies themselves are read by
`stagger.contracts.groups`."""

from __future__ import annotations

from aiohttp import web

from stagger.contracts import groups as contract
from stagger.contracts.errors import ErrorBody
from stagger.serving import json_response

__all__ = ["bad_request", "not_granting", "unauthorized"]


def bad_request(reason: str) -> web.Response:
    body: ErrorBody = {"error": reason}
    return json_response(body, status=400)


def unauthorized() -> web.Response:
    body: ErrorBody = {"error": "a valid 'Authorization: Bearer <token>' header is required"}
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
        # connection on the pod it chose): closing this one makes its next request find the leader; kept
        # alive, lockd would ask this replica again and again after an election (python -m sim chaos).
        response.force_close()
    return response
