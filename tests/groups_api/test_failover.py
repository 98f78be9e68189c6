"""Two controller replicas on the API emulator, electing their leader with a Lease (short timings: 3 s
lease, 2 s renew deadline, 0.5 s retry): only the leader grants, the follower answers 503 naming it; when
the leader is killed (no release) the follower takes over after the lease expires and counts the grants
recorded on the pods (`granted-at`, as lockd writes it), so the group never exceeds its limit; when the
leader stops gracefully it gives the Lease up and the follower takes over at once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from sim.emulator.server import ApiServer
from tests.groups_api.controller import TOKEN, Api, Controller, running_controller
from tests.webhook.reviews import enabled, pod

pytestmark = pytest.mark.e2e

POLICIES = """\
staggeringPolicies:
- name: two-at-a-time
  labelSelector: {matchLabels: {app: web}}
  pacer: {maxConcurrent: {value: 2}}
"""
TIMINGS = ("--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "0.5s")


async def _grants(controller: Controller, names: list[str]) -> list[bool]:
    return [(await controller.grant(name))["granted"] for name in names]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
async def test_the_follower_takes_over_without_exceeding_the_limit(
    tmp_path: Path, stop: signal.Signals
) -> None:
    async with (
        ApiServer() as server,
        running_controller(server=server, tmp_path=tmp_path / "a", policies=POLICIES, extra=TIMINGS) as first,
        running_controller(
            server=server,
            tmp_path=tmp_path / "b",
            policies=POLICIES,
            extra=TIMINGS,
            register=False,
            granting=False,
        ) as second,
    ):
        api = Api(server, first.session)
        names = [f"web-{i}" for i in range(5)]
        for name in names:
            await api.create_pod(pod(name, labels=enabled(app="web")))
        await first.until(lambda groups: groups["pods"] == 5)
        leader = (await first.status())["groups"]["leader"]
        status, refused = await second.post("/v1/groups/grant", {"namespace": "default", "name": names[0]})
        assert status == 503 and refused["leader"] == leader and leader in refused["error"]
        # The follower closes the connection: through the leader Service, the next one reaches the leader.
        async with second.session.post(
            second.process.url + "/v1/groups/grant",
            json={"namespace": "default", "name": names[0]},
            headers={"Authorization": f"Bearer {TOKEN}"},
            ssl=second.certs.client_context(),
        ) as answer:
            assert answer.status == 503 and answer.headers.get("Connection") == "close"

        assert await _grants(first, names[:3]) == [True, True, False]
        for name in names[:2]:
            await api.record_grant(name)

        started = time.monotonic()
        first.process.proc.send_signal(stop)
        await second.until(lambda groups: groups["granting"], within=30)
        took = time.monotonic() - started
        if stop == signal.SIGTERM:
            assert took < 3.0  # released: no lease expiry to wait for (generous: 0.5 s retry period)
        # The new leader counts the two recorded grants: nothing more may start.
        assert await _grants(second, names[2:]) == [False, False, False]
        await api.make_ready(names[0])
        assert await _grants(second, names[2:]) == [True, False, False]
