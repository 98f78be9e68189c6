"""Cluster-mode lockd binds each ask and release to the pod whose projected service-account token comes with
it (lockd/tokenreview.py), with tokens the API emulator issues and reviews as a real API server does, here
by TokenReview (`--no-token-keys`; tests/lockd_cluster/test_token_keys.py checks them by keys): a pod's
own token is verified and costs one TokenReview however often it asks; another pod's token, one of another
audience, an expired or made-up one, or a bad Authorization header is refused and changes nothing, and
made-up tokens by the dozen cost a bounded number of reviews; a release in
another pod's name is refused, the pod's own token releases without the release token; with
--require-pod-token a request without a token is refused, without it it is checked by name and uid."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from lockd.app import CLUSTER
from sim.emulator.server import ApiServer
from sim.emulator.settings import ApiServerSettings
from stagger.kube import RestClient
from tests.lockd_cluster.conftest import ClusterLockd, make_node, make_pod, pod_token
from tests.metrics import by_label
from tests.policies import limit_policy

pytestmark = pytest.mark.e2e


class TokenClock:
    """The emulator's clock for issuing and reviewing tokens: real time, moved back to issue an old one."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def token_clock() -> TokenClock:
    return TokenClock()


@pytest.fixture
def start_lockd(start_lockd):
    """conftest's, with every new token reviewed by the API server (`--no-token-keys`)."""
    return functools.partial(start_lockd, token_keys=False)


@pytest.fixture
async def api(token_clock: TokenClock) -> AsyncIterator[ApiServer]:
    """The emulator as conftest's, on a token clock this module can move."""
    async with ApiServer(ApiServerSettings(port=0, token_clock=token_clock)) as server:
        yield server


async def _token(kube: RestClient, pod: dict[str, Any], *, audience: str = "stagger") -> str:
    return await pod_token(kube, pod, audience=audience)


async def _ask(lockd: ClusterLockd, pod: dict[str, Any], token: str | None) -> aiohttp.ClientResponse:
    meta = pod["metadata"]
    query = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return await lockd.client.get("/v1/lock", params=query, headers=headers)


async def _metrics(lockd: ClusterLockd) -> dict[str, float]:
    page = await (await lockd.client.get("/metrics")).text()
    return by_label(page, "stagger_lockd_pod_tokens_total", "result")


async def test_own_token_is_verified_once_however_often_the_pod_asks(start_lockd, kube) -> None:
    await make_node(kube)
    first, second = await make_pod(kube, "first"), await make_pod(kube, "second")
    lockd = await start_lockd(limit_policy(1))
    assert (await _ask(lockd, first, await _token(kube, first))).status == 200
    token = await _token(kube, second)
    for _ in range(3):
        assert (await _ask(lockd, second, token)).status == 423  # waits its turn, as any pod
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None and reviewer.api_reviews == 2  # one per pod
    assert (await _metrics(lockd))["verified"] == 4


@pytest.mark.parametrize(
    ("whose", "audience", "says"),
    [
        pytest.param("other", "stagger", "the token is pod default/other's", id="another pod's token"),
        pytest.param("victim", "https://kubernetes.default.svc", "not accepted", id="another audience"),
        pytest.param("made-up", "stagger", "not accepted", id="a made-up token"),
    ],
)
async def test_a_token_not_the_pods_is_refused_and_changes_nothing(
    start_lockd, kube, whose: str, audience: str, says: str
) -> None:
    await make_node(kube)
    holder, victim, other = [await make_pod(kube, name) for name in ("holder", "victim", "other")]
    lockd = await start_lockd(limit_policy(1))
    assert (await _ask(lockd, holder, await _token(kube, holder))).status == 200
    if whose == "made-up":
        token = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.c2lnbmF0dXJl"
    else:
        token = await _token(kube, other if whose == "other" else victim, audience=audience)
    response = await _ask(lockd, victim, token)
    assert response.status == 403
    assert says in (await response.json())["error"]
    after = await lockd.status()
    assert [slot["name"] for slot in after["slots"]] == ["holder"] and not after["queue"]
    assert (await _metrics(lockd))["refused"] == 1


async def test_an_expired_token_is_refused(start_lockd, kube, token_clock: TokenClock) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "late")
    lockd = await start_lockd(limit_policy(1))
    token_clock.offset = -3600.0  # issued an hour ago, for 10 minutes
    token = await _token(kube, pod)
    token_clock.offset = 0.0
    response = await _ask(lockd, pod, token)
    assert response.status == 403
    assert "expired" in (await response.json())["error"]
    assert (await lockd.status())["slots"] == []


async def test_release_needs_the_pods_own_token(start_lockd, kube) -> None:
    await make_node(kube)
    holder, other = await make_pod(kube, "holder"), await make_pod(kube, "other")
    lockd = await start_lockd(limit_policy(1))
    own = await _token(kube, holder)
    assert (await _ask(lockd, holder, own)).status == 200
    meta = holder["metadata"]
    query = {"namespace": "default", "name": "holder", "uid": meta["uid"]}
    stolen = await lockd.client.delete(
        "/v1/lock", params=query, headers={"Authorization": f"Bearer {await _token(kube, other)}"}
    )
    assert stolen.status == 403
    assert len((await lockd.status())["slots"]) == 1
    released = await lockd.client.delete("/v1/lock", params=query, headers={"Authorization": f"Bearer {own}"})
    assert released.status == 200, await released.text()
    assert (await lockd.status())["slots"] == []


async def test_a_bad_authorization_header_is_a_bad_request(start_lockd, kube) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "pod")
    lockd = await start_lockd(limit_policy(1))
    meta = pod["metadata"]
    query = {"namespace": "default", "name": "pod", "uid": meta["uid"]}
    response = await lockd.client.get("/v1/lock", params=query, headers={"Authorization": "Basic cm9vdA=="})
    assert response.status == 400
    assert "Bearer" in (await response.json())["error"]


@pytest.mark.parametrize("require", [pytest.param(False, id="allowed"), pytest.param(True, id="required")])
async def test_a_pod_without_a_token(start_lockd, kube, require: bool) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "by-hand")
    lockd = await start_lockd(limit_policy(1), require_pod_token=require)
    response = await _ask(lockd, pod, None)
    if require:
        assert response.status == 403
        assert "--require-pod-token" in (await response.json())["error"]
        assert (await _ask(lockd, pod, await _token(kube, pod))).status == 200
    else:
        assert response.status == 200
        assert (await _metrics(lockd))["absent"] == 1


async def test_made_up_tokens_cannot_make_lockd_flood_the_api_server(start_lockd, kube) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "flooder")
    lockd = await start_lockd(
        limit_policy(1), require_pod_token=True, token_review_burst=3, token_review_fill=3600.0
    )
    answers = [(await _ask(lockd, pod, f"made.up.{n}")).status for n in range(10)]
    # Three reviews, each refused and remembered; the rest are not reviewed at all: ask again later (503).
    assert answers == [403] * 3 + [503] * 7
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None and reviewer.api_reviews == 3
    assert (await _ask(lockd, pod, "made.up.0")).status == 403  # remembered: no review
    assert reviewer.api_reviews == 3
