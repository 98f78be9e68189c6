"""lockd on a node, measured against a real `python -m lockd --standalone` process (and, for memory, one
in cluster mode on the API emulator), each figure next to its reference measured in the same run:

- RSS and CPU (psutil `cpu_times` of the lockd process, user + system, as a share of one core over 30 s,
  and the same from /proc/PID/task/*/schedstat, which resolves what psutil's 10 ms ticks cannot) at rest
  and with 110 and 250 long-pollers (`wait=30`, each asking again as soon as it is answered, as the init
  client does) queued behind a held slot; the same at rest and with 250 in cluster mode, where lockd
  reads a plain kubeconfig as it reads its service account in a pod. lockd runs as the chart runs it:
  `SSL_CERT_FILE` names one CA (the chart's: the service account's), not the machine's public CA bundle,
  which aiohttp would load at import (about 1.2 MiB); RSS at rest with the public CAs (SSL_CERT_FILE
  unset, as `make run` from a shell) and the bare aiohttp app's RSS at rest are measured beside it;
- the 423 path (`/v1/lock` of a queued pod, and pod-startup-lock's `GET /`) and the 200 path (`/v1/lock`
  of the holder asking again) at 64 connections with `wrk -t1 -c64 -d5s --latency`: requests per second,
  p50/p99 latency and the server's CPU time per request, against `tests.benchmarks.bare_app` (a bare aiohttp
  handler returning the same answer) run in turn with lockd, same machine, same wrk command;
- hand-off: from sending the holder's DELETE to the next waiter's 200, with 100 waiters queued.

Every figure is the median of `runs` runs. Benchmarks measure, they do not assert.

`python -m tests.benchmarks.lockd_node_bench [--runs 3] [--tree DIR --label NAME]` writes tests/benchmarks/lockd.json and
tests/benchmarks/lockd.md; `--tree` runs lockd from another checkout (a `git worktree` of an older commit) into its
own column, for before/after.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from tests.benchmarks import lockd_bench
from tests.processes import clean_env, free_port

WAITER_COUNTS = (0, 110, 250)
CPU_WINDOW = 30.0  # seconds of lockd CPU per waiter count: one whole long-poll cycle (wait=30), so each
# waiter asks again once in the window, as it would all day
ROOT = Path(__file__).resolve().parents[2]
# The source tree lockd runs from (`--tree`: an older checkout, for before/after); the bare app always
# runs from this one.
TREE = ROOT
WRK = ("wrk", "-t1", "-c64", "-d5s", "--latency")
HANDOFF_WAITERS = 100
HANDOFFS = 40  # per run
LONG_POLL = "30"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{psutil.cpu_count(logical=True)} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.1f} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}, load average {load} at start"
    )


@contextlib.asynccontextmanager
async def _process(
    *argv: str, ready: str, tree: Path | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[psutil.Process]:
    where = tree or ROOT
    environ = clean_env(PYTHONPATH=str(where), **(env or {}))
    if env is not None and env.get("SSL_CERT_FILE") == "":
        del environ["SSL_CERT_FILE"]  # OpenSSL's own default: the machine's CA bundle
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=environ,
        cwd=where,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with aiohttp.ClientSession() as session:
            await lockd_bench.wait_ok(session, ready, what=" ".join(argv[1:3]))
        yield psutil.Process(proc.pid)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


def chart_env(tmp: Path) -> dict[str, str]:
    """lockd's environment as the chart sets it, for what changes its memory: SSL_CERT_FILE names one CA
    (in a pod the service account's; here a trustme CA standing in for it)."""
    import trustme

    ca_file = tmp / "cluster-ca.crt"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    return {"SSL_CERT_FILE": str(ca_file)}


PUBLIC_CAS = {"SSL_CERT_FILE": ""}  # unset: OpenSSL loads the machine's CA bundle, as from a shell


@contextlib.asynccontextmanager
async def lockd(
    tmp: Path, port: int, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[psutil.Process]:
    policies = tmp / "policies.yaml"
    policies.write_text(lockd_bench.POLICY)
    argv = [sys.executable, "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}"]
    argv += ["--policies", str(policies), "--log-level", "warning", "--max-queue", "2000", *extra]
    async with _process(
        *argv, ready=f"http://127.0.0.1:{port}/readyz", tree=TREE, env=chart_env(tmp) if env is None else env
    ) as proc:
        yield proc


@contextlib.asynccontextmanager
async def bare(port: int, *, env: dict[str, str] | None = None) -> AsyncIterator[psutil.Process]:
    argv = [sys.executable, "-m", "tests.benchmarks.bare_app", "--port", str(port)]
    async with _process(*argv, ready=f"http://127.0.0.1:{port}/healthz", env=env) as proc:
        yield proc


def cpu_seconds(proc: psutil.Process) -> float:
    """psutil's user + system CPU time of the process (10 ms ticks)."""
    times = proc.cpu_times()
    return float(times.user + times.system)


def cpu_ns(proc: psutil.Process) -> int:
    """Time on CPU in nanoseconds, all threads (/proc/PID/task/*/schedstat): what psutil's 10 ms ticks
    cannot resolve in an idle window."""
    total = 0
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


class CpuWindow:
    """CPU share of one core over a window, by both clocks."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.ticks, self.ns, self.started = cpu_seconds(proc), cpu_ns(proc), time.monotonic()

    def shares(self) -> dict[str, float]:
        elapsed = time.monotonic() - self.started
        return {
            "cpu_percent_of_core": (cpu_seconds(self.proc) - self.ticks) / elapsed * 100,
            "cpu_percent_of_core_schedstat": (cpu_ns(self.proc) - self.ns) / 1e9 / elapsed * 100,
        }


def rss_mib(proc: psutil.Process) -> float:
    return float(proc.memory_info().rss / 2**20)


# --- wrk ------------------------------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> dict[str, float]:
    """wrk's --latency report: requests, requests per second, p50 and p99 in ms, non-2xx/3xx count."""
    requests = re.search(r"(\d+) requests in", output)
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", output)
    p50 = re.search(r"\s50%\s+(\S+)", output)
    p99 = re.search(r"\s99%\s+(\S+)", output)
    if not (requests and rate and p50 and p99):
        raise ValueError(f"cannot read wrk's output:\n{output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {
        "requests": float(requests.group(1)),
        "rps": float(rate.group(1)),
        "p50_ms": _ms(p50.group(1)),
        "p99_ms": _ms(p99.group(1)),
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }


async def wrk(url: str, server: psutil.Process) -> dict[str, float]:
    """One wrk run; adds the server's CPU microseconds per request."""
    before = cpu_seconds(server)
    proc = await asyncio.create_subprocess_exec(
        *WRK, url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    result = parse_wrk(out.decode())
    result["cpu_us_per_request"] = (cpu_seconds(server) - before) / result["requests"] * 1e6
    return result


# --- long-pollers ---------------------------------------------------------------------------------------


class Pollers:
    """`count` pods long-polling lockd like init clients: ask with wait=30, ask again when answered."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.base = session, base
        self.tasks: list[asyncio.Task[None]] = []

    async def _poll(self, name: str) -> None:
        while True:
            query = {"namespace": "bench", "name": name, "wait": LONG_POLL}
            async with self.session.get(f"{self.base}/v1/lock", params=query) as response:
                await response.read()

    def add(self, count: int) -> None:
        start = len(self.tasks)
        for i in range(start, start + count):
            self.tasks.append(asyncio.create_task(self._poll(f"poller-{i}")))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


async def queue_length(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(f"{base}/status", params={"limit": "1"}) as response:
        doc = await response.json()
    return int(doc["waiting"])


async def until_queued(session: aiohttp.ClientSession, base: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while await queue_length(session, base) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} waiters did not queue within 30s")
        await asyncio.sleep(0.05)


async def take(session: aiohttp.ClientSession, base: str, name: str) -> str:
    async with session.get(f"{base}/v1/lock", params={"namespace": "bench", "name": name}) as r:
        assert r.status == 200, r.status
        return r.headers["X-Stagger-Release-Token"]


async def at_rest_and_waiting(tmp: Path) -> dict[str, Any]:
    """RSS and CPU share with 0, 110 and 250 long-pollers queued behind a held slot."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    rows: dict[str, Any] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with lockd(tmp, port) as proc, aiohttp.ClientSession(connector=connector) as session:
        await take(session, base, "holder")
        pollers = Pollers(session, base)
        await asyncio.sleep(1.0)
        for count in WAITER_COUNTS:
            pollers.add(count - len(pollers.tasks))
            await until_queued(session, base, count)
            await asyncio.sleep(1.0)  # let the queueing's own requests settle
            window = CpuWindow(proc)
            await asyncio.sleep(CPU_WINDOW)
            rows[str(count)] = {"rss_mib": rss_mib(proc), **window.shares()}
        await pollers.stop()
    # The references for the resting figure, each a fresh process one second after it is ready.
    for key, start in (
        ("rss_mib_public_cas", lambda: lockd(tmp, free_port(), env=PUBLIC_CAS)),
        ("bare_rss_mib", lambda: bare(free_port(), env=chart_env(tmp))),
    ):
        async with start() as proc:
            await asyncio.sleep(1.0)
            rows["0"][key] = rss_mib(proc)
    return rows


async def handoffs(tmp: Path) -> dict[str, Any]:
    """Release → the next waiter's 200, HANDOFFS times, with HANDOFF_WAITERS queued behind the holder."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=0)
    samples: list[float] = []
    async with lockd(tmp, port) as _, aiohttp.ClientSession(connector=connector) as session:
        token = await take(session, base, "holder")
        holder = "holder"
        serial = 0
        answers: dict[str, asyncio.Future[tuple[float, str]]] = {}

        async def waiter(name: str) -> None:
            query = {"namespace": "bench", "name": name, "wait": LONG_POLL}
            while True:
                async with session.get(f"{base}/v1/lock", params=query) as r:
                    await r.read()
                    if r.status == 200:
                        answers[name].set_result((time.perf_counter(), r.headers["X-Stagger-Release-Token"]))
                        return

        names: list[str] = []
        tasks = []

        async def enqueue() -> None:
            nonlocal serial
            name = f"w-{serial:04d}"
            serial += 1
            answers[name] = asyncio.get_running_loop().create_future()
            names.append(name)
            tasks.append(asyncio.create_task(waiter(name)))
            await until_queued(session, base, len(names) - 0)

        for _ in range(HANDOFF_WAITERS):
            await enqueue()
        for _ in range(HANDOFFS):
            head = names.pop(0)
            sent = time.perf_counter()
            async with session.delete(
                f"{base}/v1/lock",
                params={"namespace": "bench", "name": holder},
                headers={"X-Stagger-Release-Token": token},
            ) as r:
                assert r.status == 200, r.status
            answered, token = await answers[head]
            samples.append((answered - sent) * 1000)
            holder = head
            await enqueue()  # the queue stays HANDOFF_WAITERS long
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "handoffs": len(samples),
    }


async def request_paths(tmp: Path) -> dict[str, Any]:
    """wrk on each path, lockd and the bare handler in turn."""
    lport, bport = free_port(), free_port()
    lbase, bbase = f"http://127.0.0.1:{lport}", f"http://127.0.0.1:{bport}"
    paths = {
        "423 /v1/lock": "/v1/lock?namespace=bench&name=queued",
        "423 GET /": "/",
        "200 /v1/lock": "/v1/lock?namespace=bench&name=holder",
    }
    rows: dict[str, Any] = {}
    async with lockd(tmp, lport) as lproc, bare(bport) as bproc, aiohttp.ClientSession() as session:
        await take(session, lbase, "holder")
        await asyncio.sleep(0.5)
        for label, path in paths.items():
            reference = await wrk(bbase + path, bproc)
            measured = await wrk(lbase + path, lproc)
            rows[label] = {
                "lockd": measured,
                "bare": reference,
                "cpu_ratio": measured["cpu_us_per_request"] / reference["cpu_us_per_request"],
                "rps_ratio": reference["rps"] / measured["rps"],
            }
    return rows


async def _tokens(session: aiohttp.ClientSession, api: str, pods: list[Any]) -> dict[str, str]:
    """Each pod's projected service-account token, as the kubelet asks for it (TokenRequest, bound to the
    pod, stagger's audience): what the init client shows lockd."""
    tokens = {}
    for pod in pods:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": ["stagger"],
                "expirationSeconds": 600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid},
            },
        }
        url = f"{api}/api/v1/namespaces/bench/serviceaccounts/default/token"
        async with session.post(url, json=body) as answer:
            tokens[pod.name] = (await answer.json())["status"]["token"]
    return tokens


