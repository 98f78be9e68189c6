"""What one long-polling waiter costs lockd in memory (issue 23: goal <= 8 KiB a waiter).

`python -m tests.benchmarks.waiter_memory_bench [--counts 2000 5000] [--traced] [--json]`
(`python -m tests.benchmarks lockd-waiters` runs the RSS part).

- RSS: a real standalone `python -m lockd` (policy: maxConcurrent 1, holdTimeout 1h; --max-queue,
  --max-connections above the count, --waiter-idle-timeout 1h). One pod takes the slot; then this process
  opens long polls (`wait=60`, each on its own connection, raw sockets, asked again if answered 423) in
  batches until lockd's /status counts each count of waiters. RSS (/proc/PID/status VmRSS) is read at rest
  (slot taken, after a warm-up of WARMUP waiters that came and went, so one-time costs such as the first
  long poll's code paths are not counted per waiter) and with each count; per waiter is
  (RSS_N - RSS_rest) / N, and the marginal cost between the two counts (RSS_N2 - RSS_N1) / (N2 - N1).
- Where it goes (`--traced`): the same, with lockd's app run in a driver process under `tracemalloc`
  (`serve-traced`, built by `lockd.daemon.make_app` and served by lockd's own runner, plus one bench-only
  route that takes snapshots); the snapshot with the largest count is compared with the one at rest, and
  the top allocation sites are listed in bytes and blocks per waiter. tracemalloc sees Python's allocator
  only: not the kernel's socket buffers (not in RSS either), nor malloc's and pymalloc's own slack.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from tests.processes import clean_env, free_port

ROOT = Path(__file__).resolve().parents[2]
COUNTS = (2000, 5000)
WARMUP = 100
BATCH = 250  # connections opened before waiting for lockd to queue them (its listen backlog is 128)
POLICY = "nodePolicies:\n- name: bench\n  holdTimeout: 1h\n  throttleConfig: {maxConcurrent: {value: 1}}\n"
TRACE_FRAMES = 8
SNAPSHOT_PATH = "/_bench/snapshot"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def _request(name: str, index: int) -> bytes:
    """The init client's long poll as `requests` sends it (its default headers), with a pod uid."""
    uid = f"00000000-0000-4000-8000-{index:012d}"
    return (
        f"GET /v1/lock?namespace=bench&name={name}&uid={uid}&wait=60 HTTP/1.1\r\n"
        "Host: 127.0.0.1:8477\r\nUser-Agent: python-requests/2.32.3\r\nAccept-Encoding: gzip, deflate\r\n"
        "Accept: */*\r\nConnection: keep-alive\r\n\r\n"
    ).encode()


async def _status_of_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
    )
    await reader.readexactly(length)
    return int(lines[0].split()[1])


class LongPolls:
    """Waiters as init clients are: each its own connection, one long poll at a time, asked again when
    answered 423 (a long poll that ran out); raw sockets, so this process stays small and fast."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.tasks: list[asyncio.Task[None]] = []
        self.answers: Counter[int] = Counter()

    async def _poll(self, name: str, index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            while True:
                writer.write(_request(name, index))
                try:
                    status = await _status_of_response(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.answers[0] += 1  # closed by lockd: counted as status 0
                    return
                self.answers[status] += 1
                if status != 423:
                    return
        finally:
            writer.close()

    def add(self, count: int, *, prefix: str) -> None:
        start = len(self.tasks)
        for i in range(start, start + count):
            self.tasks.append(asyncio.create_task(self._poll(f"{prefix}-{i:05d}", i)))

    async def stop(self) -> None:
        """Hang up every waiter (lockd cancels their handlers and drops them from the queue)."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


async def _waiting(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(f"{base}/status", params={"limit": "0"}) as response:
        return int((await response.json())["waiting"])


async def _until_waiting(session: aiohttp.ClientSession, base: str, count: int) -> None:
    """lockd has no event for 'n waiters queued' that a client could await: poll /status, bounded."""
    deadline = time.monotonic() + 60
    while await _waiting(session, base) != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"lockd did not count {count} waiters within 60s")
        await asyncio.sleep(0.05)


