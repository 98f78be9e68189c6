"""No secret in any output: a small simulated cluster with stagger on (2 nodes, a real lockd on each, the real
controller as 2 replicas electing a leader, lock-mode group pacing through the grant API), every process at
log level debug, then the error paths where secrets tend to leak: the grant API asked without a token, with
a wrong one, with the right one under the wrong scheme or with a bad body, and on a replica that does not
lead; lockd asked to release a slot with a wrong release token, with the right token for the wrong pod,
twice, and asked for pods that do not exist; and malformed header lines that carry a token, to both.

Then every output is searched for every secret: the controller's grant-API bearer token, the release token
lockd handed to a pod (through a real init client's `--release-token-file`), the bearer token of the
kubeconfig lockd and the controller use (its client key on a real control plane), the serving
certificate's private key and its CA's key. The outputs: every lockd and controller log, the init client's
output, this process's log (the API emulator, the simulated kubelets), lockd's and every replica's
`/status` (JSON and text) and `/metrics`, and every object left in the API (Events, pods with their labels
and annotations, Leases, ConfigMaps, Nodes).

A secret counts as leaked if it appears whole, base64-encoded, or as its first or last 16 characters (a
truncated token in a log still gives most of it away)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import ssl
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sim.cluster.backend import ApiBackend
from sim.cluster.kubernetes.nodeagent import node_name
from sim.cluster.launchers.controllerproc import ControllerProcess
from sim.cluster.launchers.initproc import process_env
from sim.cluster.podparams import CPU_SECONDS, LIVENESS_SECONDS
from sim.cluster.scenario import NodePool, Scenario, StaggerConfig, Workload
from sim.cluster.simcluster import ClusterSettings, SimCluster
from sim.kubeconfig import write_kubeconfig
from stagger.kube import CONFIGMAPS, EVENTS, LEASES, NODES, PODS, RestClient, kubeconfig_config
from stagger.names import Names
from stagger.podstate import is_pod_ready
from tests.backends import Backend

NAMES = Names()
PODS_WANTED = 6
POLICIES = """\
staggeringPolicies:
- name: image-pull
  labelSelector: {matchLabels: {staggerimages: "1"}}
  groupingExpression: .spec.containers[0].image
  pacer: {exponential: {minInitial: 2, multiplier: 2, maxStagger: 4}}
  mode: lock
nodePolicies:
- name: small
  throttleConfig:
    maxConcurrent: {value: 2}
  holdTimeout: 2m
