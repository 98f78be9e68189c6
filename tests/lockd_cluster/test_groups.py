"""lockd's side of group pacing against a small controller played by the test (a real aiohttp server):
the bearer token and request body, no node slot consumed while the group says no, pods of other groups
going ahead, and groupFailurePolicy open/closed when the controller cannot be reached; a grant the group
pacer had no say in (unreachable, or no --controller-url) is marked `failed-open` on the pod with its cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from stagger.kube import PODS
from tests.lockd_cluster.conftest import NAMES, make_node, make_pod
from tests.policies import limit_policy


class Controller:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.allow: set[str] = set()

    async def grant(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append((request.headers.get("Authorization", ""), body))
        if body["group"] in self.allow:
            return web.json_response({"granted": True, "reason": "ok", "retryAfter": 0})
        return web.json_response(
            {"granted": False, "reason": "4 of 4 starting (exponential)", "retryAfter": 30}
        )


@pytest.fixture
async def controller(aiohttp_server) -> tuple[Controller, str]:
    fake = Controller()
    app = web.Application()
    app.router.add_post("/v1/groups/grant", fake.grant)
    server = await aiohttp_server(app)
    return fake, str(server.make_url("")).rstrip("/")


async def test_group_says_no_then_other_pods_go_first(start_lockd, kube, controller, tmp_path: Path) -> None:
    fake, url = controller
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    await make_node(kube)
    held = await make_pod(kube, "held", labels={NAMES.group_label: "g-slow"})
    other = await make_pod(kube, "other")
    lockd = await start_lockd(limit_policy(1), controller_url=url, controller_token_file=token)
    denied = await lockd.lock(held)
    assert denied.status == 423
    body = await denied.json()
    assert body["reason"] == "group g-slow: 4 of 4 starting (exponential)"
    assert int(denied.headers["Retry-After"]) == 30
    assert fake.requests == [
        (
            "Bearer secret-token",
            {
                "namespace": "default",
                "name": "held",
                "uid": held["metadata"]["uid"],
                "group": "g-slow",
                "node": "node-a",
            },
        )
    ]
    # No node slot was consumed, and the held pod steps aside: a pod without group starts.
    status = await lockd.status()
    assert status["slots"] == []
    assert (await lockd.lock(other)).status == 200
    stored = await kube.get(PODS, name="held", namespace="default")
    assert NAMES.granted_at_annotation not in (stored["metadata"].get("annotations") or {})


async def test_group_says_yes(start_lockd, kube, controller) -> None:
    fake, url = controller
    fake.allow.add("g-fast")
    await make_node(kube)
    pod = await make_pod(kube, "fast", labels={NAMES.group_label: "g-fast"})
    lockd = await start_lockd(limit_policy(1), controller_url=url)
    assert (await lockd.lock(pod)).status == 200
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("policy", "status", "reason"),
    [
        pytest.param("open", 200, None, id="open"),
        pytest.param("closed", 423, "(groupFailurePolicy closed)", id="closed"),
    ],
)
async def test_unreachable_controller(
    start_lockd, kube, unused_tcp_port: int, policy: str, status: int, reason
) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "grouped", labels={NAMES.group_label: "g"})
    lockd = await start_lockd(
        limit_policy(1),
        controller_url=f"http://127.0.0.1:{unused_tcp_port}",
        group_unavailable_after=0.3,
        group_failure_policy=policy,
    )
    first = await lockd.lock(pod)
    assert first.status == 423
    assert "unreachable" in (await first.json())["reason"]
    response = await lockd.lock(pod, wait="2")
    assert response.status == status
    if reason:
        assert reason in (await response.json())["reason"]
    # Granted without the group pacer: the grant says so on the pod, for the controller to count.
    stored = await kube.get(PODS, name="grouped", namespace="default")
    marked = (stored["metadata"].get("annotations") or {}).get(NAMES.failed_open_annotation)
    assert marked == ("groupPacerUnreachable" if status == 200 else None)


async def test_no_controller_url_marks_a_grouped_grant(start_lockd, kube) -> None:
    await make_node(kube)
    grouped = await make_pod(kube, "grouped", labels={NAMES.group_label: "g"})
    plain = await make_pod(kube, "plain")
    lockd = await start_lockd(limit_policy(2))
    assert (await lockd.lock(grouped)).status == 200
    assert (await lockd.lock(plain)).status == 200
    marks = {}
    for name in ("grouped", "plain"):
        stored = await kube.get(PODS, name=name, namespace="default")
        marks[name] = (stored["metadata"].get("annotations") or {}).get(NAMES.failed_open_annotation)
    assert marks == {"grouped": "groupPacerNotConfigured", "plain": None}


async def test_a_group_no_gives_the_rate_limit_token_back(start_lockd, kube, controller) -> None:
    _, url = controller
    await make_node(kube)
    held = await make_pod(kube, "held", labels={NAMES.group_label: "g-slow"})
    other = await make_pod(kube, "other")
    # One start-up token an hour: the reservation for `held` takes it; the group's no must return it.
    policy = limit_policy(2, extra="    rateLimit: {burst: 1, fillFactor: 1h}\n")
    lockd = await start_lockd(policy, controller_url=url)
    assert (await lockd.lock(held)).status == 423
    granted = await lockd.lock(other)
    assert granted.status == 200, await granted.text()
