"""lockd and the real controller process together on the API emulator (lock mode, a group of at most one
pod starting): the pod the group holds steps aside, lockd's one long poll to the controller
(`POST /v1/groups/wait`) names it, and the moment the group gains room (the starting pod turns Ready)
the held pod's own long poll to lockd is answered 200, on the grant the controller gave in the stream's
answer. No per-pod polling in between: the pod steps aside for --group-recheck (60 s), far longer than the
test takes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from sim.emulator.server import ApiServer
from tests.groups_api.controller import TOKEN, running_controller
from tests.lockd_cluster.conftest import NAMES, make_node, make_pod, pod_token, set_ready

pytestmark = pytest.mark.e2e

POLICIES = """\
staggeringPolicies:
- name: one-at-a-time
  labelSelector: {matchLabels: {app: web}}
  pacer: {maxConcurrent: {value: 1}}
nodePolicies:
- name: test
  holdTimeout: 2m
  throttleConfig:
    maxConcurrent: {value: 5}
"""


async def test_a_held_pod_is_granted_as_soon_as_its_group_has_room(
    api: ApiServer, kube, start_lockd, tmp_path: Path
) -> None:
    async with running_controller(
        server=api, tmp_path=tmp_path / "controller", policies=POLICIES
    ) as controller:
        token = tmp_path / "token"
        token.write_text(TOKEN)
        await make_node(kube)
        first = await make_pod(kube, "web-1", labels={"app": "web"})
        second = await make_pod(kube, "web-2", labels={"app": "web"})
        assert NAMES.group_label in second["metadata"]["labels"]  # grouped by the controller's admission
        await controller.until(lambda groups: groups["pods"] == 2)
        ca = tmp_path / "controller-ca.pem"
        controller.certs.ca.cert_pem.write_to_path(str(ca))
        lockd = await start_lockd(
            POLICIES,
            controller_url=controller.process.url,
            controller_token_file=token,
            controller_ca_file=ca,
        )
        # Admission gave both pods their token for lockd: each asks with its own, as its init client does.
        granted = await lockd.lock(first, token=await pod_token(kube, first))
        assert granted.status == 200, await granted.text()
        waiting = asyncio.create_task(lockd.lock(second, token=await pod_token(kube, second), wait="30"))
        # The group said no; lockd's wait stream names the held pod to the controller.
        await controller.until(lambda groups: groups["waits"] == 1)
        assert not waiting.done()
        started = time.monotonic()
        await set_ready(kube, first)
        answer = await asyncio.wait_for(waiting, timeout=20)
        elapsed = time.monotonic() - started
        assert answer.status == 200, await answer.text()
        assert elapsed < 5.0  # generous; the benchmark measures it
        status = await lockd.status()
        assert status["counters"]["granted"] == 2, status
        stream = status["groupStream"]
        # Woken by the stream, not by asking again: one wake-up, a couple of long polls, nobody aside.
        assert stream["connected"] and stream["wakeups"] == 1 and stream["stepAside"] == 0, stream
        assert stream["requests"] <= 4, stream
        # Granted in the stream's answer: the pod started on that grant, not on a request of its own.
        assert stream["pushedGrants"] == {"received": 1, "used": 1, "lapsed": 0, "held": 0}, stream
        metrics = await (await lockd.client.get("/metrics")).text()
        assert 'stagger_lockd_pushed_grants_total{outcome="used"} 1' in metrics
