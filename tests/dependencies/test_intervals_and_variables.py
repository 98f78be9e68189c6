"""A dependency's own intervals and its node variables (issue 40, pod-startup-lock's --passHc/--failHc and
`--check http://$(HOST_IP):9999`): how soon a check comes again (`pause_after`: `interval` after an answer,
`failInterval` after a failure, --dependency-interval for one it does not set), the target a node checks
(`node_target`: $(NODE_NAME), $(NODE_IP), an IPv6 node IP in brackets; a missing one names the setting),
the retry hint of a dependency denial (the soonest next check of a failing one), /status's fields
(`checkedTarget`, `intervalSeconds`, `failIntervalSeconds`; the text table). Then against real servers on
loopback: the checker waits `interval` or `failInterval` as the dependency answers or not, expands the
variables (IPv4, IPv6, a node name) and reports a missing one without connecting; and a real lockd
process with `--node-ip` checks `http://$(NODE_IP):PORT` and shows it in /status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lockd.dependencies import (
    DependencyChecks,
    Result,
    check,
    dependency_status,
    node_target,
    node_variables,
    pause_after,
)
from lockd.metrics import Metrics
from lockd.serviceparts import NoNodeState, read_gates
from lockd.status import _dependency_line
from stagger import policy
from tests.processes import free_port, running_lockd
from tests.waiting import eventually

V4 = node_variables(node_name="worker-1", node_ip="10.0.0.7")


def dep(target: str, *, kind: Any = "http", **intervals: float) -> policy.Dependency:
    return policy.Dependency(kind=kind, target=target, **intervals)


@pytest.mark.parametrize(
    ("dependency", "ok", "expected"),
    [
        pytest.param(dep("db:1", kind="tcp"), True, 5.0, id="default-after-an-answer"),
        pytest.param(dep("db:1", kind="tcp"), False, 5.0, id="default-after-a-failure"),
        pytest.param(dep("db:1", kind="tcp", interval=60.0, fail_interval=10.0), True, 60.0, id="pass-hc"),
        pytest.param(dep("db:1", kind="tcp", interval=60.0, fail_interval=10.0), False, 10.0, id="fail-hc"),
        pytest.param(dep("db:1", kind="tcp", interval=60.0), False, 5.0, id="fail-defaults-to-the-flag"),
        pytest.param(dep("db:1", kind="tcp", fail_interval=1.0), True, 5.0, id="pass-defaults-to-the-flag"),
    ],
)
def test_pause_after(dependency: policy.Dependency, ok: bool, expected: float) -> None:
    assert pause_after(dependency, ok=ok, default=5.0) == expected


@pytest.mark.parametrize(
    ("dependency", "variables", "expected"),
    [
        pytest.param(dep("http://$(NODE_IP):9999"), V4, "http://10.0.0.7:9999", id="node-ip"),
        pytest.param(
            dep("http://$(NODE_IP):9999/"), node_variables(node_name="n", node_ip="fd00::7"), "http://[fd00::7]:9999/",
            id="node-ip-v6",
        ),
        pytest.param(dep("$(NODE_NAME):22", kind="tcp"), V4, "worker-1:22", id="node-name"),
        pytest.param(dep("http://es:9200/"), {}, "http://es:9200/", id="no-variables"),
    ],
)  # fmt: skip
def test_node_target(dependency: policy.Dependency, variables: dict[str, str], expected: str) -> None:
    assert node_target(dependency, variables) == expected


def test_a_node_without_its_ip_names_the_setting() -> None:
    variables = node_variables(node_name="worker-1", node_ip=None)
    assert variables == {"NODE_NAME": "worker-1"}
    with pytest.raises(ValueError, match=r"^lockd does not know \$\(NODE_IP\) on this node: set --node-ip"):
        node_target(dep("$(NODE_IP):80", kind="tcp"), variables)


def _down(error: str = "connection refused") -> Result:
    return Result(error=error, checked_at=1.0, checked_wall=1_700_000_000.0)


def test_the_retry_hint_is_the_soonest_next_check_of_a_failing_dependency() -> None:
    slow = dep("a:1", kind="tcp", fail_interval=30.0)
    fast = dep("b:1", kind="tcp", fail_interval=2.0)
    plain = dep("c:1", kind="tcp")
    up = dep("d:1", kind="tcp", fail_interval=0.5)
    results = {slow: _down(), fast: _down(), plain: _down(), up: Result("", 1.0, 1.0)}

    def retry(*dependencies: policy.Dependency) -> float:
        node_policy = policy.NodePolicy(name="p", dependencies=dependencies)
        gates = read_gates(
            node_policy,
            node_state=NoNodeState(),
            dependencies=lambda: results,
            dependency_retry=5.0,
            holders=[],
        )
        return gates.dependency_retry

    assert retry(slow, fast, plain, up) == 2.0
    assert retry(slow, plain) == 5.0
    assert retry(slow, up) == 30.0
    assert retry(up) == 5.0  # none failing: the flag's


def test_status_shows_the_checked_target_and_the_intervals_in_force() -> None:
    secret = dep("https://u:pw@$(NODE_NAME).nodes.example/ready", interval=60.0)
    on_ip = dep("$(NODE_IP):9999", kind="tcp", fail_interval=1.5)
    shown = dependency_status(
        (secret, on_ip), {}, now=0.0, interval=5.0, variables=node_variables(node_name="w1", node_ip=None)
    )
    assert [
        (each["target"], each["checkedTarget"], each["intervalSeconds"], each["failIntervalSeconds"])
        for each in shown
    ] == [
        ("https://$(NODE_NAME).nodes.example/ready", "https://w1.nodes.example/ready", 60.0, 5.0),
        ("$(NODE_IP):9999", None, 5.0, 1.5),  # this lockd has no node IP
    ]
    checked = dependency_status((on_ip,), {on_ip: _down()}, now=3.0, variables=V4)[0]
    assert _dependency_line(checked) == (
        "dependency tcp $(NODE_IP):9999 [10.0.0.7:9999]: DOWN: connection refused (checked 2.0s ago)"
    )


# --- against real servers on loopback --------------------------------------------------------------------


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as opened:
        yield opened


class Health:
    """/healthz answering `status`, counting its requests."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.Response(status=self.status)