async def cluster_memory(tmp: Path) -> dict[str, Any]:
    """RSS of lockd in cluster mode (on the API emulator, 260 pods on its node) at rest and with 250 long-pollers
    that each show their pod's service-account token (reviewed once per pod), and whether it imported the
    kubernetes package."""
    from tests.benchmarks.lockd_bench import NODE, _cluster_pods

    api_port, port = free_port(), free_port()
    api, base = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{port}"
    kubeconfig = tmp / "kubeconfig"
    (tmp / "policies.yaml").write_text(lockd_bench.POLICY)
    argv = [sys.executable, "-m", "sim", "apiserver", "--listen", f"127.0.0.1:{api_port}"]
    async with _process(*argv, "--kubeconfig", str(kubeconfig), ready=f"{api}/version"):
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            pods = await _cluster_pods(session, api, ["holder"] + [f"poller-{i}" for i in range(260)])
            tokens = await _tokens(session, api, pods[:251])
            largv = [sys.executable, "-m", "lockd", "--kubeconfig", str(kubeconfig), "--node-name", NODE]
            largv += [
                "--no-events",
                "--listen",
                f"127.0.0.1:{port}",
                "--policies",
                str(tmp / "policies.yaml"),
            ]
            largv += ["--log-level", "warning"]
            async with _process(*largv, ready=f"{base}/readyz", tree=TREE, env=chart_env(tmp)) as proc:
                await asyncio.sleep(1.0)
                rest = rss_mib(proc)
                holder = pods[0]
                async with session.get(
                    f"{base}/v1/lock",
                    params={"namespace": "bench", "name": "holder", "uid": holder.uid},
                    headers={"Authorization": f"Bearer {tokens['holder']}"},
                ) as r:
                    assert r.status == 200, r.status

                async def poll(pod: Any) -> None:
                    query = {"namespace": "bench", "name": pod.name, "uid": pod.uid, "wait": LONG_POLL}
                    headers = {"Authorization": f"Bearer {tokens[pod.name]}"}
                    while True:
                        async with session.get(f"{base}/v1/lock", params=query, headers=headers) as r:
                            await r.read()

                tasks = [asyncio.create_task(poll(pod)) for pod in pods[1:251]]
                await until_queued(session, base, 250)
                await asyncio.sleep(1.0)
                window = CpuWindow(proc)
                await asyncio.sleep(CPU_WINDOW)
                shares = window.shares()
                waiting = rss_mib(proc)
                imported = await _imports_kubernetes(kubeconfig)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "rss_mib_at_rest": rest,
        "rss_mib_250_waiters": waiting,
        "cpu_percent_of_core_250_waiters": shares["cpu_percent_of_core"],
        "cpu_percent_of_core_250_waiters_schedstat": shares["cpu_percent_of_core_schedstat"],
        "kubernetes_package_loaded": imported,
    }