"""
TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass(frozen=True)
class Secret:
    what: str
    value: str

    def forms(self) -> Iterator[str]:
        """The strings whose presence anywhere means the secret leaked."""
        yield self.value
        yield base64.b64encode(self.value.encode()).decode()
        if len(self.value) > 24:
            yield self.value[:16]
            yield self.value[-16:]


def key_secrets(what: str, pem: bytes) -> list[Secret]:
    """A PEM private key: each of its base64 lines (any one printed is part of the key)."""
    lines = [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]
    return [Secret(f"{what}, line {i + 1}", line) for i, line in enumerate(lines) if len(line) >= 16]


def leaks(secrets_: list[Secret], outputs: Mapping[str, str]) -> list[str]:
    found = []
    for where, text in outputs.items():
        for secret in secrets_:
            for form in secret.forms():
                if form in text:
                    found.append(f"{secret.what} in {where}")
                    break
        if "PRIVATE KEY" in text:
            found.append(f"a PEM private key in {where}")
    return found


def test_the_scan_finds_a_planted_secret() -> None:
    """The search itself: a token printed whole, truncated or base64-encoded, and a key line, are found."""
    token = Secret("token", secrets.token_hex(24))
    assert leaks([token], {"log": f"x Bearer {token.value} y"}) == ["token in log"]
    assert leaks([token], {"log": f"token {token.value[:16]}..."}) == ["token in log"]
    assert leaks([token], {"log": base64.b64encode(token.value.encode()).decode()}) == ["token in log"]
    assert leaks([token], {"log": "nothing here"}) == []
    assert leaks([], {"log": "-----BEGIN PRIVATE KEY-----"}) == ["a PEM private key in log"]


def _scenario(namespace: str) -> Scenario:
    return Scenario(
        name="security",
        nodes=NodePool(count=2, cores=4, memory="16Gi"),
        workloads=(
            Workload(
                kind="Deployment",
                name="web",
                namespace=namespace,
                replicas=PODS_WANTED,
                cpu_seconds=2.0,
                liveness_seconds=None,
                image="registry.example/app:1",
                labels={"staggerimages": "1"},
            ),
        ),
        stagger=StaggerConfig(
            enabled=True,
            host_port=0,
            max_wait="2m",
            policies=POLICIES,
            lockd_mode="cluster",
            controller=True,
            controller_replicas=2,
        ),
        time_scale=10,
    )


def _api_with_credentials(backend: Backend, tmp_path: Path) -> tuple[ApiBackend, list[Secret]]:
    """The API as lockd and the controller reach it, and the credentials they send. The emulator takes
    any token, so a random one is written into their kubeconfig (sim's own is the word `lockd`, which
    every lockd log line contains); a real control plane's kubeconfig is used as it is (its bearer token,
    or its client key)."""
    if backend.real:
        assert backend.api.kubeconfig is not None
        config = kubeconfig_config(backend.api.kubeconfig)
        found = [Secret("the kubeconfig's bearer token", config.token)] if config.token else []
        if config.client_key is not None:
            found += key_secrets("the kubeconfig's client key", config.client_key.read_bytes())
        return backend.api, found
    token = secrets.token_urlsafe(32)
    path = tmp_path / "api.kubeconfig"
    write_kubeconfig(path, backend.api.url, token=token)
    api = ApiBackend(url=backend.api.url, kind=backend.api.kind, kubeconfig=path)
    return api, [Secret("the kubeconfig's bearer token", token)]


async def _wait_ready(client: RestClient, namespace: str, *, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        pods = (await client.list(PODS, namespace=namespace, label_selector="app=web"))["items"]
        ready = [pod for pod in pods if is_pod_ready(pod)]
        if len(ready) >= PODS_WANTED:
            return
        assert time.monotonic() < deadline, f"{len(ready)} of {PODS_WANTED} Ready after {within:g}s"
        await asyncio.sleep(0.2)


async def _bare_pod(cluster: SimCluster, namespace: str) -> dict[str, Any]:
    """A pod on node 0 that never becomes Ready and does not use stagger: the test asks lockd for its
    slot itself, so that it knows the release token."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "holder",
            "namespace": namespace,
            "annotations": {CPU_SECONDS: "100000", LIVENESS_SECONDS: "none"},
        },
        "spec": {"nodeName": node_name(0), "containers": [{"name": "app", "image": "registry.example/x:1"}]},
    }
    return await cluster.client.create(PODS, pod, namespace=namespace)


