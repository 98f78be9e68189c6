"""The controller's group pacing at scale, against a real `python -m webhook` process on the API emulator:
10,000 enabled pods in 1,000 groups (the issue's goal: under 250 MB RSS), and the time from "a group
gained room" (a starting pod's status turns Ready through the API) to the answer of a node's long poll
(`POST /v1/groups/wait`) naming the next held pod of that group (goal: p99 <= 200 ms).

The pods are created as admission leaves them (enable and staggered labels, the group-key annotation),
straight into the emulator: the webhook is not registered, so creating 10,000 pods does not measure
admission (the `admission` benchmark does). Each group's policy allows one pod starting at a time
(`maxConcurrent: {value: 1}`). One wake-up: grant the oldest held pod of a fresh group (it starts),
open a long poll naming the next one, patch the first one Ready, and time the answer.

Then grant throughput: the oldest held pod of every other group asked for at once by 32 callers (as the
lockd processes of many nodes would), each answer a grant.

Reported: pods and groups, the time until the controller granted (listed and counted every pod), its RSS
then, the wake-up latency p50/p90/p99/max over `wakes` groups, grants per second, and every request that
reached the controller by route and code class (its `stagger_controller_requests_total`).
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import trustme

from sim.emulator.server import ApiServer
from sim.kubeclient import client_for_url
from stagger.kube import PODS
from stagger.names import Names
from tests.processes import clean_env

NAMES = Names()
TOKEN = "bench-token"
BANNER = re.compile(
    r"admission on https://127\.0\.0\.1:(\d+)/mutate/pods.*probes on (http://127\.0\.0\.1:\d+)"
)
REQUESTS = re.compile(
    r'^stagger_controller_requests_total\{code="(\w+)",route="([^"]+)"\} (\S+)$', re.MULTILINE
)
POLICY = """\
staggeringPolicies:
- name: bench
  labelSelector: {matchLabels: {app: bench}}
  groupingExpression: .metadata.labels.group
  pacer: {maxConcurrent: {value: 1}}
