"""Processes a benchmark starts and watches (tests/benchmarks/scale_bench.py): one started and awaited until it
prints that it serves, then stopped whatever happens; its RSS and CPU through psutil; where it spends its
time through py-spy (`pip install py-spy`, in the test extra), summarized from py-spy's raw stacks. And
`run`, the benchmarks' `asyncio.run` that a SIGTERM stops as cleanly as Ctrl-C."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import psutil

from tests.processes import clean_env

__all__ = ["Probe", "Profiles", "run", "serving", "stopped"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with SIGTERM cancelling `main` as Ctrl-C does, so that its `async with` blocks stop
    the control plane, lockd and the other processes they started (Python's default for SIGTERM is to die at
    once: a killed benchmark left them all running). Raises KeyboardInterrupt when so stopped."""

    async def until_signal() -> T:
        task = asyncio.ensure_future(main)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await task
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    return asyncio.run(until_signal())


class Probe:
    """psutil on a process: its highest RSS sampled, and its CPU seconds at each mark."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self.cpu = psutil.Process(pid), 0, [0.0]

    def sample(self) -> int:
        """The RSS now (0 once the process is gone)."""
        rss = 0
        with contextlib.suppress(psutil.Error):
            rss = self.process.memory_info().rss
        self.peak = max(self.peak, rss)
        return rss

    def mark(self) -> None:
        times = self.process.cpu_times()
        self.cpu.append(times.user + times.system)

    def busy(self, seconds: float) -> float:
        """Share of one core between the last two marks (%)."""
        return round((self.cpu[-1] - self.cpu[-2]) / seconds * 100, 1)


@contextlib.asynccontextmanager
async def serving(
    command: list[str], banner: re.Pattern[str]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, re.Match[str], collections.Counter[str]]]:
    """A process whose output (stdout and stderr) shows `banner` within a minute; yields it, the match, and
    its later log lines counted by message (numbers as N). Stopped on the way out, whatever happened."""
    proc = await asyncio.create_subprocess_exec(
        *command, env=clean_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    stream = proc.stdout
    lines: collections.Counter[str] = collections.Counter()
    try:
        seen: list[str] = []
        async with asyncio.timeout(60):
            while not (match := banner.search(line := (await stream.readline()).decode(errors="replace"))):
                seen.append(line)
                if not line:
                    raise RuntimeError(f"{' '.join(command[1:4])} exited: {''.join(seen[-20:])}")

        async def drain() -> None:
            while line := (await stream.readline()).decode(errors="replace"):
                message = line.split(": ", 1)[-1].strip()  # without the time and the logger
                lines[re.sub(r"\d+(\.\d+)?", "N", message)[:160]] += 1

        drainer = asyncio.create_task(drain())
        try:
            yield proc, match, lines
        finally:
            drainer.cancel()
    finally:
        await stopped(proc, signal.SIGTERM)


async def stopped(proc: asyncio.subprocess.Process, signum: int) -> None:
    """Sends `signum` to a process still running and waits for it (15 s, then SIGKILL)."""
    if proc.returncode is None:
        proc.send_signal(signum)
    try:
        async with asyncio.timeout(15):
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()


class Profiles:
    """py-spy on the controller, the emulator and this process (`--profile DIR`), one phase at a time."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.running: list[asyncio.subprocess.Process] = []
        self.files: dict[str, Path] = {}

    async def start(self, phase: str, pids: dict[str, int]) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        spy = str(Path(sys.executable).parent / "py-spy")
        for who, pid in pids.items():
            path = self.files[f"{phase}: {who}"] = self.folder / f"{phase}-{who}.txt"
            command = [spy, "record", "--pid", str(pid), "--rate", "50", "--nonblocking", "--format", "raw", "--output", str(path)]  # fmt: skip
            self.running.append(
                await asyncio.create_subprocess_exec(
                    *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
                )
            )

    async def stop(self) -> None:
        running, self.running = self.running, []
        for proc in running:
            await stopped(proc, signal.SIGINT)  # py-spy writes its file and ends

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per profile: its busy samples (the event loop's select left out), the functions most often on top
        of the stack (self) and the project's functions most often anywhere in it (inclusive, under 90%)."""
        found: dict[str, dict[str, Any]] = {}
        for label, path in self.files.items():
            own: collections.Counter[str] = collections.Counter()
            anywhere: collections.Counter[str] = collections.Counter()
            for line in path.read_text().splitlines() if path.exists() else ():
                stack, _, count = line.rpartition(" ")
                frames = [_frame(frame) for frame in stack.split(";")]
                if not frames[-1][0].startswith(("EpollSelector.select", "select (")):
                    own[frames[-1][0]] += int(count)
                    anywhere.update(dict.fromkeys({name for name, ours in frames if ours}, int(count)))
            total = sum(own.values()) or 1

            def shares(counter: collections.Counter[str], n: int, total: int = total) -> list[str]:
                kept = [(f, c) for f, c in counter.most_common() if c < 0.9 * total][:n]
                return [f"{c / total * 100:.1f}% {f}" for f, c in kept]

            found[label] = {"busy samples": total, "self": shares(own, 8), "inclusive": shares(anywhere, 12)}
        return found


def _frame(frame: str) -> tuple[str, bool]:
    """py-spy's `function (path:line)` as `function (folder/file.py)`, and whether it is the project's."""
    match = re.match(r"(.*) \((.*?)(:\d+)?\)$", frame)
    if match is None:
        return frame, False
    path = match[2]
    ours = bool(re.search(r"(^|/)(stagger|webhook|sim|lockd|tests)/", path)) and "packages/" not in path
    return f"{match[1]} ({'/'.join(path.split('/')[-2:])})", ours