async def _init_client(*, lockd_url: str, pod: Mapping[str, Any], token_file: Path) -> tuple[int, str]:
    """The real init client for `pod`, as the kubelet would run it; its exit code and whole output."""
    meta = pod["metadata"]
    env = {
        "STAGGER_LOCKD_URL": lockd_url,
        "POD_NAMESPACE": meta["namespace"],
        "POD_NAME": meta["name"],
        "POD_UID": meta["uid"],
        "STAGGER_MAX_WAIT": "20s",
        "STAGGER_POLL_WAIT": "5",
        "STAGGER_RELEASE_TOKEN_FILE": str(token_file),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "initclient",
        env=process_env(env, hostname=meta["name"]),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    return await proc.wait(), out.decode(errors="replace")


async def _lockd_error_paths(
    session: aiohttp.ClientSession, *, url: str, pod: Mapping[str, Any], token: str
) -> list[int]:
    """Releases that must fail (and one that must not), and asks for pods that do not exist."""
    meta = pod["metadata"]
    mine = {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
    other = {**mine, "name": "someone-else"}
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("DELETE", mine, {"X-Stagger-Release-Token": secrets.token_hex(16)}),
        ("DELETE", mine, {"X-Stagger-Release-Token": token[:-1]}),
        ("DELETE", mine, {}),
        ("DELETE", other, {"X-Stagger-Release-Token": token}),
        ("GET", {**mine, "name": "nobody", "uid": "x"}, {"X-Stagger-Release-Token": token}),
        ("GET", {**mine, "name": "bad name!"}, {}),
        ("DELETE", mine, {"X-Stagger-Release-Token": token}),
        ("DELETE", mine, {"X-Stagger-Release-Token": token}),
    ]
    statuses = []
    for method, params, headers in requests:
        async with session.request(
            method, f"{url}/v1/lock", params=params, headers=headers, timeout=TIMEOUT
        ) as response:
            await response.read()
            statuses.append(response.status)
    return statuses


async def _grant_api_error_paths(
    session: aiohttp.ClientSession, controller: ControllerProcess, *, pod: Mapping[str, Any], token: str
) -> list[int]:
    """The grant API asked without its token, with a wrong one, with the right one in the wrong scheme, with
    a bad body, and on a replica that does not lead."""
    context = ssl.create_default_context(cafile=str(controller.ca_file))
    # The follower is the replica that does not hold the Lease, which ControllerProcess reads every 0.1 s.
    deadline = time.monotonic() + 15
    while controller.leader is None:
        assert time.monotonic() < deadline, "no leader"
        await asyncio.sleep(0.1)
    meta = pod["metadata"]
    body = {
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "group": "g",
        "node": "n",
    }
    leader = controller.url
    followers = [
        f"https://{controller.spec.host}:{replica.port}"
        for replica in controller.replicas
        if replica.running and replica.identity != controller.leader
    ]
    asks: list[tuple[str, str, dict[str, str], Any]] = [
        (leader, "/v1/groups/grant", {}, body),
        (leader, "/v1/groups/grant", {"Authorization": f"Bearer {secrets.token_hex(24)}"}, body),
        (leader, "/v1/groups/grant", {"Authorization": f"Bearer {token[:-1]}"}, body),
        (leader, "/v1/groups/grant", {"Authorization": f"Basic {token}"}, body),
        (leader, "/v1/groups/grant", {"Authorization": token}, body),
        (leader, "/v1/groups/grant", {"Authorization": f"Bearer {token}"}, {"namespace": 7}),
        (leader, "/v1/groups/wait", {"Authorization": f"Bearer {token}"}, {"wait": "x"}),
        (leader, "/v1/groups/admit", {"Authorization": f"Bearer {token}x"}, {}),
        *((url, "/v1/groups/grant", {"Authorization": f"Bearer {token}"}, body) for url in followers),
    ]
    statuses = []
    for url, path, headers, payload in asks:
        async with session.post(
            url + path, json=payload, headers=headers, ssl=context, timeout=TIMEOUT
        ) as response:
            await response.read()
            statuses.append(response.status)
    return statuses


async def _malformed(
    *, host: str, port: int, secret_header: str, ssl_context: ssl.SSLContext | None
) -> bytes:
    """A request whose header block is broken right at the header that carries a secret: a parser error
    that quotes the offending line would print it."""
    reader, writer = await asyncio.open_connection(host, port, ssl=ssl_context)
    try:
        writer.write(
            f"DELETE /v1/lock?namespace=a&name=b HTTP/1.1\r\nHost: x\r\n{secret_header}\r\n"
            f"Content-Length: 2\r\n\r\n{{}}".encode()
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), timeout=10)
    finally:
        writer.close()


async def _malformed_requests(cluster: SimCluster, *, release_token: str, grant_token: str) -> None:
    """Broken header lines carrying the release token to lockd and the grant token to the leader."""
    lockd = cluster.lockds[node_name(0)].spec
    for header in (
        f"X-Stagger-Release-Token : {release_token}",
        f"X-Stagger-Release-Token: {release_token}\x00",
        f"Authorization {release_token}",
        f"X-Stagger-Release-Token: {release_token}{'0' * 9000}",  # longer than the door reads: 431
    ):
        answer = await _malformed(host=lockd.host, port=lockd.port, secret_header=header, ssl_context=None)
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.endswith((b" 400 Bad Request", b" 431 Request Header Fields Too Large")), answer
    controller = cluster.controller
    assert controller is not None
    context = ssl.create_default_context(cafile=str(controller.ca_file))
    leader_port = int(controller.url.rsplit(":", 1)[1])
    for header in (f"Authorization : Bearer {grant_token}", f"Authorization: Bearer {grant_token}\x00"):
        answer = await _malformed(
            host=controller.spec.host, port=leader_port, secret_header=header, ssl_context=context
        )
        assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), answer