class Sleeps:
    """The checker's sleep: each pause it asks for is handed to the test, which lets it go on."""

    def __init__(self) -> None:
        self.asked: asyncio.Queue[float] = asyncio.Queue()
        self.go = asyncio.Semaphore(0)

    async def __call__(self, delay: float) -> None:
        await self.asked.put(delay)
        await self.go.acquire()

    async def next(self) -> float:
        return await asyncio.wait_for(self.asked.get(), timeout=10.0)


@pytest.mark.slow
async def test_the_checker_waits_the_interval_after_an_answer_and_the_fail_interval_after_a_failure(
    aiohttp_server, session: aiohttp.ClientSession
) -> None:
    health = Health(status=200)
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    dependency = dep(f"http://$(NODE_IP):{server.port}/healthz", interval=60.0, fail_interval=7.0)
    plain = dep(f"http://127.0.0.1:{server.port}/healthz")
    sleeps = Sleeps()
    checks = DependencyChecks(
        interval=3.0,
        metrics=Metrics(),
        variables=node_variables(node_name="n1", node_ip="127.0.0.1"),
        sleep=sleeps,
    )
    checks.want((dependency,))
    task = asyncio.create_task(checks.run(session=session, on_change=lambda: None))
    try:
        assert await sleeps.next() == 60.0  # answered: --passHc
        assert checks.results[dependency].ok
        health.status = 503
        sleeps.go.release()
        assert await sleeps.next() == 7.0  # failed: --failHc
        assert checks.results[dependency].error == "HTTP 503"
        sleeps.go.release()
        assert await sleeps.next() == 7.0
        health.status = 200
        sleeps.go.release()
        assert await sleeps.next() == 60.0
        assert health.requests == 4  # one check per pause
        checks.want((plain,))
        assert await sleeps.next() == 3.0  # its own: --dependency-interval
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.slow
async def test_node_ip_v4_and_v6_reach_the_server(aiohttp_server, session: aiohttp.ClientSession) -> None:
    health = Health()
    for host, node_ip in (("127.0.0.1", "127.0.0.1"), ("::1", "::1")):
        server = await aiohttp_server(health.app(), host=host)
        dependency = dep(f"http://$(NODE_IP):{server.port}/healthz")
        variables = node_variables(node_name="n1", node_ip=node_ip)
        result = await check(dependency, session=session, variables=variables)
        assert result.ok, (node_ip, result.error)
        await server.close()
    assert health.requests == 2


