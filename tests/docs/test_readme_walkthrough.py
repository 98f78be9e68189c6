"""README's "Try lockd with curl": the commands as written, pasted into a shell against `make run`'s lockd
(its flags read from the Makefile), work, twice in a row, and leave lockd as they found it: no slot held,
nobody queued. A newcomer pastes them more than once."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import free_port, get, running_lockd
from tests.tools import ROOT

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the walkthrough is curl commands")

ADDRESS = "127.0.0.1:8080"


def walkthrough() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Try lockd with curl", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README: no sh block under 'Try lockd with curl'"
    return block.group(1)


def run_args() -> list[str]:
    """`make run`'s lockd flags, as the Makefile has them."""
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^RUN_ARGS \?= (.*)$", makefile, re.MULTILINE)
    assert found is not None, "Makefile: no RUN_ARGS"
    return found.group(1).split()


@pytest.fixture
def lockd(tmp_path: Path) -> Iterator[str]:
    # Load pinned at 0: on a busy test machine the built-in policy's CPU limit would answer 423 to step 1,
    # which the README says can happen; this test is about the commands.
    load = tmp_path / "load.json"
    load.write_text(json.dumps({"cpuPercent": 0, "ioPercent": 0}))
    port = free_port()
    with running_lockd(*run_args(), "--load-file", str(load), port=port):
        yield f"127.0.0.1:{port}"


def test_the_walkthrough_runs_twice_and_leaves_lockd_as_it_found_it(lockd: str, tmp_path: Path) -> None:
    script = walkthrough().replace(ADDRESS, lockd).replace("/tmp/", f"{tmp_path}/")
    for attempt in (1, 2):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 0, (attempt, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (attempt, done.stderr)
        # Step 1's 200, step 2's 423, step 3's 200 for web-2 once web-1 released.
        assert done.stdout.count('"granted": true') >= 2, (attempt, done.stdout)
        assert "HTTP/1.1 423" in done.stdout, (attempt, done.stdout)
        # No release was refused (403: a missing or wrong token).
        assert '"error"' not in done.stdout, (attempt, done.stdout)
        status, body = get(f"http://{lockd}/status")
        assert status == 200
        state = json.loads(body)
        assert state["slots"] == [] and state["queue"] == [], (attempt, state)
    assert not list(tmp_path.glob("web-*.json")), "the walkthrough removes its files"
