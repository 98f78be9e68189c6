"""Cluster-mode lockd checks pods' tokens against the API server's published keys (lockd/tokenkeys.py), with
the emulator signing and publishing them as kube-apiserver does (ES256, OIDC discovery): a pod's own
token is verified with no TokenReview at all, the keys read once for many pods; a token signed with a key
lockd has not read (the issuer's keys rotated) makes it read them again; another pod's token, a forged
signature or another audience is refused the same; with --no-token-keys every new token costs a
TokenReview, as before. And `decide`, pure: a token checked by keys only must name the pod in lockd's
watch, that very uid."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest

from lockd import tokenreview
from lockd.app import CLUSTER
from tests.lockd_cluster.conftest import ClusterLockd, make_node, make_pod, pod_token
from tests.metrics import by_label
from tests.policies import limit_policy

pytestmark = pytest.mark.e2e


async def _ask(lockd: ClusterLockd, pod: dict[str, Any], token: str) -> aiohttp.ClientResponse:
    meta = pod["metadata"]
    query = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    return await lockd.client.get("/v1/lock", params=query, headers={"Authorization": f"Bearer {token}"})


async def _checks(lockd: ClusterLockd) -> dict[str, float]:
    page = await (await lockd.client.get("/metrics")).text()
    return by_label(page, "stagger_lockd_token_checks_total", "how")


async def test_pods_tokens_are_verified_by_the_keys_with_no_token_review(start_lockd, kube) -> None:
    await make_node(kube)
    pods = [await make_pod(kube, f"p{i}") for i in range(5)]
    lockd = await start_lockd(limit_policy(1))
    answers = [(await _ask(lockd, pod, await pod_token(kube, pod))).status for pod in pods]
    assert answers == [200, 423, 423, 423, 423]
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None
    assert (reviewer.api_reviews, reviewer.key_checks) == (0, 5)
    assert reviewer.keys is not None and reviewer.keys.reads == 1
    assert await _checks(lockd) == {"keys": 5}


async def test_no_token_keys_reviews_each_new_token(start_lockd, kube) -> None:
    await make_node(kube)
    pods = [await make_pod(kube, f"p{i}") for i in range(3)]
    lockd = await start_lockd(limit_policy(1), token_keys=False)
    for pod in pods:
        await _ask(lockd, pod, await pod_token(kube, pod))
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None and (reviewer.api_reviews, reviewer.key_checks) == (3, 0)
    assert await _checks(lockd) == {"review": 3}


def _forged(token: str, **claims: Any) -> str:
    """The token with claims changed and its signature kept (so no longer its signer's)."""
    head, body, signature = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(claims)
    return (
        f"{head}.{base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b'=').decode()}.{signature}"
    )


@pytest.mark.parametrize(
    ("make", "says"),
    [
        pytest.param("other", "the token is pod default/other's", id="another-pods-token"),
        pytest.param("forged", "its signature does not verify", id="a-forged-claim"),
        pytest.param("audience", "not for audience", id="another-audience"),
    ],
)
async def test_a_token_not_the_pods_is_refused_by_the_keys(start_lockd, kube, make: str, says: str) -> None:
    await make_node(kube)
    victim, other = await make_pod(kube, "victim"), await make_pod(kube, "other")
    lockd = await start_lockd(limit_policy(1))
    if make == "other":
        token = await pod_token(kube, other)
    elif make == "forged":
        own = await pod_token(kube, other)
        claims = json.loads(base64.urlsafe_b64decode(own.split(".")[1] + "=="))
        claims["kubernetes.io"]["pod"] = {"name": "victim", "uid": victim["metadata"]["uid"]}
        token = _forged(own, **claims)
    else:
        token = await pod_token(kube, victim, audience="https://kubernetes.default.svc")
    answer = await _ask(lockd, victim, token)
    assert answer.status == 403
    assert says in (await answer.json())["error"]
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None and reviewer.api_reviews == 0
    assert (await lockd.status())["slots"] == []


async def test_a_key_not_read_yet_makes_lockd_read_the_keys_again(start_lockd, kube, api) -> None:
    await make_node(kube)
    first, second = await make_pod(kube, "first"), await make_pod(kube, "second")
    lockd = await start_lockd(limit_policy(2), token_keys_reread=0.0)
    assert (await _ask(lockd, first, await pod_token(kube, first))).status == 200
    reviewer = lockd.app[CLUSTER].tokens
    assert reviewer is not None and reviewer.keys is not None
    api.rotate_signing_key()  # the API server signs with a new key from now on, and publishes both
    assert (await _ask(lockd, second, await pod_token(kube, second))).status == 200
    assert (reviewer.keys.reads, reviewer.api_reviews, reviewer.key_checks) == (2, 0, 2)


WATCHED = tokenreview.TokenPod(namespace="ns", name="web-0", uid="u-1", service_account="app", live=False)


@pytest.mark.parametrize(
    ("watched_uid", "verdict"),
    [
        pytest.param("u-1", "verified", id="the-watched-pod"),
        pytest.param("u-2", "invalidated", id="the-pod-was-recreated"),
        pytest.param(None, "invalidated", id="no-such-pod-in-the-watch"),
    ],
)
def test_a_token_checked_by_keys_must_name_the_watched_pod(watched_uid: str | None, verdict: str) -> None:
    found = tokenreview.decide(
        WATCHED, require=False, injected=True, namespace="ns", name="web-0", uid="", watched_uid=watched_uid
    )
    if verdict == "verified":
        assert found == "verified"
    else:
        assert isinstance(found, tokenreview.Refusal) and found.status == 403 and verdict in found.reason