async def _grow(polls: LongPolls, session: aiohttp.ClientSession, base: str, count: int) -> None:
    while len(polls.tasks) < count:
        polls.add(min(BATCH, count - len(polls.tasks)), prefix="w")
        await _until_waiting(session, base, len(polls.tasks))


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


@contextlib.asynccontextmanager
async def _lockd(
    argv: Sequence[str], base: str, *, log: Path, tree: Path | None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A lockd (or the traced driver) as its own process, stopped however the benchmark ends; its stderr
    goes to `log` (a pipe nobody reads while it serves could fill and stall it). With `tree`, lockd and
    stagger are imported from that checkout, this one's tests from here."""
    env = clean_env(PYTHONPATH=f"{tree}:{ROOT}") if tree is not None else clean_env()
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=tree or ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=stderr
        )
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{base}/readyz") as response:
                        if response.status == 200:
                            break
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"lockd did not start: {_tail(log)}")
                await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _lockd_args(policies: Path, port: int, most: int) -> list[str]:
    return [
        "--standalone",
        "--policies",
        str(policies),
        "--listen",
        f"127.0.0.1:{port}",
        "--max-queue",
        str(most + 100),
        "--max-connections",
        str(most + 100),
        "--waiter-idle-timeout",
        "1h",
        "--log-level",
        "warning",
    ]


