"""The unreachable bound (`--unreachable-wait`, STAGGER_UNREACHABLE_WAIT), on the real `python -m initclient`
and a real `python -m lockd`: aimed at a port where nothing listens, with max-wait 10 minutes, the init
client lets its pod start within the bound; a lockd that crash-loops (exits at start with a bad policy
file, as a bad upgrade does, restarted like a kubelet restarts it) costs no more; a lockd that comes up
10 s after the client started (a booting node) still grants it a slot. And the pure core: the bound
counts from lockd's last queue answer, covers no connection, 5xx and 503, and cuts requests and sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from initclient.client import (
    Failure,
    Finish,
    Reply,
    Sleep,
    deadline_of,
    decide,
    plan_request,
    start,
)
from initclient.settings import Settings
from tests.initclient.process import REPO, environment, run
from tests.processes import clean_env, free_port

pytestmark = pytest.mark.slow

SETTINGS = Settings(lockd_url="http://lockd:9400", namespace="ns", name="pod", max_wait=600.0)
REFUSED = Failure("Connection refused")
QUEUED = Reply(status=423, body={"granted": False, "reason": "busy", "position": 1}, retry_after=1.0)


# --- the pure core ---------------------------------------------------------------------------------


def test_no_connection_all_along_fails_open_at_the_bound_not_at_max_wait() -> None:
    state = start(settings=SETTINGS, now=0.0)
    decision = decide(settings=SETTINGS, state=state, outcome=REFUSED, now=59.5, jitter=0.5)
    assert isinstance(decision.action, Sleep) and decision.action.seconds == pytest.approx(0.5)
    [line] = decision.lines
    assert "for up to 1m (unreachable-wait)" in line.text
    gave_up = decide(settings=SETTINGS, state=decision.state, outcome=REFUSED, now=60.0, jitter=0.5)
    [line] = gave_up.lines
    assert gave_up.action == Finish(exit_code=0, granted=False, cause="lockdUnreachable", reason=line.text)
    assert line.level == "warning"
    assert line.text == (
        "proceeding without a start-up slot for ns/pod: lockd at http://lockd:9400 could not be reached "
        "all along: Connection refused (1m, unreachable-wait 1m) (fail-open)"
    )


@pytest.mark.parametrize(
    "trouble",
    [
        pytest.param(REFUSED, id="no connection"),
        pytest.param(Reply(status=500, body={"error": "boom"}), id="5xx"),
        pytest.param(Reply(status=503, body={"reason": "listing pods"}, retry_after=1.0), id="not ready"),
    ],
)
def test_the_bound_counts_from_lockds_last_queue_answer(trouble: Reply | Failure) -> None:
    state = start(settings=SETTINGS, now=0.0)
    queued = decide(settings=SETTINGS, state=state, outcome=QUEUED, now=50.0, jitter=0.5).state
    # In lockd's queue only max-wait bounds the wait.
    assert deadline_of(settings=SETTINGS, state=queued) == 600.0
    troubled = decide(settings=SETTINGS, state=queued, outcome=trouble, now=100.0, jitter=0.5)
    assert deadline_of(settings=SETTINGS, state=troubled.state) == 110.0  # 50 + 60
    request = plan_request(settings=SETTINGS, state=troubled.state, now=105.0)
    assert request is not None and request.timeout <= 5.0  # cut to the bound
    assert plan_request(settings=SETTINGS, state=troubled.state, now=110.0) is None
    gave_up = decide(settings=SETTINGS, state=troubled.state, outcome=trouble, now=110.0, jitter=0.5)
    assert isinstance(gave_up.action, Finish) and not gave_up.action.granted
    assert (
        "since it last answered" in gave_up.lines[-1].text and "unreachable-wait 1m" in gave_up.lines[-1].text
    )


def test_max_wait_still_wins_when_it_is_shorter() -> None:
    short = replace(SETTINGS, max_wait=20.0)
    state = start(settings=short, now=0.0)
    assert deadline_of(settings=short, state=state) == 20.0
    gave_up = decide(settings=short, state=state, outcome=REFUSED, now=20.0, jitter=0.5)
    assert "(max-wait 20s)" in gave_up.lines[-1].text


# --- the real processes ------------------------------------------------------------------------------


async def test_nothing_listening_fails_open_within_the_bound_not_max_wait(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = await run(environment(url, STAGGER_MAX_WAIT="10m", STAGGER_UNREACHABLE_WAIT="2s"))
    assert result.code == 0
    assert result.elapsed < 10.0, result  # the bound (2 s) and the process start, far from 10 minutes
    assert result.lines[-1].startswith("stagger: warning: proceeding without a start-up slot for ns/pod: ")
    assert "could not be reached all along" in result.lines[-1] and "unreachable-wait 2s" in result.lines[-1]


@contextlib.asynccontextmanager
async def crash_looping_lockd(port: int, bad_policy: Path) -> AsyncIterator[list[int]]:
    """A real lockd on `port` that exits at start (its policy file is bad), started again each time it
    exits, like a kubelet restarting a crash-looping container; yields the exit codes seen."""
    codes: list[int] = []

    async def loop() -> None:
        while True:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}",
                "--policies", str(bad_policy), env=clean_env(PYTHONPATH=str(REPO)), cwd=REPO,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            codes.append(await process.wait())

    task = asyncio.create_task(loop())
    try:
        yield codes
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_crash_looping_lockd_costs_no_more_than_the_bound(tmp_path: Path) -> None:
    bad = tmp_path / "policies.yaml"
    bad.write_text("nodePolicies: [{name: default, throttleConfig: {maxConcurrent: {value: -1}}}]\n")
    port = free_port()
    async with crash_looping_lockd(port, bad) as codes:
        result = await run(
            environment(f"http://127.0.0.1:{port}", STAGGER_MAX_WAIT="10m", STAGGER_UNREACHABLE_WAIT="3s")
        )
    assert codes and set(codes) == {2}, codes  # it did crash, again and again, each time on the policy
    assert result.code == 0 and result.elapsed < 10.0, result
    assert "unreachable-wait 3s" in result.lines[-1], result.lines


async def test_a_lockd_that_comes_up_10s_later_still_grants_the_slot() -> None:
    """A booting node: the init client starts before lockd listens; with the default bound (1m) it keeps
    asking, and the real lockd that appears 10 s later grants it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = asyncio.get_running_loop().time()
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "initclient", env=environment(url, STAGGER_MAX_WAIT="10m"), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    await asyncio.sleep(10.0)  # the delay is what is tested: lockd is not there for these 10 s
    lockd = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockd", "--standalone", "--listen", f"127.0.0.1:{port}",
        env=clean_env(PYTHONPATH=str(REPO)), cwd=REPO,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _, stderr = await asyncio.wait_for(client.communicate(), timeout=40.0)
    finally:
        for process in (client, lockd):
            if process.returncode is None:
                process.kill()
            await asyncio.wait_for(process.wait(), timeout=10)
    lines = stderr.decode().splitlines()
    assert client.returncode == 0
    assert "unreachable (Connection refused); retrying with backoff" in lines[0], lines
    assert "for up to 1m (unreachable-wait)" in lines[0], lines
    assert lines[-1].startswith("stagger: granted start-up slot for ns/pod after "), lines
    assert asyncio.get_running_loop().time() - started >= 10.0
