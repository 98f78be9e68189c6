"""pod-pacemaker's loadAvg and incrementBy in lockd: the 423 names loadAvg with its numbers, /status shows
the load average and the load assumed for the grants since the last reading, /metrics exports the load
average (no sample when unknown), a group's refusal gives a reservation's increment back, and a real
`python -m lockd` answers 423 on a load file's high load average and 200 once it drops."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from lockd import ledger
from lockd.appstate import LOAD
from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.service import LockService
from stagger import policy, throttles
from tests.processes import free_port, get, running_lockd
from tests.waiting import eventually

LOAD_AVG_POLICY = (
    "nodePolicies:\n"
    "- name: test\n"
    "  throttleConfig:\n"
    "    loadAvg: {maxLoad: 3, incrementBy: 0.5}\n"
    "    cpu: {maxLoad: 90, incrementBy: 5}\n"
)


def reading(load1: float | None, *, at: float) -> throttles.LoadSample:
    return throttles.LoadSample(
        cpu_percent=20.0, io_percent=0.0, load1=load1, source="test", taken_at=at, load1_taken_at=at
    )


async def test_load_average_with_increments_over_http(start_lockd) -> None:
    lockd = await start_lockd(LOAD_AVG_POLICY, sample_interval=3600.0)
    cache = lockd.app[LOAD]
    # The sampler reads once as it starts, then not for an hour: the test sets each reading itself.
    first = cache.sample

    async def sampled_once() -> bool:
        return cache.sample is not first

    await eventually(sampled_once, what="the sampler's first reading")
    cache.sample = reading(1.6, at=1.0)
    for name in ("a", "b", "c"):
        assert (await lockd.lock(name)).status == 200, name
    held = await lockd.lock("d")
    assert held.status == 423
    body = await held.json()
    assert body["reason"] == (
        "load average 3.10 (1.60 sampled + 1.50 assumed for 3 grants since) is not below loadAvg.maxLoad 3"
    )
    status = await lockd.status()
    assert status["load"]["load1"] == 1.6
    assert status["load"]["throttles"] == [
        {"throttle": "loadAvg", "maxLoad": 3.0, "sampled": 1.6, "grantsSinceSample": 3, "assumed": 1.5},
        {"throttle": "cpu", "maxLoad": 90.0, "sampled": 20.0, "grantsSinceSample": 3, "assumed": 15.0},
    ]
    assert status["queue"][0]["reason"] == body["reason"]
    text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    assert "load1 1.60" in text
    assert "loadAvg < 3: 1.60 sampled + 1.50 assumed for 3 grants since" in text
    assert "cpu < 90: 20% sampled + 15% assumed for 3 grants since" in text
    # A fresh reading of the same load: the grants since it are none, so d goes.
    cache.sample = reading(1.6, at=2.0)
    assert (await lockd.lock("d")).status == 200


async def test_no_load_average_no_sample_and_no_hold(start_lockd) -> None:
    lockd = await start_lockd(LOAD_AVG_POLICY)  # the fixture's load file has no load1
    for name in ("a", "b", "c", "d", "e"):
        assert (await lockd.lock(name)).status == 200, name
    status = await lockd.status()
    assert status["load"]["load1"] is None
    assert status["load"]["throttles"][0]["sampled"] is None
    metrics = await (await lockd.client.get("/metrics")).text()
    assert "# TYPE stagger_lockd_load1 gauge" in metrics
    assert "\nstagger_lockd_load1 " not in metrics  # an absent series, not a -1


class Refusing:
    """The group pacer saying no to every reservation."""

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict:
        await asyncio.sleep(0)
        return throttles.Verdict(allowed=False, reason="group full", throttle="group", retry_after=30.0)


async def test_a_reservation_the_group_refuses_gives_its_increment_back() -> None:
    sample = reading(2.0, at=1.0)
    node_policy = policy.NodePolicy(
        name="load",
        throttle=policy.ThrottleConfig(load_avg=policy.LoadAvg(max_load=3, increment_by=0.5)),
    )
    service = LockService(
        active=ActivePolicy(node_policy, "test", "test"),
        cores=4,
        metrics=Metrics(),
        waiter_idle_timeout=30.0,
        load=lambda: sample,
        finisher=Refusing(),
    )
    for name in ("a", "b", "c"):
        outcome = await service.ask(namespace="t", name=name, uid="")
        assert isinstance(outcome, ledger.Denied) and outcome.reason == "group full"
    # Three reservations, none of them a pod starting: nothing is assumed for them.
    (load_avg,) = service.checks.load_readings()
    assert (load_avg.grants, load_avg.assumed) == (0, 0.0)


def test_a_real_lockd_holds_on_the_load_file_load_average_until_it_drops(tmp_path: Path) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        "nodePolicies:\n- name: busy\n  throttleConfig:\n    loadAvg: {maxLoad: 4, perCore: true}\n"
    )
    load_file = tmp_path / "load.json"
    # 2 cores (--cores), 9.0 over 2 is 4.5 per core: not below 4.
    load_file.write_text(json.dumps({"cpuPercent": 10.0, "ioPercent": 0.0, "load1": 9.0}))
    port = free_port()
    args = (
        "--policies",
        str(policies),
        "--load-file",
        str(load_file),
        "--cores",
        "2",
        "--sample-interval",
        "0.1s",
    )
    with running_lockd(*args, port=port):
        url = f"http://127.0.0.1:{port}/v1/lock?namespace=default&name=web-0"
        status, body = get(url)
        assert status == 423, body
        assert json.loads(body)["reason"] == (
            "load average per core 4.50 (9.00 over 2 cores) is not below loadAvg.maxLoad 4"
        )
        _, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert "stagger_lockd_load1 9.0\n" in metrics
        tmp = load_file.with_name("load.json.tmp")
        tmp.write_text(json.dumps({"cpuPercent": 10.0, "ioPercent": 0.0, "load1": 7.5}))
        tmp.replace(load_file)
        # The next sample (0.1 s) lets the pod through; a long poll is answered as soon as it does.
        started = time.monotonic()
        status, body = get(url + "&wait=10")
        assert status == 200, body
        assert time.monotonic() - started < 5.0
        _, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert "stagger_lockd_load1 7.5\n" in metrics