@pytest.mark.slow
async def test_node_name_in_a_tcp_target(session: aiohttp.ClientSession) -> None:
    connected = asyncio.Event()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        writer.close()

    async with await asyncio.start_server(accept, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        # A node named by its address (some clusters name nodes so): $(NODE_NAME) is that name.
        variables = node_variables(node_name="127.0.0.1", node_ip=None)
        result = await check(dep(f"$(NODE_NAME):{port}", kind="tcp"), session=session, variables=variables)
        assert result.ok, result.error
        await asyncio.wait_for(connected.wait(), timeout=5.0)


@pytest.mark.slow
async def test_a_missing_node_ip_fails_the_check_without_connecting(
    aiohttp_server, session: aiohttp.ClientSession
) -> None:
    health = Health()
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    dependency = dep(f"http://$(NODE_IP):{server.port}/healthz")
    result = await check(dependency, session=session, variables=node_variables(node_name="n1", node_ip=None))
    assert result.error == "lockd does not know $(NODE_IP) on this node: set --node-ip (STAGGER_NODE_IP)"
    assert health.requests == 0


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def _status(client: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    async with client.get(f"http://127.0.0.1:{port}/status") as response:
        document: dict[str, Any] = await response.json()
        return document


@pytest.mark.slow
async def test_a_lockd_process_checks_its_node_ip(
    aiohttp_server, client: aiohttp.ClientSession, tmp_path: Path
) -> None:
    health = Health(status=503)
    server = await aiohttp_server(health.app(), host="127.0.0.1")
    target = f"http://$(NODE_IP):{server.port}/healthz"
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        "nodePolicies:\n- name: deps\n  dependencies:\n"
        f"  - http: '{target}'\n    interval: 1h\n    failInterval: 100ms\n"
    )
    port = free_port()
    with running_lockd("--policies", str(policies), "--node-ip", "127.0.0.1", port=port):

        async def down() -> bool:
            shown = (await _status(client, port))["dependencies"]
            return bool(shown) and shown[0]["up"] is False

        await eventually(down, within=15.0, what="the dependency checked and down")
        (shown,) = (await _status(client, port))["dependencies"]
        assert (shown["target"], shown["checkedTarget"]) == (
            target,
            f"http://127.0.0.1:{server.port}/healthz",
        )
        assert (shown["intervalSeconds"], shown["failIntervalSeconds"], shown["error"]) == (
            3600.0,
            0.1,
            "HTTP 503",
        )
        policy_shown = (await _status(client, port))["policy"]["dependencies"][0]
        assert (policy_shown["intervalSeconds"], policy_shown["failIntervalSeconds"]) == (3600.0, 0.1)
        health.status = 200  # seen at the next check, 100 ms after the last failed one

        async def granted() -> bool:
            params = {"namespace": "deps", "name": "first", "wait": "0"}
            async with client.get(f"http://127.0.0.1:{port}/v1/lock", params=params) as response:
                return response.status == 200

        await eventually(granted, within=15.0, what="the grant once the dependency answers")
