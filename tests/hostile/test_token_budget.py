"""A pod on the node spends the node's token reviews (issue 36, item 7): it sends lockd made-up tokens, each
new one a TokenReview, until the node's budget of reviews is gone, and then a legitimate pod's real token
could not be checked (503 "too many new tokens at once") and the pod could not start.

The bound: each caller address has its own budget of new tokens (`--token-review-caller-burst` 10, one more
every `--token-review-caller-fill` 0.5 s), below the node's (20, kept as the backstop), in a map of at most
`--token-review-callers` addresses. One address sending 40 made-up tokens gets 403 for the ones reviewed
and then 503 with Retry-After, and uses at most its own budget of the node's reviews; a pod asking from
another address with its real token is verified. A token the API server accepts gives its sender's budget
back, so pods sharing one address (hostNetwork) do not hold each other back. Many addresses cannot grow
the map past its cap, and the node's budget still bounds their reviews. Why: a pod's source address on
its node is its own (a pod cannot send from another pod's IP), so the cost lands on the sender.

lockd's app over real HTTP, in cluster mode against the API emulator, which reviews tokens as
kube-apiserver does; the callers connect from distinct loopback addresses (127.0.0.x). The node's budget
never refills within a test (`token_review_fill` an hour), so that the 40 made-up tokens would have used
it all without the callers' budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from lockd.appstate import CLUSTER
from lockd.tokenreview import CallerBudgets, TokenReviewer
from tests.lockd_cluster import conftest as cluster
from tests.lockd_cluster.conftest import ClusterLockd, make_node, make_pod, pod_token
from tests.metrics import by_label
from tests.policies import limit_policy

# tests/lockd_cluster's fixtures: the API emulator, a client of it, and lockd's app in cluster mode on it.
api, kube, start_lockd = cluster.api, cluster.kube, cluster.start_lockd

# The default burst, never refilled; every token reviewed by the API server (--no-token-keys), whose
# budgets this is about (a pod's real token is otherwise checked by keys, costing no review at all).
NODE_BUDGET = {"token_review_burst": 20, "token_review_fill": 3600.0, "token_keys": False}
MADE_UP = "eyJhbGciOiJIUzI1NiJ9.eyJleHAiOjk5OTk5OTk5OTl9.bWFkZS11cC0{n}"


@asynccontextmanager
async def caller(address: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A client whose connections come from `address` (a loopback address of its own)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0))) as session:
        yield session


async def ask(
    session: aiohttp.ClientSession, lockd: ClusterLockd, pod: dict[str, Any], token: str
) -> tuple[int, str | None]:
    meta = pod["metadata"]
    query = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    async with session.get(
        lockd.client.make_url("/v1/lock"), params=query, headers={"Authorization": f"Bearer {token}"}
    ) as response:
        await response.read()
        return response.status, response.headers.get("Retry-After")


def reviewer(lockd: ClusterLockd) -> TokenReviewer:
    tokens = lockd.app[CLUSTER].tokens
    assert tokens is not None
    return tokens


async def metric(lockd: ClusterLockd, name: str, label: str) -> dict[str, float]:
    return by_label(await (await lockd.client.get("/metrics")).text(), name, label)


@pytest.mark.parametrize(
    ("settings", "injected"),
    [
        pytest.param({}, True, id="defaults, pods given a token"),
        pytest.param({"require_pod_token": True}, False, id="require-pod-token, pods by hand"),
    ],
)
async def test_made_up_tokens_from_one_address_do_not_fail_anothers_real_token(
    start_lockd, kube, settings: dict[str, Any], injected: bool
) -> None:
    await make_node(kube)
    victim = await make_pod(kube, "victim", token_volume=injected)
    legit = await make_pod(kube, "legit", token_volume=injected)
    lockd = await start_lockd(limit_policy(5), **NODE_BUDGET, **settings)
    async with caller("127.0.0.1") as attacker:
        answers = [await ask(attacker, lockd, victim, MADE_UP.format(n=n)) for n in range(40)]
    statuses = [status for status, _ in answers]
    refused = statuses.count(403)
    # Its own budget's worth reviewed and refused (10, and what refilled while it sent), then "ask again".
    assert 10 <= refused <= 14 and statuses == [403] * refused + [503] * (40 - refused), statuses
    assert all(retry is not None and int(retry) >= 1 for status, retry in answers if status == 503)
    assert reviewer(lockd).api_reviews == refused
    async with caller("127.0.0.2") as neighbour:
        assert await ask(neighbour, lockd, legit, await pod_token(kube, legit)) == (200, None)
    assert (await lockd.status())["slots"][0]["name"] == "legit"
    refusals = await metric(lockd, "stagger_lockd_pod_token_refusals_total", "reason")
    assert refusals == {"rejected": refused, "caller_budget": 40 - refused}
    assert (await metric(lockd, "stagger_lockd_pod_tokens_total", "result"))["verified"] == 1


async def test_pods_sharing_an_address_are_not_held_back_by_their_real_tokens(start_lockd, kube) -> None:
    """hostNetwork pods ask from the node's address: each real token is reviewed, and given back."""
    await make_node(kube)
    pods = [await make_pod(kube, f"host-{n}", token_volume=True) for n in range(15)]
    lockd = await start_lockd(limit_policy(20), **NODE_BUDGET)
    async with caller("127.0.0.3") as node_address:
        answers = [await ask(node_address, lockd, pod, await pod_token(kube, pod)) for pod in pods]
    assert [status for status, _ in answers] == [200] * 15
    assert reviewer(lockd).api_reviews == 15


async def test_many_addresses_stay_within_the_map_and_the_nodes_budget(start_lockd, kube) -> None:
    await make_node(kube)
    victim = await make_pod(kube, "victim", token_volume=True)
    lockd = await start_lockd(limit_policy(1), token_review_callers=4, **NODE_BUDGET)
    statuses: list[int] = []
    for last in range(10, 18):  # eight addresses, twice the map's cap
        async with caller(f"127.0.0.{last}") as session:
            statuses += [
                (await ask(session, lockd, victim, MADE_UP.format(n=f"{last}-{n}")))[0] for n in range(5)
            ]
    tokens = reviewer(lockd)
    assert len(tokens.callers) == 4  # the least recently seen forgotten
    assert tokens.api_reviews == 20 and statuses.count(403) == 20  # the node's budget, the backstop
    refusals = await metric(lockd, "stagger_lockd_pod_token_refusals_total", "reason")
    assert refusals == {"rejected": 20, "node_budget": 20}


@pytest.mark.parametrize(
    ("seen", "kept"),
    [
        pytest.param(["a", "b", "c"], ["a", "b", "c"], id="under the cap"),
        pytest.param(["a", "b", "c", "d"], ["b", "c", "d"], id="the oldest out"),
        pytest.param(["a", "b", "a", "c", "d"], ["a", "c", "d"], id="seen again, kept"),
    ],
)
def test_caller_budgets_keep_the_most_recently_seen(seen: list[str], kept: list[str]) -> None:
    budgets = CallerBudgets(burst=2, fill_seconds=60.0, capacity=3)
    for peer in seen:
        assert budgets.of(peer, now=0.0).take(0.0)
    assert len(budgets) == len(kept)
    # A remembered caller has spent from its budget; a forgotten one would start full.
    for peer in kept:
        assert budgets.of(peer, now=0.0).tokens(0.0) == 2 - seen.count(peer)
