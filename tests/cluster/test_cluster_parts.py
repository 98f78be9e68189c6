"""Cluster building blocks without an API server: node manifests, lockd processes, clock, launch gate, herd output."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path

import aiohttp
import pytest

from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.nodeagent import node_manifests
from sim.cluster.kubernetes.placement import node_info
from sim.cluster.launchers.initproc import LaunchGate
from sim.cluster.launchers.lockdproc import (
    LOWEST_PORT,
    LockdError,
    LockdProcess,
    LockdSpec,
    _ephemeral_start,
    common_free_port,
)
from sim.cluster.measure.herd import RunResult, as_json, format_table, plot
from sim.cluster.scenario import NodePool


def test_node_manifests_look_like_a_registered_node() -> None:
    pool = NodePool(
        count=2,
        cores=2.5,
        memory="8Gi",
        labels={"pool": "a"},
        taints=({"key": "x", "value": "y", "effect": "NoSchedule"},),
    )
    node, status = node_manifests(index=1, pool=pool, ip="127.0.1.2")
    assert node["metadata"]["name"] == "sim-node-1"
    assert node["metadata"]["labels"] == {
        "kubernetes.io/hostname": "sim-node-1",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "pool": "a",
    }
    assert node["spec"]["taints"] == [{"key": "x", "value": "y", "effect": "NoSchedule"}]
    assert status["allocatable"] == {"cpu": "2500m", "memory": "8Gi", "pods": "110"}
    assert {"type": "InternalIP", "address": "127.0.1.2"} in status["addresses"]
    info = node_info({**node, "status": status})
    assert (info.allocatable.cpu_millis, info.ready) == (2500, True)


def test_sim_clock_scales_time() -> None:
    now = [100.0]
    clock = SimClock(
        time_scale=10, monotonic=lambda: now[0], wall_start=dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    )
    now[0] = 102.5
    assert clock.now() == 25.0
    assert clock.wall_delay(5) == 0.5 and clock.wall_delay(-1) == 0
    assert clock.datetime_now() == dt.datetime(2024, 1, 1, 0, 0, 25, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="time_scale"):
        SimClock(time_scale=0)


@pytest.mark.slow  # real lockd processes
async def test_lockd_processes_serve_on_node_addresses_and_stop(tmp_path: Path) -> None:
    policies = tmp_path / "p.yaml"
    policies.write_text("nodePolicies:\n- name: demo\n  throttleConfig: {maxConcurrent: {value: 1}}\n")
    hosts = ["127.0.1.1", "127.0.1.2"]
    port = common_free_port(hosts)
    # Never from the kernel's ephemeral range, where another process's connection could take it first.
    assert LOWEST_PORT <= port < _ephemeral_start()
    procs = []
    for i, host in enumerate(hosts):
        load = tmp_path / f"{i}.json"
        load.write_text('{"cpuPercent": 0, "ioPercent": 0}')
        procs.append(
            LockdProcess(
                LockdSpec(
                    node_name=f"n{i}",
                    host=host,
                    port=port,
                    policies=policies,
                    load_file=load,
                    log_file=tmp_path / f"{i}.log",
                    cores=2,
                )
            )
        )
    try:
        for p in procs:
            await p.start()
        async with aiohttp.ClientSession() as session:
            for p in procs:
                await p.wait_ready(session=session, deadline=20)
            # One slot per node, and the nodes do not share it.
            statuses = []
            for p, name in ((procs[0], "a"), (procs[0], "b"), (procs[1], "b")):
                async with session.get(
                    f"{p.spec.url}/v1/lock", params={"namespace": "d", "name": name, "wait": "0"}
                ) as r:
                    statuses.append(r.status)
            assert statuses == [200, 423, 200]
    finally:
        for p in procs:
            await p.stop(grace=5)
    assert all(p.returncode is not None for p in procs)


@pytest.mark.slow  # real lockd processes
async def test_a_lockd_that_cannot_start_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("nodePolicies: [{throttleConfig: {maxConcurrent: {value: -3}}}]\n")
    load = tmp_path / "l.json"
    load.write_text("{}")
    proc = LockdProcess(
        LockdSpec(
            node_name="n",
            host="127.0.1.1",
            port=common_free_port(["127.0.1.1"]),
            policies=bad,
            load_file=load,
            log_file=tmp_path / "l.log",
            cores=1,
        )
    )
    await proc.start()
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(LockdError, match="exited"):
                await proc.wait_ready(session=session, deadline=20)
    finally:
        await proc.stop(grace=5)


def test_herd_output(tmp_path: Path) -> None:
    runs = [
        RunResult(
            stagger=False,
            pods=4,
            all_ready_seconds=90.5,
            restarts=12,
            peak_starting={"a": 4, "b": 3},
            api_requests=300,
            timeline=[(10.0, 1), (90.5, 4)],
        ),
        RunResult(
            stagger=True,
            pods=4,
            all_ready_seconds=None,
            restarts=0,
            peak_starting={"a": 2, "b": 2},
            api_requests=200,
            timeline=[(3.0, 2)],
        ),
    ]
    table = format_table(runs).splitlines()
    assert table[0].split()[:3] == ["run", "pods", "all"]
    assert "no stagger" in table[1] and "90.5" in table[1] and "4 (4, 3)" in table[1]
    assert "not reached" in table[2]
    png = plot(runs, path=tmp_path / "x" / "t.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(as_json(runs, png=png))
    assert [r["run"] for r in data["runs"]] == ["no stagger", "stagger"]
    assert data["runs"][0]["maxStartingPerNode"] == 4 and data["timelinePng"] == str(png)


async def test_the_launch_gate_lets_a_few_processes_start_at_a_time_oldest_first() -> None:
    gate = LaunchGate(concurrency=1, hold_seconds=60)
    first = await gate.enter()
    order: list[str] = []

    async def later(name: str) -> None:
        release = await gate.enter()
        order.append(name)
        release()

    waiters = [asyncio.create_task(later(n)) for n in ("second", "third")]
    await asyncio.sleep(0)
    assert order == []
    first()
    first()  # idempotent: releasing twice does not let two through
    await asyncio.gather(*waiters)
    assert order == ["second", "third"]
    quick = LaunchGate(concurrency=1, hold_seconds=0.01)
    await quick.enter()  # never released by hand: the hold ends by itself
    await asyncio.wait_for(quick.enter(), timeout=5)