async def _snapshot(session: aiohttp.ClientSession, base: str, label: str, **extra: str) -> Any:
    async with session.post(f"{base}{SNAPSHOT_PATH}", params={"label": label, **extra}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def measure(
    *, counts: Sequence[int] = COUNTS, traced: bool = False, tree: Path | None = None
) -> dict[str, Any]:
    """RSS at rest and with each count of waiters; with `traced`, the driver's top allocation sites."""
    counts = sorted(counts)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        policies = Path(tmp) / "policies.yaml"
        policies.write_text(POLICY)
        command = (
            ["-m", "tests.benchmarks.waiter_memory_bench", "serve-traced"] if traced else ["-m", "lockd"]
        )
        argv = [sys.executable, *command, *_lockd_args(policies, port, counts[-1])]
        lockd = _lockd(argv, base, log=Path(tmp) / "lockd.log", tree=tree)
        async with lockd as proc, aiohttp.ClientSession() as session:
            async with session.get(f"{base}/v1/lock", params={"namespace": "bench", "name": "holder"}) as r:
                assert r.status == 200, r.status
            await asyncio.sleep(1.0)
            fresh = rss_kib(proc.pid)
            warm = LongPolls(port)
            warm.add(WARMUP, prefix="warm")
            await _until_waiting(session, base, WARMUP)
            await warm.stop()
            await _until_waiting(session, base, 0)
            await asyncio.sleep(1.0)
            if traced:
                await _snapshot(session, base, "rest")
            rest = rss_kib(proc.pid)
            polls = LongPolls(port)
            rss: dict[int, int] = {}
            sites: Any = None
            for count in counts:
                await _grow(polls, session, base, count)
                await asyncio.sleep(1.0)  # the queueing's own requests settle
                rss[count] = rss_kib(proc.pid)
                if traced and count == counts[-1]:
                    sites = await _snapshot(session, base, str(count), since="rest", per=str(count))
            answers = dict(polls.answers)
            await polls.stop()
    return _result(fresh=fresh, rest=rest, rss=rss, answers=answers, traced=traced, sites=sites)


def _result(
    *, fresh: int, rest: int, rss: dict[int, int], answers: dict[int, int], traced: bool, sites: Any
) -> dict[str, Any]:
    counts = sorted(rss)
    result: dict[str, Any] = {
        "lockd": "traced driver (tracemalloc on: RSS is not lockd's)" if traced else "python -m lockd",
        "rss at rest, fresh (slot taken) KiB": fresh,
        f"rss at rest, after {WARMUP} waiters came and went KiB": rest,
    }
    for count in counts:
        result[f"rss with {count} waiters KiB"] = rss[count]
        result[f"per waiter, {count} waiters (RSS_N - RSS_rest) / N KiB"] = round(
            (rss[count] - rest) / count, 2
        )
    if len(counts) > 1:
        low, high = counts[0], counts[-1]
        result[f"marginal per waiter, {low} -> {high} KiB"] = round((rss[high] - rss[low]) / (high - low), 2)
    result["answers while measuring (none expected)"] = answers
    if sites is not None:
        result["tracemalloc"] = sites
    return result


# --- the traced driver: lockd's app under tracemalloc, in its own process -------------------------------


def _diff(
    base: tracemalloc.Snapshot, now: tracemalloc.Snapshot, per: int, *, key: str, top: int
) -> list[str]:
    stats = now.compare_to(base, key)
    lines = []
    for stat in stats[:top]:
        frames = stat.traceback.format(limit=1 if key == "lineno" else 4, most_recent_first=True)
        where = " <- ".join(line.strip() for line in frames if not line.startswith("    "))
        lines.append(f"{stat.size_diff / per:8.1f} B {stat.count_diff / per:6.2f} blocks  {where}")
    return lines


def _traced_build(settings: Any) -> Any:
    from aiohttp import web

    from lockd import daemon

    app = daemon.make_app(settings)
    snapshots: dict[str, tracemalloc.Snapshot] = {}
    ignore = [
        tracemalloc.Filter(False, tracemalloc.__file__),
        tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    ]

    async def snapshot(request: web.Request) -> web.Response:
        """Takes a snapshot; with `since` and `per`, answers the difference from `since` per waiter."""
        now = tracemalloc.take_snapshot().filter_traces(ignore)
        snapshots[request.query["label"]] = now
        if "since" not in request.query:
            return web.json_response({"traced KiB": tracemalloc.get_traced_memory()[0] // 1024})
        base, per = snapshots[request.query["since"]], int(request.query["per"])
        total = sum(stat.size_diff for stat in now.compare_to(base, "filename"))
        return web.json_response(
            {
                "traced per waiter (bytes)": round(total / per),
                "by file": _diff(base, now, per, key="filename", top=20),
                "by line": _diff(base, now, per, key="lineno", top=40),
                "by traceback": _diff(base, now, per, key="traceback", top=12),
            }
        )

    app.router.add_post(SNAPSHOT_PATH, snapshot)  # the bench's own route, added before the app is frozen
    return app


def serve_traced(argv: Sequence[str]) -> int:
    """`serve-traced LOCKD-ARGS`: lockd as `python -m lockd` runs it, under tracemalloc."""
    tracemalloc.start(TRACE_FRAMES)
    import lockd.__main__ as lockd_main
    from lockd.settings import parse_settings
    from stagger import kube, startup

    return startup.run(
        "lockd (traced)",
        argv=list(argv),
        parse=parse_settings,
        build=_traced_build,
        refusals=[(kube.ConfigError, "")],
        serve=lockd_main.serve,
    )


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["serve-traced"]:
        return serve_traced(given[1:])
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.waiter_memory_bench", description=__doc__
    )
    parser.add_argument("--counts", type=int, nargs="+", default=list(COUNTS), help="waiter counts")
    parser.add_argument("--traced", action="store_true", help="also list the top allocation sites (slower)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--tree", type=Path, help="run lockd and stagger from this checkout (e.g. `git archive` of a commit)"
    )
    args = parser.parse_args(given)
    tree = args.tree.resolve() if args.tree else None
    results = {"rss": asyncio.run(measure(counts=args.counts, tree=tree))}
    if args.traced:
        results["traced"] = asyncio.run(measure(counts=args.counts[-1:], traced=True, tree=tree))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for name, rows in results.items():
        print(f"\n== {name} ==")
        for key, value in rows.items():
            if key == "tracemalloc":
                for part, lines in value.items():
                    print(f"  {part}:")
                    for line in lines if isinstance(lines, list) else [lines]:
                        print(f"    {line}")
            else:
                print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
