"""pod-startup-lock's init containers against lockd's port of their own (`--pod-startup-lock-port`,
lockd/startuplock.py), with that project's own client: testbed/peers/pod-startup-lock/init, vendored
verbatim, built with `go build` and run unchanged as a real process against a real `python -m lockd`.

What is covered:
- the peer's client is given a free slot (200) and exits; on 423 it keeps polling until a slot frees, and
  is then granted; two asks from one address take two slots (`pod-startup-lock@<address>#<n>`: behind a
  hostPort's SNAT every pod of a node comes from one address), and on a one-slot node the second waits
  (423) until the first's hold ends;
- the hold: no slot from the port outlives `--pod-startup-lock-hold` (a client's `?duration=N` shortens it,
  never lengthens it), and once it ends the next caller is granted without any release;
- cluster mode (the API emulator): the caller is known by its pod's IP and asks as that pod (its slot
  carries the pod's name, the grant is recorded on the pod, it ends at Ready, it queues behind the lock
  port's waiters in their order; asking again is answered from its pod's slot); an address of no single
  live pod (hostNetwork, finished, shared) gets a new anonymous slot named by that address for each 200;
- `/status` says which slots came from the port, `/metrics` counts its answers under `listener`;
- any other path or method is 404/405 and takes no slot, and the probes are not served there;
- hostile callers on the port: heads over the limit (431), declared bodies over it (413), heads trickled
  past the request deadline (408), and a flood over `--max-connections`, during which the peer's client is
  still served and the lock port is untouched;
- `requested_hold` (a table, and hypothesis: never past the hold), the address of a dual-stack socket, the
  settings' refusal of a port shared with another listener, and the chart's rendering of the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from lockd.settings import SettingsError, parse_settings
from lockd.startuplock import VIA, anonymous_prefix, own_address, requested_hold
from sim.cluster.launchers.lockdproc import LockdProcess, LockdSpec, common_free_port
from sim.emulator.server import ApiServer, ApiServerSettings
from sim.kubeclient import client_for_url
from stagger.kube import PODS, RestClient
from tests.chart.helm import RenderError, by_kind, render
from tests.hostile.floods import Flood
from tests.lockd_cluster.conftest import NAMES, NODE, make_node, make_pod, patch_status, set_ready
from tests.policies import limit_policy
from tests.processes import running_lockd
from tests.tools import ROOT
from tests.waiting import eventually

PEER_SOURCE = ROOT / "testbed" / "peers" / "pod-startup-lock" / "init"
HOST = "127.0.0.1"


# --- the peer's client ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def peer_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vendored client, built as its users build it (one static binary); skipped without Go."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("`go` is not installed: pod-startup-lock's client (testbed/peers) is built from source")
    binary = tmp_path_factory.mktemp("pod-startup-lock") / "init"
    # No dependencies, so no module proxy and no toolchain download: the build works offline.
    env = {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOFLAGS": "-buildvcs=false",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
    }
    done = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=PEER_SOURCE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"go build of {PEER_SOURCE} failed:\n{done.stderr}"
    return binary


@dataclass
class Peer:
    """One run of the peer's client; its log (stderr) read line by line as it comes."""

    proc: asyncio.subprocess.Process
    lines: list[str]

    async def said(self, text: str, *, within: float = 20.0) -> None:
        """Until the client logs a line with `text` (its log is the event: each attempt is one line)."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(within):
            while not any(text in line for line in self.lines):
                line = await self.proc.stderr.readline()
                if not line:
                    raise AssertionError(f"the client exited without saying {text!r}: {self.lines}")
                self.lines.append(line.decode(errors="replace").rstrip())

    async def exit_code(self, *, within: float = 20.0) -> int:
        async with asyncio.timeout(within):
            _, err = await self.proc.communicate()
        self.lines += err.decode(errors="replace").splitlines()
        assert self.proc.returncode is not None
        return self.proc.returncode


@contextlib.asynccontextmanager
async def peer(binary: Path, port: int, *args: str) -> AsyncIterator[Peer]:
    """The client run as an init container runs it: `--host $(HOST_IP) --port 8888 [--duration N]`."""
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        "--host",
        HOST,
        "--port",
        str(port),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield Peer(proc, [])
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# --- lockd as a real process ------------------------------------------------------------------------


@dataclass
class Lockd:
    url: str
    port_url: str
    peer_port: int  # pod-startup-lock's port
    session: aiohttp.ClientSession

    async def status(self) -> dict[str, Any]:
        async with self.session.get(f"{self.url}/status") as response:
            return dict(await response.json())

    async def slots(self) -> dict[str, dict[str, Any]]:
        return {slot["name"]: slot for slot in (await self.status())["slots"]}

    async def metrics(self) -> str:
        async with self.session.get(f"{self.url}/metrics") as response:
            return await response.text()


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = common_free_port([HOST])
        if port not in ports:
            ports.append(port)
    return ports


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    policy: str,
    *,
    hold: str = "10s",
    kubeconfig: Path | None = None,
    extra: tuple[str, ...] = (),
) -> AsyncIterator[Lockd]:
    """`python -m lockd` (standalone, or in cluster mode with `kubeconfig`) with pod-startup-lock's port,
    once it is ready (in cluster mode: the node's pods listed)."""
    port, startup_lock_port = _free_ports(2)
    policies, load = tmp_path / "policies.yaml", tmp_path / "load.json"
    policies.write_text(policy)
    load.write_text(json.dumps({"cpuPercent": 1.0, "ioPercent": 0.0}))
    spec = LockdSpec(
        node_name=NODE,
        host=HOST,
        port=port,
        policies=policies,
        load_file=load,
        log_file=tmp_path / "lockd.log",
        cores=4,
        kubeconfig=kubeconfig,
        log_level="info",
        extra_args=(
            *("--pod-startup-lock-port", str(startup_lock_port), "--pod-startup-lock-hold", hold),
            *extra,
        ),
    )
    proc = LockdProcess(spec)
    await proc.start()
    try:
        async with aiohttp.ClientSession() as session:
            await proc.wait_ready(session=session, deadline=30)
            yield Lockd(spec.url, f"http://{HOST}:{startup_lock_port}", startup_lock_port, session)
    finally:
        await proc.stop(grace=10)


async def ask_from(source: str, url: str, query: str = "") -> tuple[int, str]:
    """`GET /` of the port from the loopback address `source`, as a pod with that IP would ask."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    target = f"{url}/" + (f"?{query}" if query else "")
    async with aiohttp.ClientSession(connector=connector) as session, session.get(target) as response:
        return response.status, await response.text()


def answers(metrics: str) -> dict[str, float]:
    """The port's answers by result: `stagger_lockd_requests_total{listener="podStartupLock"}`."""
    return {
        sample.labels["result"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "stagger_lockd_requests_total" and sample.labels.get("listener") == VIA
    }


def ended(metrics: str) -> dict[str, float]:
    return {
        sample.labels["why"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "stagger_lockd_slots_ended_total"
    }


def anonymous(address: str, number: int) -> str:
    """The name of the `number`th anonymous slot the port granted (counted from 1 in each lockd), asked for
    from `address`."""
    return f"{anonymous_prefix(address)}{number}"


def from_address(names: list[str], address: str) -> list[str]:
    """The anonymous slots among `names` asked for from `address`."""
    return [name for name in names if name.startswith(anonymous_prefix(address))]


# --- standalone: the peer's client as its users run it ----------------------------------------------


async def test_two_asks_from_one_address_take_two_slots_and_the_second_waits_for_the_firsts_hold(
    tmp_path: Path, peer_client: Path
) -> None:
    """Two of the peer's clients from one address (two pods of a node behind the hostPort's SNAT) on a
    one-slot node: the first is granted a slot, and the second is not answered from it but waits (423)
    until that slot's hold (5 s) ends, then takes a slot of its own."""
    async with running(tmp_path, limit_policy(1), hold="5s") as lockd:
        async with peer(peer_client, lockd.peer_port) as client:
            assert await client.exit_code() == 0, client.lines
        assert any("Lock acquired, exiting" in line for line in client.lines)
        slot = (await lockd.slots())[anonymous(HOST, 1)]
        assert slot["namespace"] == "" and slot["via"] == VIA
        assert 0 < slot["expiresInSeconds"] <= 5
        async with peer(peer_client, lockd.peer_port) as second:
            await second.said("Lock not acquired, waiting (status: 423)")
            assert list(await lockd.slots()) == [anonymous(HOST, 1)], "423 took nothing"
            assert await second.exit_code() == 0, second.lines
        assert list(await lockd.slots()) == [anonymous(HOST, 2)]
        counted = answers(await lockd.metrics())
        assert counted["granted"] == 2.0 and counted["denied"] >= 1.0
        assert ended(await lockd.metrics()).get("expired") == 1.0
        async with lockd.session.get(f"{lockd.url}/status", params={"format": "text"}) as response:
            table = await response.text()
        assert "VIA" in table and VIA in table


async def test_the_peers_client_polls_through_423_until_a_slot_frees(
    tmp_path: Path, peer_client: Path
) -> None:
    async with running(tmp_path, limit_policy(1)) as lockd:
        query = {"namespace": "default", "name": "holder"}
        async with lockd.session.get(f"{lockd.url}/v1/lock", params=query) as held:
            assert held.status == 200
            token = held.headers["X-Stagger-Release-Token"]
        async with peer(peer_client, lockd.peer_port) as client:
            await client.said("Lock not acquired, waiting (status: 423)")
            assert list(await lockd.slots()) == ["holder"], "423 took nothing"
            headers = {"X-Stagger-Release-Token": token}
            async with lockd.session.delete(
                f"{lockd.url}/v1/lock", params=query, headers=headers
            ) as released:
                assert released.status == 200
            assert await client.exit_code() == 0, client.lines
        assert list(await lockd.slots()) == [anonymous(HOST, 1)]
        counted = answers(await lockd.metrics())
        assert counted["granted"] == 1.0 and counted["denied"] >= 1.0


async def test_no_slot_from_the_port_outlives_the_hold(tmp_path: Path, peer_client: Path) -> None:
    """The peer's client asks for an hour; the port's hold is 2 s (the node policy's holdTimeout 2 m): the
    slot ends by itself at 2 s, and the next caller is granted without any release."""
    async with running(tmp_path, limit_policy(1), hold="2s") as lockd:
        async with peer(peer_client, lockd.peer_port, "--duration", "3600") as client:
            assert await client.exit_code() == 0, client.lines
        assert (await lockd.slots())[anonymous(HOST, 1)]["expiresInSeconds"] <= 2
        assert await ask_from("127.0.0.2", lockd.port_url) == (423, "Locked")

        async def granted() -> bool:
            return (await ask_from("127.0.0.2", lockd.port_url))[0] == 200

        await eventually(granted, within=15, what="the next caller's grant once the hold ended")
        assert list(await lockd.slots()) == [anonymous("127.0.0.2", 2)]
        assert ended(await lockd.metrics()).get("expired") == 1.0


async def test_a_clients_duration_shortens_the_hold(tmp_path: Path, peer_client: Path) -> None:
    async with running(tmp_path, limit_policy(1), hold="1m") as lockd:
        async with peer(peer_client, lockd.peer_port, "--duration", "3") as client:
            assert await client.exit_code() == 0, client.lines
        assert (await lockd.slots())[anonymous(HOST, 1)]["expiresInSeconds"] <= 3


@pytest.mark.parametrize(
    ("query", "hold", "held"),
    [
        pytest.param("", 10.0, 10.0, id="none: the hold"),
        pytest.param("duration=3", 10.0, 3.0, id="shorter"),
        pytest.param("duration=3600", 10.0, 10.0, id="longer: cut to the hold"),
        pytest.param("duration=0", 10.0, 10.0, id="zero: the hold"),
        pytest.param("duration=-5", 10.0, 10.0, id="negative: the hold"),
        pytest.param("duration=2.5", 10.0, 10.0, id="not whole: the hold, as the peer's Atoi"),
        pytest.param("duration=abc", 10.0, 10.0, id="not a number: the hold"),
        pytest.param("duration=4&duration=8", 10.0, 4.0, id="twice: the first, as Go's Values.Get"),
        pytest.param("duration=" + "9" * 40, 10.0, 10.0, id="endless digits: the hold"),
        pytest.param("x=1&duration=%35", 10.0, 5.0, id="percent-encoded"),
    ],
)
def test_requested_hold(query: str, hold: float, held: float) -> None:
    assert requested_hold(query, hold=hold) == held


@given(query=st.text(max_size=60), hold=st.floats(min_value=0.001, max_value=86400))
def test_a_query_never_lengthens_the_hold(query: str, hold: float) -> None:
    assert 0 < requested_hold(query, hold=hold) <= hold


@pytest.mark.parametrize(
    ("peer_address", "address"),
    [
        pytest.param("10.1.2.3", "10.1.2.3", id="ipv4"),
        pytest.param("::ffff:10.1.2.3", "10.1.2.3", id="ipv4-mapped, a dual-stack socket's"),
        pytest.param("fd00::1", "fd00::1", id="ipv6"),
        pytest.param("-", "-", id="no address"),
    ],
)
def test_the_callers_address_reads_as_a_pod_ip(peer_address: str, address: str) -> None:
    assert own_address(peer_address) == address


# --- one standalone lockd for the tables ------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A standalone lockd (1 s request deadline, hold 1 m) for the tables: its lock port's and its
    pod-startup-lock port's URLs. Each test asks from addresses of its own."""
    folder = tmp_path_factory.mktemp("shared-lockd")
    policies = folder / "policies.yaml"
    policies.write_text(limit_policy(50))
    port, startup_lock_port = _free_ports(2)
    args = (
        *("--policies", str(policies), "--header-timeout", "1s"),
        *("--pod-startup-lock-port", str(startup_lock_port), "--pod-startup-lock-hold", "1m"),
    )
    with running_lockd(*args, port=port):
        yield f"http://{HOST}:{port}", f"http://{HOST}:{startup_lock_port}"


async def _slot_names(url: str) -> list[str]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/status") as response:
        return [slot["name"] for slot in (await response.json())["slots"]]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/x", 404, id="another path"),
        pytest.param("GET", "/v1/lock?namespace=a&name=b", 404, id="the lock API: not here"),
        pytest.param("GET", "/status", 404, id="status: on the lock port only"),
        pytest.param("GET", "/metrics", 404, id="metrics: on the lock port only"),
        pytest.param("GET", "/healthz", 404, id="probes: on the probe listener"),
        pytest.param("GET", "/readyz", 404, id="readiness: on the probe listener"),
        pytest.param("POST", "/", 405, id="POST"),
        pytest.param("DELETE", "/", 405, id="DELETE"),
        pytest.param("PUT", "/?duration=5", 405, id="PUT"),
        pytest.param("HEAD", "/", 405, id="HEAD: would take a slot nobody is told of"),
    ],
)
async def test_only_get_root_is_served_and_nothing_else_takes_a_slot(
    shared: tuple[str, str], method: str, path: str, status: int
) -> None:
    url, port_url = shared
    source = "127.0.3.1"
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    session = aiohttp.ClientSession(connector=connector)
    async with session, session.request(method, f"{port_url}{path}") as response:
        assert response.status == status
        if method != "HEAD":
            assert "error" in await response.json()
    assert not from_address(await _slot_names(url), source)


_OVER_8K_HEAD = b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(
    b"X-Pad-%d: %s\r\n" % (i, b"p" * 90) for i in range(90)
)


@pytest.mark.parametrize(
    ("first", "trickle", "ending"),
    [
        pytest.param(
            b"GET /?duration=" + b"9" * (1024 * 1024) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            False,
            "HTTP/1.1 431 Request Header Fields Too Large",
            id="megabyte-query",
        ),
        pytest.param(
            _OVER_8K_HEAD, True, "HTTP/1.1 431 Request Header Fields Too Large", id="over-8k-head-trickled"
        ),
        pytest.param(
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1048000\r\n\r\n" + b"b" * 60000,
            False,
            "HTTP/1.1 413 Request Entity Too Large",
            id="declared-megabyte",
        ),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n", True, "HTTP/1.1 408 Request Timeout", id="slow-loris"),
    ],
)
async def test_hostile_callers_are_bounded_at_the_door(
    shared: tuple[str, str], first: bytes, trickle: bool, ending: str
) -> None:
    """Heads over 8 KiB and bodies over `--max-body` are refused before they are read, and a head trickled
    a byte at a time is cut at the request deadline (1 s here); none takes a slot."""
    url, port_url = shared
    source = "127.0.3.2"
    port = int(port_url.rsplit(":", 1)[1])
    flood = Flood(
        host=HOST,
        port=port,
        connections=4,
        first=first,
        trickle=trickle,
        every=0.2,
        hold=15,
        sources=(source,),
    )
    result = await flood.run()
    assert set(result.endings) == {ending}, result.endings
    assert not from_address(await _slot_names(url), source)


async def test_a_flood_over_the_connection_limit_sheds_its_own_and_the_client_is_still_served(
    tmp_path: Path, peer_client: Path
) -> None:
    """`--max-connections 16`: heads trickled on 48 connections (each idle until its head is whole) are
    closed oldest first for new ones; the peer's client is granted during the flood, and the lock port,
    with a door of its own, answers all along."""
    async with running(tmp_path, limit_policy(1), extra=("--max-connections", "16")) as lockd:
        flood = Flood(
            host=HOST,
            port=lockd.peer_port,
            connections=48,
            first=b"GET / HTTP/1.1\r\nHost: x\r\n",
            trickle=True,
            every=0.5,
            hold=6,
            sources=("127.0.3.3",),
        )
        attack = asyncio.create_task(flood.run())
        try:
            await asyncio.wait_for(flood.all_open.wait(), timeout=15)
            async with peer(peer_client, lockd.peer_port) as client:
                assert await client.exit_code() == 0, client.lines
            async with lockd.session.get(
                f"{lockd.url}/v1/lock", params={"namespace": "a", "name": "b"}
            ) as lock:
                assert lock.status == 423, "the lock port answers (the slot is the client's)"
        finally:
            result = await attack
        assert list(await lockd.slots()) == [anonymous(HOST, 1)]
        shed = {
            sample.labels["why"]: sample.value
            for family in text_string_to_metric_families(await lockd.metrics())
            for sample in family.samples
            if sample.name == "stagger_lockd_connections_shed_total"
        }
        assert shed.get("idleClosed", 0) >= 48 - 16, (shed, result.endings)


# --- cluster mode: a caller known by its pod's IP ---------------------------------------------------


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(ApiServerSettings(port=0)) as server:
        yield server


@pytest.fixture
async def kube(api: ApiServer) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield client_for_url(session=session, base_url=api.url)


async def _pod_at(
    kube: RestClient,
    name: str,
    address: str,
    *,
    phase: str = "Running",
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod bound to the node, not opted in to stagger (a pod-startup-lock user's), whose kubelet gave it
    `address`; `spec` adds to its spec (hostNetwork)."""
    if spec:
        created = await kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "example/app:1"}], **spec},
            },
            namespace="default",
        )
    else:
        created = await make_pod(kube, name, stagger=False)
    status = {"phase": phase, "podIP": address, "conditions": [{"type": "Ready", "status": "False"}]}
    await patch_status(kube, created, status=status)
    return created


async def test_a_pod_known_by_its_ip_asks_as_that_pod_and_its_slot_ends_at_ready(
    api: ApiServer, kube: RestClient, tmp_path: Path, peer_client: Path
) -> None:
    await make_node(kube)
    pod = await _pod_at(kube, "web-1", HOST)
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    async with running(tmp_path, limit_policy(1), hold="1m", kubeconfig=kubeconfig) as lockd:
        async with peer(peer_client, lockd.peer_port) as client:
            assert await client.exit_code() == 0, client.lines
        slot = (await lockd.slots())["web-1"]
        assert (slot["namespace"], slot["uid"], slot["via"]) == ("default", pod["metadata"]["uid"], VIA)
        recorded = await kube.get(PODS, name="web-1", namespace="default")
        assert NAMES.granted_at_annotation in recorded["metadata"]["annotations"], "recorded as for any pod"
        await set_ready(kube, pod)

        async def ended_at_ready() -> bool:
            return not await lockd.slots()

        await eventually(ended_at_ready, what="the slot to end when its pod is Ready")
        assert ended(await lockd.metrics()).get("ready") == 1.0


async def test_known_pods_wait_in_the_queue_of_the_lock_port_in_their_order(
    api: ApiServer, kube: RestClient, tmp_path: Path
) -> None:
    """A pod holds the one slot through `/v1/lock`; two pods asking on the port by their IPs queue behind it
    in the order they asked, and an unknown address is not let past them; when the holder is Ready, the
    first of them is granted, and the second waits on."""
    await make_node(kube)
    holder = await make_pod(kube, "holder", stagger=False)
    await _pod_at(kube, "first", "127.0.4.1")
    await _pod_at(kube, "second", "127.0.4.2")
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    async with running(tmp_path, limit_policy(1), kubeconfig=kubeconfig) as lockd:
        meta = holder["metadata"]
        query = {"namespace": "default", "name": "holder", "uid": meta["uid"]}
        async with lockd.session.get(f"{lockd.url}/v1/lock", params=query) as held:
            assert held.status == 200
        assert await ask_from("127.0.4.1", lockd.port_url) == (423, "Locked")
        assert await ask_from("127.0.4.2", lockd.port_url) == (423, "Locked")
        assert await ask_from("127.0.4.9", lockd.port_url) == (423, "Locked")
        queue = [(waiter["name"], waiter["position"]) for waiter in (await lockd.status())["queue"]]
        assert queue == [("first", 1), ("second", 2)], "the unknown address is never queued"
        await set_ready(kube, holder)

        async def freed() -> bool:
            return not await lockd.slots()

        await eventually(freed, what="the holder's slot to end at Ready")
        assert await ask_from("127.0.4.2", lockd.port_url) == (423, "Locked"), "not before the first"
        assert await ask_from("127.0.4.9", lockd.port_url) == (423, "Locked"), "not before the queue"
        assert await ask_from("127.0.4.1", lockd.port_url) == (200, "Lock acquired")
        assert list(await lockd.slots()) == ["first"]
        # Known by its pod's IP, it is its pod asking again: answered from its pod's slot, none more taken.
        assert await ask_from("127.0.4.1", lockd.port_url) == (200, "Lock acquired")
        assert list(await lockd.slots()) == ["first"]


async def test_an_address_of_no_single_live_pod_gets_an_anonymous_slot(
    api: ApiServer, kube: RestClient, tmp_path: Path
) -> None:
    """Known by address only when one live pod of the node has it as its own: not a hostNetwork pod (its
    address is the node's), not a finished pod (its address is handed on), not two pods at once. Each 200
    to an unknown address takes a slot of its own; the known pod asking again takes none more."""
    await make_node(kube)
    await _pod_at(kube, "own", "127.0.5.1")
    await _pod_at(kube, "host-network", "127.0.5.2", spec={"hostNetwork": True})
    await _pod_at(kube, "finished", "127.0.5.3", phase="Succeeded")
    await _pod_at(kube, "twin-a", "127.0.5.4")
    await _pod_at(kube, "twin-b", "127.0.5.4")
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    async with running(tmp_path, limit_policy(10), kubeconfig=kubeconfig) as lockd:
        for source in ("127.0.5.1", "127.0.5.2", "127.0.5.3", "127.0.5.4", "127.0.5.5"):
            assert await ask_from(source, lockd.port_url) == (200, "Lock acquired"), source
        for source in ("127.0.5.1", "127.0.5.5"):
            assert await ask_from(source, lockd.port_url) == (200, "Lock acquired"), f"{source} again"
        slots = await lockd.slots()
        unknown = [anonymous(f"127.0.5.{i}", number) for number, i in enumerate((2, 3, 4, 5, 5), start=1)]
        assert set(slots) == {"own", *unknown}
        assert all(slot["via"] == VIA for slot in slots.values())
        assert slots["own"]["namespace"] == "default"


# --- settings and chart -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--listen", "0.0.0.0:9400", "--pod-startup-lock-port", "9400"], "--listen", id="the lock port"
        ),
        pytest.param(
            ["--probe-listen", "0.0.0.0:9401", "--pod-startup-lock-port", "9401"],
            "--probe-listen",
            id="the probes'",
        ),
        pytest.param(["--pod-startup-lock-port", "65536"], "at most 65535", id="no such port"),
        pytest.param(["--pod-startup-lock-hold", "0s"], "greater than 0s", id="no hold"),
    ],
)
def test_the_port_is_a_listener_of_its_own(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_settings(["--standalone", *argv], {})


def test_the_settings_default_to_off_and_ten_seconds() -> None:
    settings = parse_settings(["--standalone"], {"STAGGER_POD_STARTUP_LOCK_HOLD": "15s"})
    assert settings.server.pod_startup_lock_port == 0 and settings.queue.pod_startup_lock_hold == 15.0
    assert parse_settings(["--standalone"], {}).queue.pod_startup_lock_hold == 10.0


def _lockd_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0])


def test_the_chart_adds_the_port_as_a_host_port_only_when_set() -> None:
    default = _lockd_container(render())
    assert not any(arg.startswith("--pod-startup-lock") for arg in default["args"])
    assert [port["name"] for port in default["ports"]] == ["http", "probes"]
    docs = render(
        "lockd.podStartupLock.port=8888", "lockd.podStartupLock.holdTimeout=15s", "networkPolicy.enabled=true"
    )
    container = _lockd_container(docs)
    assert {"--pod-startup-lock-port=8888", "--pod-startup-lock-hold=15s"} <= set(container["args"])
    assert {"name": "startup-lock", "containerPort": 8888, "hostPort": 8888, "protocol": "TCP"} in container[
        "ports"
    ]
    (lockd_policy,) = [
        doc for doc in docs if doc["kind"] == "NetworkPolicy" and doc["metadata"]["name"].endswith("-lockd")
    ]
    assert {"port": 8888, "protocol": "TCP"} in lockd_policy["spec"]["ingress"][0]["ports"]


@pytest.mark.parametrize(
    "taken", [pytest.param("9400", id="lockd.port"), pytest.param("9401", id="lockd.probePort")]
)
def test_the_chart_refuses_a_port_another_listener_has(taken: str) -> None:
    with pytest.raises(
        RenderError, match=rf"lockd.podStartupLock.port \({taken}\) must differ from lockd.port"
    ):
        render(f"lockd.podStartupLock.port={taken}")