async def _endpoints(session: aiohttp.ClientSession, cluster: SimCluster) -> dict[str, str]:
    """lockd's and every controller replica's /status (JSON and text) and /metrics."""
    outputs: dict[str, str] = {}
    for name, lockd in cluster.lockds.items():
        for path in ("/status", "/status?format=text", "/metrics"):
            async with session.get(lockd.spec.url + path, timeout=TIMEOUT) as response:
                outputs[f"{name} lockd {path}"] = await response.text()
    controller = cluster.controller
    assert controller is not None
    context = ssl.create_default_context(cafile=str(controller.ca_file))
    for replica in controller.replicas:
        base = f"https://{controller.spec.host}:{replica.port}"
        for path in ("/status", "/status?format=text"):
            async with session.get(base + path, ssl=context, timeout=TIMEOUT) as response:
                outputs[f"{replica.identity} {path}"] = await response.text()
        async with session.get(replica.probes_url + "/metrics", timeout=TIMEOUT) as response:
            outputs[f"{replica.identity} /metrics"] = await response.text()
    return outputs


async def _api_objects(client: RestClient) -> dict[str, str]:
    """Every Event, pod (labels, annotations and all), Lease, ConfigMap and Node in the API."""
    outputs = {}
    for resource in (EVENTS, PODS, LEASES, CONFIGMAPS, NODES):
        items = (await client.list(resource))["items"]
        outputs[f"API {resource.plural}"] = json.dumps(items)
        if resource is EVENTS:
            assert items, "no Event at all: the run did not get far enough to judge"
    return outputs


async def test_no_secret_in_any_log_endpoint_or_api_object(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api, api_credentials = _api_with_credentials(backend, tmp_path)
    work_dir = tmp_path / "cluster"
    settings = ClusterSettings.from_scenario(
        _scenario(backend.namespace), lockd_log_level="debug", work_dir=work_dir
    )
    outputs: dict[str, str] = {}
    async with SimCluster(api=api, settings=settings) as cluster, aiohttp.ClientSession() as session:
        controller = cluster.controller
        assert controller is not None
        await cluster.apply_workloads(_scenario(backend.namespace))
        await _wait_ready(cluster.client, backend.namespace, within=25)

        holder = await _bare_pod(cluster, backend.namespace)
        lockd_url = cluster.lockds[node_name(0)].spec.url
        token_file = tmp_path / "release-token"
        code, out = await _init_client(lockd_url=lockd_url, pod=holder, token_file=token_file)
        outputs["init client output"] = out
        assert code == 0 and token_file.exists(), out
        release_token = token_file.read_text()
        assert release_token

        grant_token = controller.token_file.read_text().strip()
        statuses = await _lockd_error_paths(session, url=lockd_url, pod=holder, token=release_token)
        # Wrong token, cut token, no token (not from the pod's IP): 403; the right token for a pod that holds
        # no slot: 404; a lock for a pod that does not exist: 403; a bad name: 400; then the real release
        # (200), and again (404).
        assert statuses == [403, 403, 403, 404, 403, 400, 200, 404], statuses
        statuses = await _grant_api_error_paths(session, controller, pod=holder, token=grant_token)
        assert statuses[:5] == [401] * 5, statuses
        assert statuses[5:7] == [400, 400], statuses
        assert statuses[7] == 401, statuses
        assert len(statuses) == 9 and statuses[8] == 503, statuses

        await _malformed_requests(cluster, release_token=release_token, grant_token=grant_token)

        outputs.update(await _endpoints(session, cluster))
        outputs.update(await _api_objects(cluster.client))
        serving_key = controller.key_file.read_bytes()
        ca_key = controller._ca.private_key_pem.bytes()
    # After the cluster stopped: the logs include shutting down.
    for path in sorted(work_dir.glob("*.lockd.log")) + sorted((work_dir / "controller").glob("*.log")):
        outputs[path.name] = path.read_text(errors="replace")
    assert len([name for name in outputs if name.endswith(".lockd.log")]) == 2
    assert len([name for name in outputs if name.startswith("controller-")]) == 2
    # The logs are the most verbose there are, and group pacing went through the leader's grant API.
    assert all(" DEBUG " in text for name, text in outputs.items() if name.endswith(".log"))
    assert '"POST /v1/groups/grant HTTP/1.1" 200' in outputs["controller-0.log"] + outputs["controller-1.log"]
    outputs["this process's log (emulator, kubelets)"] = caplog.text

    found = [
        Secret("the grant-API token", grant_token),
        Secret("a release token", release_token),
        *key_secrets("the serving key", serving_key),
        *key_secrets("the CA's key", ca_key),
        *api_credentials,
    ]
    leaked = leaks(found, outputs)
    assert not leaked, leaked
