"""The controller at Kubernetes' published limits (issue 26): `python -m tests.benchmarks scale --pods 150000
--nodes 5000` runs a real `python -m webhook` process (TLS, a token, no leader election) against sim's API
emulator (`python -m sim apiserver`, a process of its own, over HTTP), with this process as the cluster
around them, and measures four figures against their goals while a steady stream of pod changes runs:

- the controller's RSS, the highest sample (psutil, every 0.5 s from its start: its list included), <= 1 GiB;
- from a pod patched Ready through the API to the next grant of a pod of its group (a node's wait answered
  with it, or the grant a new pod asked for itself), p99 <= 200 ms; a Ready whose group's next pod was never
  granted counts with the time it waited until the end (a lower bound). This end-to-end figure includes the
  emulator's write and watch and this process's stand-ins; beside it, the controller's own part (its
  `stagger_controller_grant_latency_seconds`: from the Ready reaching its pod watch to the grant written into
  a wait's answer), read from its /metrics at the window's start and after the grace, p50 and p99
  interpolated in the histogram's buckets as Prometheus' histogram_quantile does (so no finer than them);
- admission, `POST /mutate/pods` with admission_bench's AdmissionReviews (its 20 policies are in the policy
  file too) at --admission-rate, open loop: p99 of the controller's own time (`X-Stagger-Admission-Ms`, as
  the admission benchmark's goal) <= 3 ms; the client's p99 (TLS, queueing in the controller) is shown too;
- requests from lockd to the controller per node per second (the waits and grants the stand-ins below sent
  in the window), <= 1; the controller's `stagger_controller_requests_total` for those routes is shown too.

The cluster, all played by this process on one event loop:
- seeding, before the controller starts (its list is the whole population): --pods pods created through the
  API as admission leaves them (enable, staggered and group labels, the group-key annotation, the init
  client), each bound to one of --nodes nodes (spec.nodeName) and in one of --groups groups, whose policy
  lets one pod start at a time (`maxConcurrent: 1`). Each group's oldest pod is created started (granted-at,
  no staggered label), as lockd's grant leaves a pod; every other pod is held.
- one lockd stand-in per node: one long poll `POST /v1/groups/wait` naming the node's held pods, oldest first
  (lockd's pods stepping aside for their group), with `grant: true`; answered, each pod granted in the answer
  is recorded on its pod as lockd records a grant (granted-at, the staggered label removed), with no
  request of its own. A new pod on the
  node asks for a grant once, then steps aside: the open wait is replaced by one naming it too, as lockd's
  GroupWatch does (a cancelled request closes its connection: a new TLS connection). The streams are opened
  over a ramp (up to 10 s), then everything runs WARMUP seconds before the window.
- the kubelets: --rate times a second, the oldest started pod is patched Ready (phase Running, the Ready
  condition, its init client ended with the granted outcome), then deleted and replaced by a new held pod
  of its group on a random node: a rolling update that never ends, so the population stays --pods and every
  group keeps held pods (every group has waiting pods and a wait names them: the pacing's worst case).

`--json` prints one object whose first keys are the four figures; `--profile DIR` records where the
controller, the emulator and this process spend their time (py-spy, raw stacks: while the controller lists,
and in the window) and adds the top functions to the results. `--pin-controller CPU` runs the controller on
that CPU alone and the emulator and this process on the other CPUs this process may use (each started
with its affinity set, so every thread it starts inherits it), so that the controller's figures are not
those of a CPU shared with the test bed. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import random
import re
import resource
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import trustme
from prometheus_client.parser import text_string_to_metric_families

from sim.kubeclient import client_for_url
from stagger.contracts.groups import GRANT_PATH, WAIT_PATH
from stagger.kube import PODS, ApiError, RestClient
from stagger.names import Names
from stagger.timestamps import format_rfc3339
from tests.benchmarks import admission_bench, running
from tests.benchmarks.running import Probe, Profiles, serving

NAMES = Names()
TOKEN = "bench-token"
NS = "default"
POLICY = "scale"
INIT = "stagger-wait"
WAIT_SECONDS = 30  # lockd's --group-wait
WARMUP = 5.0
GRACE = 5.0  # after the window, for the answers to its last Readies
IN_FLIGHT = 500  # Readies or reviews under way at once, at most
GOALS = {  # the four figures: goal (at most), unit, what it is
    "controller_rss_mib": (1024.0, "MiB", "controller RSS, highest"),
    # The controller's own time (its stagger_controller_grant_latency_seconds), as issue 39 sets the goal;
    # the end-to-end figure, which adds the emulator's and the stand-ins' time, is reported beside it.
    "grant_p99_ms": (200.0, "ms", "Ready -> grant p99, the controller's own"),
    "admission_p99_ms": (3.0, "ms", "admission p99, the controller's own time"),
    "lockd_requests_per_node_second": (1.0, "", "requests from lockd per node per second"),
}
CONTROLLER_BANNER = re.compile(
    r"admission on https://127\.0\.0\.1:(\d+)/mutate/pods.*probes on (http://\S+:\d+)"
)
EMULATOR_BANNER = re.compile(r"apiserver listening on (http://\S+)")
GRANT_LATENCY = "stagger_controller_grant_latency_seconds"
REQUESTS = re.compile(r'^stagger_controller_requests_total\{code="\w+",route="([^"]+)"\} (\S+)$', re.M)
GRANTED = {"exitCode": 0, "reason": "Completed", "message": '{"slot": "granted"}'}
READY = {"status": {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "initContainerStatuses": [{"name": INIT, "image": "stagger:bench", "imageID": "", "ready": True,
                               "restartCount": 0, "state": {"terminated": GRANTED}}],
}}  # fmt: skip


@dataclass(frozen=True)
class Size:
    pods: int
    nodes: int
    groups: int
    seconds: float = 30.0  # the window
    rate: float = 100.0  # Readies a second
    admission_rate: float = 50.0  # AdmissionReviews a second


def policy_file() -> str:
    """admission_bench's 20 policies and the one every pod here is in (one pod starting per group)."""
    return admission_bench.policy_file() + (
        f"- name: {POLICY}\n  labelSelector: {{matchLabels: {{app: scale}}}}\n"
        "  groupingExpression: .metadata.labels.group\n  pacer: {maxConcurrent: {value: 1}}\n"
        "  maxBlockedDuration: 24h\n  startTimeout: 24h\n"
    )