"""


def _pod(index: int, groups: int) -> dict[str, Any]:
    group = f"g{index % groups}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"bench-{index:05d}",
            "labels": {"app": "bench", "group": group, NAMES.enable_label: "1", NAMES.staggered_label: "1"},
            "annotations": {NAMES.group_key_annotation: json.dumps({"bench": group})},
        },
        "spec": {"containers": [{"name": "app", "image": f"example/{group}:1"}]},
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(*, pods: int = 10_000, groups: int = 1_000, wakes: int = 200) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        ca = trustme.CA()
        pair = ca.issue_cert("127.0.0.1")
        pair.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
        pair.private_key_pem.write_to_path(str(tmp / "tls.key"))
        (tmp / "token").write_text(TOKEN)
        (tmp / "policies.yaml").write_text(POLICY)
        context = ssl.create_default_context()
        ca.configure_trust(context)
        async with ApiServer() as server, aiohttp.ClientSession() as session:
            server.write_kubeconfig(tmp / "kubeconfig")
            kube = client_for_url(session=session, base_url=server.url)
            queue = list(range(pods))

            async def creator() -> None:
                while queue:
                    await kube.create(PODS, _pod(queue.pop(), groups), namespace="default")

            began = time.monotonic()
            await asyncio.gather(*(creator() for _ in range(16)))
            created_in = time.monotonic() - began
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "webhook", "--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0",
                "--image", "stagger:bench", "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key"),
                "--policies", str(tmp / "policies.yaml"), "--kubeconfig", str(tmp / "kubeconfig"),
                "--token-file", str(tmp / "token"), "--no-leader-elect", "--log-level", "warning",
                env=clean_env(), stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                assert proc.stderr is not None
                started = time.monotonic()
                while True:
                    line = (await proc.stderr.readline()).decode()
                    if not line:
                        raise RuntimeError("the controller exited before listening")
                    if match := BANNER.search(line):
                        break
                url = f"https://127.0.0.1:{match[1]}"
                drain = asyncio.create_task(_drain(proc.stderr))
                headers = {"Authorization": f"Bearer {TOKEN}"}

                async def post(path: str, body: Any) -> Any:
                    async with session.post(url + path, json=body, headers=headers, ssl=context) as response:
                        assert response.status == 200, await response.text()
                        return await response.json()

                while True:
                    async with session.get(url + "/status", ssl=context) as response:
                        section = (await response.json())["groups"]
                    if section["granting"] and section["pods"] == pods:
                        break
                    await asyncio.sleep(0.2)
                granting_in = time.monotonic() - started
                rss = psutil.Process(proc.pid).memory_info().rss
                latencies: list[float] = []
                for group in range(min(wakes, groups)):
                    # Oldest first as the controller orders them: creationTimestamp (whole seconds), then name.
                    listed = await kube.list(PODS, namespace="default", label_selector=f"group=g{group}")
                    members = sorted(
                        (item["metadata"]["creationTimestamp"], item["metadata"]["name"])
                        for item in listed["items"]
                    )
                    first, second = members[0][1], members[1][1]
                    answer = await post("/v1/groups/grant", {"namespace": "default", "name": first})
                    assert answer["granted"], answer
                    waiting = asyncio.create_task(
                        post(
                            "/v1/groups/wait",
                            {"node": "n", "wait": 30, "pods": [{"namespace": "default", "name": second}]},
                        )
                    )
                    await asyncio.sleep(
                        0.02
                    )  # the long poll is open (the answer would come at once otherwise)
                    assert not waiting.done()
                    t0 = time.perf_counter()
                    await kube.patch(
                        PODS, name=first, namespace="default", subresource="status",
                        patch={"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                    )  # fmt: skip
                    result = await waiting
                    latencies.append((time.perf_counter() - t0) * 1000)
                    assert result["grantable"] == [{"namespace": "default", "name": second}], result
                rss_after = psutil.Process(proc.pid).memory_info().rss
                # Grant throughput: the oldest held pod of every group not used above, asked by 32 callers
                # at once (lockd processes of many nodes); every answer must be a grant.
                listed = await kube.list(PODS, namespace="default", label_selector="app=bench")
                oldest: dict[str, tuple[str, str]] = {}
                for item in listed["items"]:
                    meta = item["metadata"]
                    key = (meta["creationTimestamp"], meta["name"])
                    group = meta["labels"]["group"]
                    oldest[group] = min(oldest.get(group, key), key)
                todo = [oldest[f"g{g}"][1] for g in range(min(wakes, groups), groups)]
                granted = 0

                async def asker() -> None:
                    nonlocal granted
                    while todo:
                        answer = await post("/v1/groups/grant", {"namespace": "default", "name": todo.pop()})
                        assert answer["granted"], answer
                        granted += 1

                t0 = time.perf_counter()
                await asyncio.gather(*(asker() for _ in range(32)))
                grant_seconds = time.perf_counter() - t0
                async with session.get(match[2] + "/metrics") as response:
                    metrics = await response.text()
                requests = {f"{route} {code}": int(float(n)) for code, route, n in REQUESTS.findall(metrics)}
                drain.cancel()
            finally:
                proc.terminate()
                await proc.wait()
    return {
        "pods": pods,
        "groups": groups,
        "pods created in (s)": round(created_in, 1),
        "controller granting after (s)": round(granting_in, 1),
        "controller RSS with every pod listed (MB)": round(rss / 2**20, 1),
        "controller RSS after the wake-ups (MB)": round(rss_after / 2**20, 1),
        "wake-ups measured": len(latencies),
        "Ready -> wait answered p50 (ms)": round(_percentile(latencies, 0.5), 1),
        "Ready -> wait answered p90 (ms)": round(_percentile(latencies, 0.9), 1),
        "Ready -> wait answered p99 (ms)": round(_percentile(latencies, 0.99), 1),
        "Ready -> wait answered max (ms)": round(max(latencies), 1),
        "grants answered (32 callers at once)": granted,
        "grants per second": round(granted / grant_seconds),
        "requests reaching the controller, by route and code": requests,
    }


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass
