"""A benchmark stopped with SIGTERM (`tests.benchmarks.running.run`) unwinds its `async with` blocks, so the
processes they started are stopped, as with Ctrl-C; without it Python dies at once and leaves them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.processes import clean_env

SCRIPT = """
import asyncio, contextlib, sys
from pathlib import Path
from tests.benchmarks.running import run

marks = Path(sys.argv[1])

@contextlib.asynccontextmanager
async def started_process():
    marks.write_text("started\\n")
    print("started", flush=True)
    try:
        yield
    finally:
        marks.write_text(marks.read_text() + "stopped\\n")

async def bench():
    async with started_process():
        await asyncio.sleep(60)

run(bench())
"""


def test_sigterm_unwinds_the_benchmark(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marks)],
        env=clean_env(),
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "started\n"  # (the interpreter's start is the wait's bound)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert marks.read_text() == "started\nstopped\n"