def make_pod(index: int, group: int, node: str, *, granted: float | None = None) -> dict[str, Any]:
    """A pod as admission leaves it, bound to `node`; held, or started with lockd's grant on it."""
    labels = {"app": "scale", "group": f"g{group}", NAMES.enable_label: "1", NAMES.group_label: f"g{group}"}
    annotations = {NAMES.group_key_annotation: json.dumps({POLICY: f"g{group}"})}
    if granted is None:
        labels[NAMES.staggered_label] = "1"
    else:
        annotations.update(grant_patch(granted)["metadata"]["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{index:07d}", "namespace": NS, "labels": labels, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "initContainers": [{"name": INIT, "image": "stagger:bench"}],
            "containers": [{"name": "app", "image": f"example/g{group}:1"}],
        },
    }


def grant_patch(now: float) -> dict[str, Any]:
    """What lockd writes on a pod it granted (lockd/clusterwatch.py)."""
    stamp = format_rfc3339(now)
    annotations = {NAMES.granted_at_annotation: stamp, NAMES.node_slot_annotation: stamp}
    return {"metadata": {"annotations": annotations, "labels": {NAMES.staggered_label: None}}}


def percentile(values: list[float], q: float) -> float:
    """Nearest rank (q in 0..1); 0 for no values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The q-quantile (0 < q <= 1) of a histogram given as cumulative counts by upper bound (`inf` for
    +Inf), as Prometheus' histogram_quantile computes it: linear interpolation inside the bucket the rank
    falls in, the lowest bucket starting at 0; a rank in the +Inf bucket gives the highest finite bound.
    None without observations."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0 or len(bounds) < 2:
        return None
    rank = q * total
    start, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                return start
            return start + (bound - start) * (rank - below) / (count - below)
        start, below = bound, count
    return start


def grant_buckets(text: str) -> dict[float, float]:
    """The controller's grant-latency histogram in a /metrics page: cumulative counts by upper bound."""
    return {
        float(sample.labels["le"]): float(sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == GRANT_LATENCY
        for sample in family.samples
        if sample.name == f"{GRANT_LATENCY}_bucket"
    }


def cpu_plan(pin: int | None) -> tuple[set[int], set[int]] | None:
    """With `pin`: (the controller's CPU, the others this process may use: the emulator's and its own)."""
    if pin is None:
        return None
    mine = os.sched_getaffinity(0)
    if pin not in mine or len(mine) < 2:
        raise ValueError(f"--pin-controller {pin}: needs a CPU of {sorted(mine)} and another one")
    return {pin}, mine - {pin}


def pinned(command: list[str], cpus: set[int] | None) -> list[str]:
    """`command`, started on `cpus` only (None: anywhere). Set before it runs (a trampoline sets the
    affinity, then execs it: the same pid), so every thread it ever starts inherits it; set on a running
    process it would move only the thread it names."""
    if cpus is None:
        return command
    trampoline = (
        f"import os, sys; os.sched_setaffinity(0, {sorted(cpus)}); os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", trampoline, *command]


def _pin_this_process(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (threads started later inherit it from theirs)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


class Cluster:
    """What this process plays: the pods' bookkeeping, the lockd stand-ins' requests, the kubelets."""

    def __init__(self, *, api: RestClient, session: aiohttp.ClientSession, groups: int) -> None:
        self.api, self.session, self.groups = api, session, groups
        self.url = ""  # the controller's
        self.rng = random.Random(26)
        self.nodes: list[Node] = []
        self.group_of: dict[str, int] = {}
        self.uid_of: dict[str, str] = {}
        self.started: collections.deque[str] = collections.deque()  # oldest grant first
        self.pending: dict[int, tuple[float, bool]] = {}  # group -> (its Ready patch sent, in the window)
        self.latencies: list[float] = []
        self.sent: collections.Counter[str] = collections.Counter()  # lockd's requests in the window
        self.stats: collections.Counter[str] = collections.Counter()
        self.measuring = False
        self.created = 0
        self.tasks: set[asyncio.Task[None]] = set()  # new pods asking for their grant

    async def post(self, path: str, body: Any) -> Any:
        if self.measuring:
            self.sent[path] += 1
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with self.session.post(self.url + path, json=body, headers=headers) as response:
            if response.status != 200:
                raise ValueError(f"{path}: HTTP {response.status}: {(await response.text())[:200]}")
            return await response.json()

    def named(self, names: list[str]) -> None:
        """An answer granted these pods: it ends their group's pending Ready."""
        now = time.perf_counter()
        for name in names:
            began = self.pending.pop(self.group_of.get(name, -1), None)
            if began is not None and began[1]:
                self.latencies.append((now - began[0]) * 1000)

    async def create(self, group: int, node: str, *, granted: float | None = None) -> str:
        index, self.created = self.created, self.created + 1
        pod = await self.api.create(PODS, make_pod(index, group, node, granted=granted), namespace=NS)
        name = str(pod["metadata"]["name"])
        self.group_of[name], self.uid_of[name] = group, pod["metadata"]["uid"]
        return name

    async def seed(self, pods: int, *, log: Callable[[str], None]) -> None:
        """Every group's first pod started, the rest held, each on a random node (32 creators)."""
        todo = collections.deque(range(pods))
        now, done = time.time(), 0

        async def creator() -> None:
            nonlocal done
            while todo:
                index = todo.popleft()
                node, started = self.rng.choice(self.nodes), index < self.groups
                name = await self.create(index % self.groups, node.name, granted=now if started else None)
                if started:
                    self.started.append(name)
                else:
                    node.held[name] = None
                done += 1
                if done % max(1, pods // 10) == 0:
                    log(f"seeded {done} of {pods} pods")

        await asyncio.gather(*(creator() for _ in range(32)))

    async def started_pod(self, name: str) -> None:
        """A grant, recorded on the pod as lockd records it; the pod then starts."""
        try:
            await self.api.patch(PODS, name=name, namespace=NS, patch=grant_patch(time.time()))
        except ApiError as err:
            self.stats[f"grant patch HTTP {err.status}"] += 1
            return
        self.started.append(name)

    async def cycle(self, name: str) -> None:
        """A kubelet: the pod turns Ready; then it is deleted and replaced by a new held pod of its group."""
        group = self.group_of[name]
        self.pending[group] = (time.perf_counter(), self.measuring)
        try:
            await self.api.patch(PODS, name=name, namespace=NS, subresource="status", patch=READY)
            self.stats["Ready patches"] += 1
            await self.api.delete(PODS, name=name, namespace=NS, grace_period_seconds=0)
            del self.group_of[name], self.uid_of[name]
            node = self.rng.choice(self.nodes)
            node.arrived(await self.create(group, node.name))
        except (ApiError, aiohttp.ClientError, TimeoutError) as err:
            self.stats[f"kubelet error {type(err).__name__}"] += 1

    def kubelet(self) -> Coroutine[Any, Any, None] | None:
        """The next Ready (None when no pod is started)."""
        return self.cycle(self.started.popleft()) if self.started else None


class Node:
    """One node's lockd, as the controller sees it: one wait stream, grants, and their patches."""

    def __init__(self, name: str, cluster: Cluster) -> None:
        self.name, self.cluster = name, cluster
        self.held: dict[str, None] = {}  # oldest first
        self.changed = asyncio.Event()
        self.opened = False

    def arrived(self, name: str) -> None:
        task = asyncio.create_task(self._arrived(name))
        self.cluster.tasks.add(task)
        task.add_done_callback(self.cluster.tasks.discard)

    async def _arrived(self, name: str) -> None:
        if not await self.grant(name, new=True):
            self.held[name] = None
            self.changed.set()

    async def grant(self, name: str, *, new: bool = False) -> bool:
        if not new and name not in self.held:
            return False  # named again while its grant was under way
        body = {"namespace": NS, "name": name, "uid": self.cluster.uid_of.get(name, ""), "node": self.name}
        try:
            answer = await self.cluster.post(GRANT_PATH, body)
        except (ValueError, aiohttp.ClientError, TimeoutError) as err:
            self.cluster.stats[f"grant error: {str(err)[:60]}"] += 1
            return False
        self.cluster.stats["grants" if answer["granted"] else "grants refused"] += 1
        if not answer["granted"]:
            return False
        if new:
            self.cluster.named([name])
        self.held.pop(name, None)
        await self.cluster.started_pod(name)
        return True

    async def run(self, delay: float) -> None:
        await asyncio.sleep(delay)
        while True:
            self.changed.clear()
            if not self.held:
                self.opened = True
                await self.changed.wait()
                continue
            pods = [
                {"namespace": NS, "name": name, "uid": self.cluster.uid_of.get(name, "")}
                for name in self.held
            ]
            body = {"node": self.name, "wait": WAIT_SECONDS, "pods": pods, "grant": True}
            request = asyncio.ensure_future(self.cluster.post(WAIT_PATH, body))
            self.opened = True
            changed = asyncio.ensure_future(self.changed.wait())
            try:
                await asyncio.wait({request, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                if not request.done():
                    request.cancel()  # more pods stepped aside (ask again naming them too), or stopping
                    await asyncio.wait({request})
            if request.cancelled():
                continue
            try:
                names = [pod["name"] for pod in request.result()["granted"]]
            except (ValueError, aiohttp.ClientError, TimeoutError) as err:
                self.cluster.stats[f"wait error: {str(err)[:60]}"] += 1
                await asyncio.sleep(1.0)
                continue
            self.cluster.named(names)
            # Granted in the answer, as lockd uses such grants: recorded on the pod, no request of its own.
            self.cluster.stats["grants in a wait's answer"] += len(names)
            for name in names:
                if name in self.held:  # not gone meanwhile
                    del self.held[name]
                    await self.cluster.started_pod(name)


async def open_loop(
    rate: float, stop: asyncio.Event, fire: Callable[[], Coroutine[Any, Any, None] | None], skipped: str,
    stats: collections.Counter[str],
) -> None:  # fmt: skip
    """`fire()` `rate` times a second, each at its time whether or not earlier ones are done (at most
    IN_FLIGHT; a tick with nothing to fire, or over that, counts as `skipped`), until `stop`; then waits for all."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    start, n = loop.time(), 0
    while not stop.is_set():
        n += 1
        delay = start + n / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        work = fire() if len(tasks) < IN_FLIGHT else None
        if work is None:
            stats[skipped] += 1
            continue
        task = asyncio.create_task(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def admissions(
    url: str, context: ssl.SSLContext, rate: float, stop: asyncio.Event, cluster: Cluster
) -> tuple[list[float], list[float]]:
    """admission_bench's reviews at `rate`; (the controller's own ms, the client's ms) in the window."""
    bodies = [admission_bench.review_body(i) for i in range(500)]
    own: list[float] = []
    client: list[float] = []
    headers = {"Content-Type": "application/json"}
    sent = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=16)) as session:

        async def send(body: bytes) -> None:
            began, measuring = time.perf_counter(), cluster.measuring
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if measuring and response.status == 200:
                        client.append((time.perf_counter() - began) * 1000)
                        own.append(float(response.headers["X-Stagger-Admission-Ms"]))
            except (aiohttp.ClientError, TimeoutError):
                cluster.stats["admission errors"] += 1

        def fire() -> Coroutine[Any, Any, None]:
            nonlocal sent
            sent += 1
            return send(bodies[sent % len(bodies)])

        await open_loop(rate, stop, fire, "admission reviews skipped (too many in flight)", cluster.stats)
    return own, client


def _files(folder: Path, nodes: int) -> tuple[ssl.SSLContext, list[str], list[str]]:
    """The controller's certificate, token and policies in `folder`; a client context that trusts it; the
    emulator's and the controller's commands. Raises the open-file limit to a connection per node on both ends."""
    ca = trustme.CA()
    pair = ca.issue_cert("127.0.0.1")
    pair.cert_chain_pems[0].write_to_path(str(folder / "tls.crt"))
    pair.private_key_pem.write_to_path(str(folder / "tls.key"))
    (folder / "token").write_text(TOKEN)
    (folder / "policies.yaml").write_text(policy_file())
    context = ssl.create_default_context()
    ca.configure_trust(context)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * nodes + 2048
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard) if hard >= 0 else wanted, hard))
    emulator = [sys.executable, "-m", "sim", "apiserver", "--listen", "127.0.0.1:0",
                "--kubeconfig", str(folder / "kubeconfig"), "--log-level", "WARNING"]  # fmt: skip
    controller = [
        sys.executable, "-m", "webhook", "--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0",
        "--image", "stagger:bench", "--tls-cert", str(folder / "tls.crt"), "--tls-key", str(folder / "tls.key"),
        "--policies", str(folder / "policies.yaml"), "--kubeconfig", str(folder / "kubeconfig"),
        "--token-file", str(folder / "token"), "--no-leader-elect", "--log-level", "warning",
    ]  # fmt: skip
    return context, emulator, controller


