"""A pod on the node acts in another pod's name without a token (issue 36, item 6): it reads a waiting pod's
uid (lockd's `/status` shows the queue), asks in that pod's name with no `Authorization` and, with the
chart's defaults (no `--require-pod-token`), was given the slot and its release token; or it sent a
`DELETE` in that pod's name and took it out of the queue.

The bound: a pod whose spec has the token volume admission injects (`stagger.contracts.podtoken`) must show
its token. With lockd's default settings, a tokenless ask or release in such a pod's name is refused (403)
and changes nothing: the holder keeps its slot, the waiter its place, and the slot the victim was next for
is still there for the victim's own token. A pod opted in by hand (no such volume) is checked by its name and
uid on the node alone. Why: the volume is in the pod's spec, which cannot change after the pod is
created, and admission put it there, so lockd knows whom to ask for a token without trusting the caller.

lockd's app over real HTTP, in cluster mode against the API emulator, which issues and reviews the pods'
tokens as kube-apiserver does; the pods' Ready condition is written as their kubelet would."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from lockd import tokenreview
from tests.lockd_cluster import conftest as cluster
from tests.lockd_cluster.conftest import ClusterLockd, make_node, make_pod, pod_token, set_ready
from tests.metrics import by_label
from tests.policies import limit_policy
from tests.waiting import eventually

# tests/lockd_cluster's fixtures: the API emulator, a client of it, and lockd's app in cluster mode on it.
api, kube, start_lockd = cluster.api, cluster.kube, cluster.start_lockd


def _query(pod: dict[str, Any]) -> dict[str, str]:
    meta = pod["metadata"]
    return {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token is not None else {}


async def _ask(lockd: ClusterLockd, pod: dict[str, Any], token: str | None = None) -> aiohttp.ClientResponse:
    return await lockd.client.get("/v1/lock", params=_query(pod), headers=_bearer(token))


async def _release(
    lockd: ClusterLockd, pod: dict[str, Any], token: str | None = None
) -> aiohttp.ClientResponse:
    return await lockd.client.delete("/v1/lock", params=_query(pod), headers=_bearer(token))


async def _refusals(lockd: ClusterLockd) -> dict[str, float]:
    page = await (await lockd.client.get("/metrics")).text()
    return by_label(page, "stagger_lockd_pod_token_refusals_total", "reason")


async def _held_and_queued(lockd: ClusterLockd) -> tuple[list[str], list[str]]:
    status = await lockd.status()
    return [slot["name"] for slot in status["slots"]], [waiter["name"] for waiter in status["queue"]]


async def test_a_tokenless_ask_or_release_in_an_injected_pods_name_is_refused(start_lockd, kube) -> None:
    await make_node(kube)
    holder, victim, later = [
        await make_pod(kube, name, token_volume=True) for name in ("holder", "victim", "later")
    ]
    lockd = await start_lockd(limit_policy(1))  # lockd's defaults: no --require-pod-token
    assert (await _ask(lockd, holder, await pod_token(kube, holder))).status == 200
    victim_token = await pod_token(kube, victim)
    assert (await _ask(lockd, victim, victim_token)).status == 423
    assert (await _ask(lockd, later, await pod_token(kube, later))).status == 423
    assert await _held_and_queued(lockd) == (["holder"], ["victim", "later"])

    # The attacker, with the uids /status shows and no token: every ask and release in their names refused.
    for attempt in (
        _ask(lockd, victim),
        _release(lockd, victim),
        _release(lockd, holder),
        _ask(lockd, holder),
    ):
        response = await attempt
        assert response.status == 403, await response.text()
        assert "stagger-pod-token" in (await response.json())["error"]
    assert await _held_and_queued(lockd) == (["holder"], ["victim", "later"])

    # The holder starts; the victim is next. The tokenless ask in its name that took its slot is refused.
    await set_ready(kube, holder)
    await eventually(lambda: _no_slots(lockd), within=10, what="the holder's slot to end")
    stolen = await _ask(lockd, victim)
    assert stolen.status == 403 and "releaseToken" not in await stolen.text()
    granted = await _ask(lockd, victim, victim_token)  # the victim's own token: its slot, still there
    assert granted.status == 200 and (await granted.json())["releaseToken"]
    assert await _held_and_queued(lockd) == (["victim"], ["later"])
    assert (await _refusals(lockd)) == {"missing": 5}
    # Its own token releases its slot, without the release token.
    released = await _release(lockd, victim, victim_token)
    assert released.status == 200 and (await released.json())["released"] is True


async def _no_slots(lockd: ClusterLockd) -> bool:
    slots: list[Any] = (await lockd.status())["slots"]
    return slots == []


async def test_a_pod_injected_after_lockd_listed_the_node_must_show_its_token(start_lockd, kube) -> None:
    """A pod the watch may not have brought yet: lockd reads it from the API before deciding."""
    await make_node(kube)
    lockd = await start_lockd(limit_policy(1))
    newcomer = await make_pod(kube, "newcomer", token_volume=True)
    refused = await _ask(lockd, newcomer)
    assert refused.status == 403, await refused.text()
    assert (await lockd.status())["slots"] == []
    assert (await _ask(lockd, newcomer, await pod_token(kube, newcomer))).status == 200


@pytest.mark.parametrize(
    ("uid", "status"),
    [
        pytest.param("own", 200, id="its name and uid"),
        pytest.param("another", 403, id="another uid"),
    ],
)
async def test_a_pod_opted_in_by_hand_is_checked_by_name_and_uid(
    start_lockd, kube, uid: str, status: int
) -> None:
    await make_node(kube)
    by_hand = await make_pod(kube, "by-hand")  # no token volume: admission gave it no token
    lockd = await start_lockd(limit_policy(1))
    query = _query(by_hand) | ({"uid": "0b5e55ed-0000-4000-8000-000000000000"} if uid == "another" else {})
    response = await lockd.client.get("/v1/lock", params=query)
    assert response.status == status, await response.text()
    assert [slot["name"] for slot in (await lockd.status())["slots"]] == (
        ["by-hand"] if status == 200 else []
    )
    assert (await _refusals(lockd)) == {}


REJECTED = tokenreview.Rejected("the token was not accepted: invalid bearer token")
UNANSWERED = tokenreview.Unanswered("too many new tokens from 127.0.0.1 at once", "caller_budget", 2.0)
OWN = tokenreview.TokenPod(namespace="ns", name="p", uid="u", service_account="default")


@pytest.mark.parametrize(
    ("review", "require", "injected", "verdict"),
    [
        pytest.param(None, False, False, "unverified", id="none, by hand"),
        pytest.param(None, False, True, (403, "missing"), id="none, injected"),
        pytest.param(None, True, False, (403, "required"), id="none, required"),
        pytest.param(UNANSWERED, False, False, "unverified", id="unchecked, by hand"),
        pytest.param(UNANSWERED, False, True, (503, "caller_budget"), id="unchecked, injected"),
        pytest.param(REJECTED, False, False, (403, "rejected"), id="rejected"),
        pytest.param(OWN, False, True, "verified", id="its own"),
        pytest.param(
            tokenreview.TokenPod(namespace="ns", name="other", uid="o", service_account="default"),
            False,
            False,
            (403, "other_pod"),
            id="another pod's",
        ),
    ],
)
def test_decide(review: tokenreview.Review | None, require: bool, injected: bool, verdict: object) -> None:
    decided = tokenreview.decide(
        review, require=require, injected=injected, namespace="ns", name="p", uid="u"
    )
    if isinstance(decided, tokenreview.Refusal):
        assert (decided.status, decided.why) == verdict
        assert decided.retry_after == (2.0 if review is UNANSWERED else 1.0)
    else:
        assert decided == verdict