async def _imports_kubernetes(kubeconfig: Path) -> bool:
    """Whether lockd's cluster-mode modules, with this kubeconfig read as lockd reads it, load the kubernetes
    package (a running process's sys.modules cannot be read from outside; this is the same code path)."""
    code = (
        "import sys, pathlib\n"
        "import lockd.__main__, lockd.app, lockd.clusterwatch, lockd.groupclient\n"
        "from stagger import kube\n"
        f"kube.load_config(kubeconfig=pathlib.Path({str(kubeconfig)!r}))\n"
        "print('kubernetes' in sys.modules)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env=clean_env(PYTHONPATH=str(TREE)),
        cwd=TREE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await proc.communicate()
    return out.decode().strip() == "True"


def _median_tree(runs: list[Any]) -> Any:
    """The median of each number across runs (same shape in every run)."""
    first = runs[0]
    if isinstance(first, dict):
        return {key: _median_tree([run[key] for run in runs]) for key in first}
    if isinstance(first, (int, float)):
        return statistics.median(runs)
    return first


async def run(*, runs: int = 3) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (Debian: apt-get install -y wrk)")
    started = machine()
    parts: dict[str, list[Any]] = {"idle_and_waiting": [], "paths": [], "handoff": [], "cluster": []}
    steps: list[tuple[str, Callable[[Path], Awaitable[Any]]]] = [
        ("idle_and_waiting", at_rest_and_waiting),
        ("paths", request_paths),
        ("handoff", handoffs),
        ("cluster", cluster_memory),
    ]
    for _ in range(runs):
        for name, step in steps:
            with tempfile.TemporaryDirectory() as tmp:
                parts[name].append(await step(Path(tmp)))
    return {
        "machine": started,
        "runs": runs,
        "commands": {
            "all": "python -m tests.benchmarks.lockd_node_bench --runs 3 [--tree OLD-CHECKOUT --label before] "
            "(make bench runs it as python -m tests.benchmarks lockd-node)",
            "load": " ".join(WRK) + " URL, against lockd and python -m tests.benchmarks.bare_app in turn",
            "lockd": "python -m lockd --standalone --policies P --max-queue 2000 (P: maxConcurrent 1, holdTimeout 1h)",
        },
        "results": {name: _median_tree(values) for name, values in parts.items()},
        "raw": parts,
    }


# --- the report -----------------------------------------------------------------------------------------

OUT = Path(__file__).parent / "lockd.json"  # beside this code, like every benchmark's report
TARGETS = {
    "cpu_250": "<= 0.5% of a core, not growing with waiters",
    "ratio": "<= 1.3x the bare aiohttp handler",
    "rss_rest": "<= 40 MiB",
    "rss_250": "<= 45 MiB",
}


def _pct(x: float) -> str:
    return f"{x:.2f}%"


def markdown(doc: dict[str, Any]) -> str:
    """tests/benchmarks/lockd.md: one table per measurement, a column per labelled run (e.g. before / after)."""
    labels = [k for k in doc if k not in ("machine", "commands", "notes")]
    res = {label: doc[label]["results"] for label in labels}
    head = "| | " + " | ".join(labels) + " | target |\n|---|" + "---|" * (len(labels) + 1) + "\n"

    def row(name: str, cell: Callable[[dict[str, Any]], str], target: str = "") -> str:
        return f"| {name} | " + " | ".join(cell(res[label]) for label in labels) + f" | {target} |\n"

    out = [f"lockd on a node. Machine: {doc['machine']}.\n"]
    out.append("Medians of " + ", ".join(f"{doc[label]['runs']} runs ({label})" for label in labels) + ".\n")
    out.append("Commands:\n")
    out += [f"- {key}: `{value}`\n" for key, value in doc["commands"].items()]
    out.append(
        "\n### Memory and CPU at rest and with long-pollers (standalone; SSL_CERT_FILE one CA, as the chart"
        " runs lockd)\n\n" + head
    )
    for count in (str(c) for c in WAITER_COUNTS):
        out.append(
            row(
                f"RSS, {count} waiters",
                lambda r, c=count: f"{r['idle_and_waiting'][c]['rss_mib']:.1f} MiB",
                TARGETS["rss_rest"] if count == "0" else TARGETS["rss_250"] if count == "250" else "",
            )
        )

    def mib(value: Any) -> str:
        return "-" if value is None else f"{value:.1f} MiB"

    out.append(
        row(
            "RSS at rest with the machine's public CAs (SSL_CERT_FILE unset, as `make run` from a shell)",
            lambda r: mib(r["idle_and_waiting"]["0"].get("rss_mib_public_cas")),
        )
    )
    out.append(
        row(
            "reference: a bare aiohttp app at rest (tests.benchmarks.bare_app, same SSL_CERT_FILE)",
            lambda r: mib(r["idle_and_waiting"]["0"].get("bare_rss_mib")),
        )
    )
    for count in (str(c) for c in WAITER_COUNTS):
        out.append(
            row(
                f"CPU, {count} waiters (psutil ticks / schedstat)",
                lambda r, c=count: (
                    f"{_pct(r['idle_and_waiting'][c]['cpu_percent_of_core'])} / "
                    f"{_pct(r['idle_and_waiting'][c].get('cpu_percent_of_core_schedstat', float('nan')))}"
                ),
                TARGETS["cpu_250"] if count == "250" else "",
            )
        )
    out.append(
        "\n### Cluster mode (API emulator, 261 pods on the node, lockd's kubeconfig: server + token;"
        " SSL_CERT_FILE one CA)\n\n" + head
    )
    out.append(
        row("RSS at rest", lambda r: f"{r['cluster']['rss_mib_at_rest']:.1f} MiB", TARGETS["rss_rest"])
    )
    out.append(
        row(
            "RSS, 250 waiters", lambda r: f"{r['cluster']['rss_mib_250_waiters']:.1f} MiB", TARGETS["rss_250"]
        )
    )
    out.append(
        row(
            "CPU, 250 waiters (ticks / schedstat)",
            lambda r: (
                f"{_pct(r['cluster']['cpu_percent_of_core_250_waiters'])} / "
                f"{_pct(r['cluster'].get('cpu_percent_of_core_250_waiters_schedstat', float('nan')))}"
            ),
            TARGETS["cpu_250"],
        )
    )
    out.append(
        row(
            "kubernetes package loaded",
            lambda r: str(r["cluster"].get("kubernetes_package_loaded", "?")),
            "no",
        )
    )
    out.append(
        "\n### Request paths, 64 connections (wrk), lockd against a bare aiohttp handler in the same run\n\n"
        + head
    )
    for path in ("423 /v1/lock", "423 GET /", "200 /v1/lock"):
        out.append(
            row(
                f"{path}: CPU per request, lockd / bare",
                lambda r, p=path: (
                    f"{r['paths'][p]['lockd']['cpu_us_per_request']:.0f} / {r['paths'][p]['bare']['cpu_us_per_request']:.0f} us "
                    f"(**{r['paths'][p]['cpu_ratio']:.2f}x**)"
                ),
                TARGETS["ratio"],
            )
        )
        out.append(
            row(
                f"{path}: req/s, lockd / bare",
                lambda r, p=path: (
                    f"{r['paths'][p]['lockd']['rps']:.0f} / {r['paths'][p]['bare']['rps']:.0f} ({r['paths'][p]['rps_ratio']:.2f}x)"
                ),
            )
        )
        out.append(
            row(
                f"{path}: p50 / p99, lockd",
                lambda r, p=path: (
                    f"{r['paths'][p]['lockd']['p50_ms']:.2f} / {r['paths'][p]['lockd']['p99_ms']:.2f} ms"
                ),
            )
        )
        out.append(
            row(
                f"{path}: p50 / p99, bare",
                lambda r, p=path: (
                    f"{r['paths'][p]['bare']['p50_ms']:.2f} / {r['paths'][p]['bare']['p99_ms']:.2f} ms"
                ),
            )
        )
    out.append(f"\n### Hand-off, release to the next waiter's 200, {HANDOFF_WAITERS} waiters\n\n" + head)
    out.append(row("p50 / p99", lambda r: f"{r['handoff']['p50_ms']:.2f} / {r['handoff']['p99_ms']:.2f} ms"))
    if doc.get("notes"):
        out.append("\n" + doc["notes"].strip() + "\n")
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    global TREE
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.lockd_node_bench", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=ROOT, help="run lockd from this checkout (before/after)")
    parser.add_argument("--label", default="current", help="the column this run fills in the report")
    parser.add_argument(
        "--out", type=Path, default=OUT, help="JSON results; the .md table is written next to it"
    )
    args = parser.parse_args(argv)
    TREE = args.tree.resolve()
    result = asyncio.run(run(runs=args.runs))
    doc: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc["machine"], doc["commands"] = result.pop("machine"), result.pop("commands")
    result["tree"] = str(TREE)
    doc[args.label] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