async def _scrape(session: aiohttp.ClientSession, probes: str) -> str:
    """The controller's /metrics page."""
    async with session.get(probes + "/metrics") as response:
        return await response.text()


def _requests(text: str) -> collections.Counter[str]:
    """`stagger_controller_requests_total` by route (every code)."""
    counts: collections.Counter[str] = collections.Counter()
    for route, value in REQUESTS.findall(text):
        counts[route] += int(float(value))
    return counts


async def _until_ready(session: aiohttp.ClientSession, probes: str, proc: asyncio.subprocess.Process) -> None:
    """Until the controller has listed every enabled pod (its /readyz) and its steward turned granting on."""
    while True:
        if proc.returncode is not None:
            raise RuntimeError("the controller exited while listing")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(probes + "/readyz") as response:
                if response.status == 200:
                    break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1.0)  # the steward's turn (every 0.5 s)


async def _sample(probes: list[Probe]) -> None:
    while True:
        for probe in probes:
            probe.sample()
        await asyncio.sleep(0.5)


async def run(
    size: Size,
    *,
    profile: Path | None = None,
    pin: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Seeds the emulator, starts the controller, runs the window: the results (`results`). With `pin`, the
    controller runs on that CPU and the emulator and this process on the others (`cpu_plan`)."""
    profiles = Profiles(profile)
    facts: dict[str, Any] = {}
    plan = cpu_plan(pin)
    facts["CPUs (the controller / the emulator and this process)"] = (
        "not pinned" if plan is None else [sorted(plan[0]), sorted(plan[1])]
    )
    with tempfile.TemporaryDirectory() as folder:
        context, emulator, controller = _files(Path(folder), size.nodes)
        if plan is not None:
            emulator, controller = pinned(emulator, plan[1]), pinned(controller, plan[0])
        async with contextlib.AsyncExitStack() as stack:
            if plan is not None:
                _pin_this_process(plan[1])
                stack.callback(_pin_this_process, plan[0] | plan[1])  # as it was, on the way out
            stack.push_async_callback(profiles.stop)
            emu, emu_match, emu_log = await stack.enter_async_context(serving(emulator, EMULATOR_BANNER))
            plain = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
            await stack.enter_async_context(plain)
            lockd = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=0))
            await stack.enter_async_context(lockd)
            api = client_for_url(session=plain, base_url=emu_match[1])
            cluster = Cluster(api=api, session=lockd, groups=size.groups)
            cluster.nodes = [Node(f"node-{n:05d}", cluster) for n in range(size.nodes)]
            began = time.monotonic()
            await cluster.seed(size.pods, log=log)
            facts["pods seeded in (s)"] = round(time.monotonic() - began, 1)
            log(f"seeded {size.pods} pods in {time.monotonic() - began:.0f} s; starting the controller")
            ctl, match, ctl_log = await stack.enter_async_context(serving(controller, CONTROLLER_BANNER))
            cluster.url = f"https://127.0.0.1:{match[1]}"
            pids = {"controller": ctl.pid, "emulator": emu.pid, "bench": psutil.Process().pid}
            probes = [Probe(pid) for pid in pids.values()]
            sampler = asyncio.create_task(_sample(probes))
            stack.callback(sampler.cancel)
            began = time.monotonic()
            await profiles.start("list", pids)
            await _until_ready(plain, match[2], ctl)
            await profiles.stop()
            facts["controller listed every pod and granted after (s)"] = round(time.monotonic() - began, 1)
            log(
                f"the controller listed them in {time.monotonic() - began:.1f} s; opening {size.nodes} wait streams"
            )
            rss = [probes[0].sample()]
            window = await _steady(cluster, size, context, (plain, match[2]), probes, (profiles, pids), log)
            rss.append(probes[0].sample())
    rss.insert(1, window["rss open"])
    facts["controller RSS once granting / with every stream open / at the end (MiB)"] = [
        round(r / 2**20, 1) for r in rss
    ]
    facts["emulator RSS, highest (MiB)"] = round(probes[1].peak / 2**20, 1)
    facts["this process's RSS, highest (MiB)"] = round(probes[2].peak / 2**20, 1)
    facts["log lines of the controller (warning and up), by message"] = dict(ctl_log.most_common(8))
    facts["log lines of the emulator (warning and up), by message"] = dict(emu_log.most_common(8))
    if profile is not None:
        facts["profiles (py-spy)"] = profiles.summary()
    return results(cluster, size, window, facts, probes)


async def _steady(
    cluster: Cluster, size: Size, context: ssl.SSLContext, metrics: tuple[aiohttp.ClientSession, str],
    probes: list[Probe], profiling: tuple[Profiles, dict[str, int]], log: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    """The wait streams opened over a ramp, the kubelets and admission for WARMUP, then the window."""
    nodes = cluster.nodes
    ramp = min(10.0, len(nodes) / 500)
    streams = [asyncio.create_task(node.run(ramp * i / len(nodes))) for i, node in enumerate(nodes)]
    stop = asyncio.Event()
    helpers: list[asyncio.Task[Any]] = []
    try:
        for _ in range(int(ramp * 10) + 600):  # every stream open (a minute after the ramp at most)
            if all(node.opened for node in nodes):
                break
            await asyncio.sleep(0.1)
        rss_open = probes[0].sample()
        skipped = f"Readies skipped (none started, or {IN_FLIGHT} in flight)"
        kubelets = asyncio.create_task(open_loop(size.rate, stop, cluster.kubelet, skipped, cluster.stats))
        url = cluster.url + "/mutate/pods"
        reviews = asyncio.create_task(admissions(url, context, size.admission_rate, stop, cluster))
        helpers += [kubelets, reviews]
        await asyncio.sleep(WARMUP)
        log(f"streams open, warm-up done; measuring for {size.seconds:g} s")
        first = await _scrape(*metrics)
        before = _requests(first)
        for probe in probes:
            probe.mark()
        await profiling[0].start("window", profiling[1])
        cluster.measuring, began = True, time.monotonic()
        await asyncio.sleep(size.seconds)
        cluster.measuring, took = False, time.monotonic() - began
        for probe in probes:
            probe.mark()
        after = _requests(await _scrape(*metrics))
        await profiling[0].stop()
        stop.set()
        await kubelets
        own, client = await reviews
        for _ in range(int(GRACE * 10)):
            if not any(inside for _, inside in cluster.pending.values()):
                break
            await asyncio.sleep(0.1)
        now = time.perf_counter()
        unanswered = [(now - t0) * 1000 for t0, inside in cluster.pending.values() if inside]
        # The controller's own histogram over the same Readies: from the window's start to after the grace
        # (no Ready is sent after the window; the grants of its last ones come in the grace).
        last, start = grant_buckets(await _scrape(*metrics)), grant_buckets(first)
        timed = {bound: count - start.get(bound, 0.0) for bound, count in last.items()}
    finally:
        stop.set()
        for task in (*streams, *helpers, *cluster.tasks):
            task.cancel()
        await asyncio.gather(*streams, *helpers, *cluster.tasks, return_exceptions=True)
    return {"took": took, "own": own, "client": client, "unanswered": unanswered, "metrics": after - before,
            "rss open": rss_open, "grant buckets": timed}  # fmt: skip


def results(
    cluster: Cluster, size: Size, window: dict[str, Any], facts: dict[str, Any], probes: list[Probe]
) -> dict[str, Any]:
    """The four figures first, then their goals and everything else measured."""
    took, own, buckets = window["took"], window["own"], window["grant buckets"]
    latencies = cluster.latencies + window["unanswered"]
    counted = window["metrics"][GRANT_PATH] + window["metrics"][WAIT_PATH]
    own_p99 = _ms(histogram_quantile(0.99, buckets))
    figures = {
        "controller_rss_mib": round(probes[0].peak / 2**20, 1),
        "grant_p99_ms": own_p99,  # None when the controller timed no grant
        "admission_p99_ms": round(percentile(own, 0.99), 3),
        "lockd_requests_per_node_second": round(sum(cluster.sent.values()) / size.nodes / took, 4),
    }
    return {
        **figures,
        "admission_client_p99_ms": round(percentile(window["client"], 0.99), 2),
        "grant_end_to_end_p99_ms": round(percentile(latencies, 0.99), 1),
        "goals (at most)": {key: {"goal": GOALS[key][0], "met": value is not None and value <= GOALS[key][0]} for key, value in figures.items()},
        "pods": size.pods,
        "nodes": size.nodes,
        "groups": size.groups,
        "window (s)": round(took, 1),
        **facts,
        "CPU in the window, % of one core (controller, emulator, this process)": [p.busy(took) for p in probes],
        "Readies a second (asked / done in the window)": [size.rate, round(len(latencies) / took, 1)],
        "Readies measured / never answered": [len(latencies), len(window["unanswered"])],
        "Ready -> next grant p50 / p90 / max (ms)": [
            round(percentile(latencies, 0.5), 1), round(percentile(latencies, 0.9), 1), round(max(latencies, default=0), 1)
        ],
        CONTROLLER_GRANT: [_ms(histogram_quantile(0.5, buckets)), _ms(histogram_quantile(0.99, buckets))],
        "grants the controller timed from a Ready (its histogram's count)": round(buckets.get(math.inf, 0.0)),
        "admission reviews a second (asked / sent in the window and answered 200)": [size.admission_rate, round(len(own) / took, 1)],
        "admission p50 / max, the controller's own time (ms)": [round(percentile(own, 0.5), 3), round(max(own, default=0), 3)],
        "admission p50 / max, the client's time (ms)": [round(percentile(window["client"], 0.5), 2), round(max(window["client"], default=0), 2)],
        "lockd requests in the window (wait, grant)": [cluster.sent[WAIT_PATH], cluster.sent[GRANT_PATH]],
        "the controller's count of them, per node per second": round(counted / size.nodes / took, 4),
        "events": dict(sorted(cluster.stats.items())),
    }  # fmt: skip


CONTROLLER_GRANT = (
    "Ready -> grant, the controller's own p50 / p99 (ms; its stagger_controller_grant_latency_seconds, "
    "interpolated in the buckets)"
)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def render(results: dict[str, Any]) -> str:
    """The four figures with their goals, then every other number."""
    lines = [f"scale: {results['pods']} pods on {results['nodes']} nodes in {results['groups']} groups"]
    for key, (goal, unit, label) in GOALS.items():
        verdict = "met" if results["goals (at most)"][key]["met"] else "MISSED"
        value = "none" if results[key] is None else format(results[key], "g")
        lines.append(f"  {label:<44} {value:>9} {unit:<3}  goal <= {goal:g} {unit:<3}  {verdict}")
    client = results["admission_client_p99_ms"]
    lines.append(f"  {'(admission p99, the client: TLS, queueing)':<44} {client:>9g} ms   (the same goal)")
    end_to_end = results["grant_end_to_end_p99_ms"]
    lines.append(
        f"  {'(Ready -> grant p99, end to end: + test bed)':<44} {end_to_end:>9g} ms   "
        "(the emulator's patch and watch, the stand-ins' wait)"
    )
    lines.append("details:")
    for key, value in list(results.items())[7:]:
        lines.append(
            f"  {key}: {json.dumps(value, indent=4) if isinstance(value, dict) else json.dumps(value)}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--pods", type=int, default=150_000, help="pods in the cluster (150000)")
    parser.add_argument("--nodes", type=int, default=5_000, help="nodes, each with a lockd stand-in (5000)")
    parser.add_argument("--groups", type=int, help="default: pods / 10")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the measured window (30)")
    parser.add_argument("--rate", type=float, default=100.0, help="pods turned Ready a second (100)")
    parser.add_argument("--admission-rate", type=float, default=50.0, help="AdmissionReviews a second (50)")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy the processes (raw stacks in DIR)"
    )
    parser.add_argument(
        "--pin-controller",
        type=int,
        metavar="CPU",
        help="run the controller on this CPU alone, the emulator and this process on the others",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    groups = args.groups or max(1, args.pods // 10)
    if (
        args.nodes < 1
        or not 1 <= groups <= args.pods // 2
        or min(args.seconds, args.rate, args.admission_rate) <= 0
    ):
        parser.error("needs a node, groups of 2 pods or more, and positive --seconds and rates")

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    if args.pin_controller is not None:
        try:
            cpu_plan(args.pin_controller)
        except ValueError as err:
            parser.error(str(err))
    size = Size(args.pods, args.nodes, groups, args.seconds, args.rate, args.admission_rate)
    found = running.run(run(size, profile=args.profile, pin=args.pin_controller, log=log))
    print(json.dumps(found, indent=2) if args.json else render(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
