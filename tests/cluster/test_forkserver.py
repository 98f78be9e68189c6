"""The init client fork server (sim.cluster.launchers.forkserver): the real init client in a forked process of its
own, its output, exit code and signals as with exec."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sim.cluster.launchers.forkserver import ForkServer
from sim.cluster.launchers.initproc import process_env
from sim.cluster.launchers.stopping import stop_process


async def test_forked_init_clients_exit_and_stop_as_exec_ones(tmp_path: Path) -> None:
    server = ForkServer(socket_path=tmp_path / "fork.sock", env=process_env({}, hostname="forkserver"))
    await server.start()
    try:
        # No configuration: the init client says so and exits 0 (fail-open).
        bad = await server.spawn([], env=process_env({}, hostname="p"), nice=0)
        out, _ = await asyncio.wait_for(bad.communicate(), timeout=10)
        assert bad.returncode == 0
        assert b"invalid configuration" in out
        # Nothing listens at the lockd URL: it retries until stopped; SIGTERM ends it with 143.
        env = {"STAGGER_LOCKD_URL": "http://127.0.0.1:1", "POD_NAME": "a", "POD_NAMESPACE": "b"}
        first = await server.spawn([], env=process_env(env, hostname="a"), nice=0)
        second = await server.spawn([], env=process_env(env, hostname="b"), nice=0)
        assert first.pid != second.pid
        await asyncio.sleep(0.3)
        # The second's end must not wait for the first's (a child keeps no other child's connection).
        await asyncio.wait_for(stop_process(second, grace=5), timeout=10)
        assert second.returncode == 143
        out, _ = await second.communicate()
        assert b"stopped by SIGTERM" in out
        await asyncio.wait_for(stop_process(first, grace=5), timeout=10)
        assert first.returncode == 143
    finally:
        await server.stop()
