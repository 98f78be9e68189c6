"""`kubectl stagger status` and `why` against a running simulated cluster (issue 24): the API emulator over
HTTP, two nodes each with its real lockd, and the real controller pacing one group, their stand-in pods
labelled as the chart's (`ClusterSettings.standin_namespace`). The plugin runs as its console script in a
process of its own and finds everything through the API server alone: the pods by label, each `/status`
through the emulator's pod proxy; `why` says for each of the group's pods whether it starts or where it
waits (and a pod that does not exist: exit 5). Also: a namespace without stagger (exit 4) and an API
server that is gone (exit 3), each one clear line on stderr."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sim.cluster.backend import ApiBackend
from sim.cluster.scenario import NodePool, StaggerConfig, Workload, workload_manifest
from sim.cluster.simcluster import ClusterSettings, SimCluster
from sim.emulator.server import ApiServer, ApiServerSettings
from stagger.kube import PODS
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).with_name("kubectl-stagger")
POLICIES = {
    "staggeringPolicies": [
        {
            "name": "image-pull",
            "labelSelector": {"matchLabels": {"staggerimages": "1"}},
            "groupingExpression": ".spec.containers[0].image",
            "pacer": {"maxConcurrent": {"value": 1}},
        }
    ],
    "nodePolicies": [{"name": "tight", "throttleConfig": {"maxConcurrent": {"value": 1}}}],
}
IMAGE = "registry.example/shop:1"


@dataclass(frozen=True)
class Plugin:
    code: int
    out: str
    err: str


async def plugin(*args: str) -> Plugin:
    # A process of its own, awaited without blocking: the emulator answers it from this event loop.
    proc = await asyncio.create_subprocess_exec(
        str(PLUGIN), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Plugin(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Path]]:
    """Two nodes, one group of 4 pods let through one at a time, and a kubeconfig for the plugin."""
    settings = ClusterSettings(
        nodes=NodePool(count=2, cores=2, memory="8Gi"),
        time_scale=10,
        stagger=StaggerConfig(enabled=True, host_port=0, policies=yaml.safe_dump(POLICIES), controller=True),
        standin_namespace="stagger",
        work_dir=tmp_path / "cluster",
    )
    async with (
        ApiServer(ApiServerSettings(port=0)) as server,
        SimCluster(api=ApiBackend(server.url), settings=settings) as cluster,
    ):
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        shop = Workload(
            kind="Deployment", name="shop", namespace="shop", replicas=4, cpu_seconds=600, image=IMAGE,
            labels={"staggerimages": "1"},
        )  # fmt: skip
        await cluster.apply(workload_manifest(shop, stagger=cluster.settings.stagger))
        yield cluster, kubeconfig


async def test_status_and_why_show_the_group_and_every_node_through_the_api_server(
    running: tuple[SimCluster, Path],
) -> None:
    cluster, kubeconfig = running

    async def one_starting_three_held() -> bool:
        pods = (await cluster.client.list(PODS, namespace="shop"))["items"]
        return len(pods) == 4 and all("initContainerStatuses" in (p.get("status") or {}) for p in pods)

    await eventually(one_starting_three_held, within=30, what="the group's 4 pods started by their kubelets")

    seen: list[dict[str, object]] = []

    async def group_counts() -> bool:
        done = await plugin("status", "--kubeconfig", str(kubeconfig), "-o", "json")
        assert done.code == 0, done.err
        seen[:] = json.loads(done.out)["groups"]
        return len(seen) == 1 and (seen[0]["starting"], seen[0]["held"]) == (1, 3)

    await eventually(group_counts, within=30, what="the group: 1 starting, 3 held", poll=0.5)
    assert (seen[0]["policy"], seen[0]["key"], seen[0]["limit"]) == ("image-pull", IMAGE, 1)

    done = await plugin("status", "--kubeconfig", str(kubeconfig))
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith("controller stagger-controller-0: granting")
    assert any(line.split()[:2] == ["image-pull", IMAGE] for line in lines), done.out
    [nodes_header] = [line for line in lines if line.startswith("NODE")]
    assert nodes_header.split() == ["NODE", "LOCKD", "SLOTS", "WAITING", "POLICY", "CPU", "SAYS", "NO"]
    node_lines = [line for line in lines if line.startswith("sim-node-")]
    assert [line.split()[:2] for line in node_lines] == [
        ["sim-node-0", "stagger-lockd-sim-node-0"],
        ["sim-node-1", "stagger-lockd-sim-node-1"],
    ]
    assert all(line.split()[4] == "tight" for line in node_lines), done.out

    done = await plugin("status", "--kubeconfig", str(kubeconfig), "-o", "yaml", "--release", "stagger")
    assert done.code == 0, done.err
    assert {node["node"] for node in yaml.safe_load(done.out)["nodes"]} == {"sim-node-0", "sim-node-1"}

    done = await plugin("status", "--kubeconfig", str(kubeconfig), "-n", "elsewhere")
    assert (done.code, done.out) == (4, "")
    assert done.err.startswith("error: no stagger controller or lockd pods in namespace 'elsewhere'")
    assert "Traceback" not in done.err

    # On the same cluster (one start-up for both commands): `why` for each of the group's pods.
    await why_says_where_each_pod_of_the_group_waits(cluster, kubeconfig)


async def test_an_api_server_that_is_gone_is_one_clear_line(tmp_path: Path) -> None:
    async with ApiServer(ApiServerSettings(port=0)) as server:
        server.write_kubeconfig(tmp_path / "kubeconfig")
    done = await plugin("status", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert done.code == 3
    assert done.err.startswith("error: cannot reach the API server at http://"), done.err
    assert len(done.err.splitlines()) == 1


async def why_says_where_each_pod_of_the_group_waits(cluster: SimCluster, kubeconfig: Path) -> None:
    names: list[str] = []

    async def one_queued_per_node() -> bool:
        pods = (await cluster.client.list(PODS, namespace="shop"))["items"]
        names[:] = sorted(p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName"))
        return len(names) == 4

    await eventually(one_queued_per_node, within=30, what="the group's 4 pods on nodes")

    async def verdicts() -> list[str]:
        found = []
        for name in names:
            done = await plugin("why", name, "-n", "shop", "--kubeconfig", str(kubeconfig), "-o", "json")
            assert done.code == 0, done.err
            found.append(json.loads(done.out)["verdict"])
        return found

    async def settled() -> bool:
        now = await verdicts()
        starting = [v for v in now if v.startswith("holds a start-up slot")]
        waiting = [v for v in now if v.startswith("waiting in sim-node-")]
        return len(starting) == 1 and len(waiting) == 3 and any("image-pull[" in v for v in waiting)

    await eventually(settled, within=30, what="one pod starting, three waiting", poll=0.5)

    done = await plugin("why", names[0], "-n", "shop", "--kubeconfig", str(kubeconfig))
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith(f"pod shop/{names[0]} on sim-node-")
    assert lines[1].startswith("why: ")
    assert {"STAGGER LABELS AND ANNOTATIONS", "GROUPS", "CONDITIONS", "EVENTS"} <= set(lines)
    assert any(line.startswith("image-pull  registry.example/shop:1  lock") for line in lines), done.out

    done = await plugin("why", "no-such-pod", "-n", "shop", "--kubeconfig", str(kubeconfig))
    assert (done.code, done.out, done.err) == (5, "", "error: pod shop/no-such-pod not found\n")
