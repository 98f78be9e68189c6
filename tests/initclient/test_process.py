"""`python -m initclient` as a real subprocess against a small aiohttp server playing lockd:
granted after some 423s, giving up after max-wait (locked, nothing listening, no answer), failing open
at once on 400/403 and on bad config, one line per change of state, prompt exit on SIGTERM, proxy variables
ignored, and no HTTP library loaded (the client speaks HTTP itself, initclient/http.py)."""

from __future__ import annotations

import asyncio
import re
import signal
import sys

import pytest

from tests.initclient.process import (
    BUSY,
    GRANTED,
    HANG,
    REPO,
    RUN_LIMIT,
    Answer,
    FakeLockd,
    Run,
    environment,
    finish,
    locked,
    run,
    spawn,
)

GRANTED_LINE = re.compile(r"stagger: granted start-up slot for ns/pod after \d+\.\ds")


async def test_granted_after_a_few_423s(lockd: FakeLockd, closed_url: str) -> None:
    lockd.script = [locked(position=3), locked(position=2), locked(position=1), GRANTED]
    # The flag must win over the env var, which points nowhere.
    result = await run(environment(closed_url, POD_UID="u-1"), "--lockd-url", lockd.url)
    assert result.code == 0
    assert result.lines[0] == f"stagger: waiting for a start-up slot for ns/pod: {BUSY} (queue position 3)"
    assert GRANTED_LINE.fullmatch(result.lines[1])
    assert len(result.lines) == 2
    assert lockd.queries == [{"namespace": "ns", "name": "pod", "uid": "u-1", "wait": "30"}] * 4


async def test_one_line_per_change_of_state(lockd: FakeLockd) -> None:
    cpu = "cpu load 93% over 80% (cpu)"
    lockd.script = [
        Answer(500, {"error": "boom"}),
        Answer(500, {"error": "boom again"}),
        *[locked(position=p) for p in (5, 4, 3)],
        *[locked(cpu, position=p) for p in (2, 1)],
        GRANTED,
    ]
    result = await run(environment(lockd.url))
    assert result.code == 0
    assert len(result.lines) == 4
    assert result.lines[0] == (
        f"stagger: lockd at {lockd.url} is failing (HTTP 500: boom); "
        "retrying with backoff (at most 10.0s) for up to 1m (unreachable-wait)"
    )
    assert re.fullmatch(
        rf"stagger: lockd reachable again after \d+\.\ds; "
        rf"waiting for a start-up slot for ns/pod: {re.escape(BUSY)} \(queue position 5\)",
        result.lines[1],
    )
    assert (
        result.lines[2] == f"stagger: still waiting for a start-up slot for ns/pod: {cpu} (queue position 2)"
    )
    assert GRANTED_LINE.fullmatch(result.lines[3])
    assert len(lockd.queries) == 8


def assert_gave_up(result: Run, *, max_wait: float, says: str) -> None:
    assert result.code == 0
    warnings = [line for line in result.lines if line.startswith("stagger: warning: ")]
    assert len(warnings) == 1
    assert warnings[0].startswith("stagger: warning: proceeding without a start-up slot for ns/pod: waited ")
    assert says in warnings[0]
    assert warnings[0].endswith("(fail-open)")
    assert max_wait <= result.elapsed < max_wait + 4.0


async def test_always_locked_gives_up_after_max_wait(lockd: FakeLockd) -> None:
    lockd.script = [locked()]
    result = await run(environment(lockd.url, STAGGER_MAX_WAIT="2s"))
    assert_gave_up(result, max_wait=2.0, says=f"without getting a slot; lockd's last answer: {BUSY}")
    assert result.lines[0] == f"stagger: waiting for a start-up slot for ns/pod: {BUSY} (queue position 1)"
    assert len(result.lines) == 2


async def test_nothing_listening_gives_up_after_max_wait(closed_url: str) -> None:
    result = await run(environment(closed_url, STAGGER_MAX_WAIT="2"))
    assert_gave_up(result, max_wait=2.0, says="could not be reached all along: Connection refused")
    assert result.lines[0].startswith(f"stagger: lockd at {closed_url} unreachable (Connection refused); ")
    assert len(result.lines) == 2


async def test_lockd_that_never_answers_cannot_hold_past_max_wait(lockd: FakeLockd) -> None:
    lockd.script = [HANG]
    result = await run(environment(lockd.url, STAGGER_MAX_WAIT="2s"))
    assert_gave_up(result, max_wait=2.0, says="could not be reached all along: no answer within 2.0s")
    # The long poll was shortened to end before max-wait (by at least the answer margin, 0.5 s).
    assert lockd.queries == [{"namespace": "ns", "name": "pod", "wait": "1"}]


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(400, "wait must be between 0 and 60", id="400 bad parameters"),
        pytest.param(403, "pod ns/pod is not on node n1", id="403 identity check failed"),
    ],
)
async def test_rejection_fails_open_at_once(lockd: FakeLockd, status: int, error: str) -> None:
    lockd.script = [Answer(status, {"error": error})]
    result = await run(environment(lockd.url))
    assert result.code == 0
    assert result.lines == [
        f"stagger: error: proceeding without a start-up slot for ns/pod: lockd rejected the request "
        f"(HTTP {status}: {error}); asking again will not fix this (fail-open)"
    ]
    assert result.elapsed < 5.0
    assert len(lockd.queries) == 1


@pytest.mark.parametrize(
    ("env", "named"),
    [
        pytest.param(environment(None), "STAGGER_LOCKD_URL (or --lockd-url) is required", id="nothing set"),
        pytest.param(
            environment("http://127.0.0.1:1", STAGGER_MAX_WAIT="ten minutes"),
            "STAGGER_MAX_WAIT: not a duration",
            id="bad duration",
        ),
    ],
)
async def test_bad_config_fails_open_with_one_error_line(env: dict[str, str], named: str) -> None:
    result = await run(env)
    assert result.code == 0
    [line] = result.lines
    assert line.startswith("stagger: error: invalid configuration (")
    assert named in line
    assert line.endswith("; proceeding without a start-up slot (fail-open)")


@pytest.mark.parametrize(
    ("url", "named"),
    [
        pytest.param(
            "http://$(HOST_IP):9400",
            "STAGGER_LOCKD_URL: $(HOST_IP) was not expanded: Kubernetes leaves $(VAR) as it is when VAR is "
            "not defined before it in the container's env (got 'http://$(HOST_IP):9400')",
            id="unexpanded $(HOST_IP)",
        ),
        pytest.param(
            "http://[fd00::5:9400", "STAGGER_LOCKD_URL: not a valid URL: Invalid IPv6 URL", id="unclosed IPv6"
        ),
        pytest.param(
            "http://lockd host:9400",
            "STAGGER_LOCKD_URL: 'lockd host' is not a host name or IP address",
            id="space in host",
        ),
    ],
)
async def test_a_lockd_url_that_cannot_work_is_a_config_error_at_once(url: str, named: str) -> None:
    # Not "lockd unreachable" after waiting max-wait: nothing is asked, one line, exit 0 (fail-open).
    result = await run(environment(url, STAGGER_MAX_WAIT="5s"))
    assert result.code == 0
    [line] = result.lines
    assert line.startswith("stagger: error: invalid configuration (")
    assert named in line
    assert line.endswith("; proceeding without a start-up slot (fail-open)")
    assert result.elapsed < 5.0


async def test_the_node_policy_max_wait_bounds_the_wait(lockd: FakeLockd) -> None:
    lockd.script = [
        Answer(423, {"granted": False, "reason": BUSY, "position": 1, "maxWait": 4}, "0"),
        Answer(423, {"granted": False, "reason": BUSY, "position": 1, "maxWait": 1.5}, "0"),
    ]
    result = await run(environment(lockd.url, STAGGER_MAX_WAIT="10s"))
    assert_gave_up(
        result, max_wait=1.5, says="(max-wait 1.5s from lockd's node policy) without getting a slot"
    )
    assert result.lines[:3] == [
        f"stagger: waiting for a start-up slot for ns/pod: {BUSY} (queue position 1)",
        "stagger: max-wait lowered from 10s to 4s by lockd's node policy (maxWait)",
        "stagger: max-wait lowered from 4s to 1.5s by lockd's node policy (maxWait)",
    ]
    assert len(result.lines) == 4


async def test_sigterm_during_a_long_poll_exits_promptly(lockd: FakeLockd) -> None:
    lockd.script = [HANG]
    started = asyncio.get_running_loop().time()
    process = await spawn(env=environment(lockd.url))
    await asyncio.wait_for(lockd.asked.wait(), timeout=RUN_LIMIT)
    await assert_stops_on_sigterm(process, started)


async def test_sigterm_during_a_sleep_exits_promptly(lockd: FakeLockd) -> None:
    lockd.script = [locked(retry_after="60")]
    started = asyncio.get_running_loop().time()
    process = await spawn(env=environment(lockd.url))
    assert process.stderr is not None
    # The client logs this line just before it sleeps for 30..60 s.
    waiting = await asyncio.wait_for(process.stderr.readline(), timeout=RUN_LIMIT)
    assert waiting.decode().startswith("stagger: waiting for a start-up slot for ns/pod: ")
    await assert_stops_on_sigterm(process, started)


async def assert_stops_on_sigterm(process: asyncio.subprocess.Process, started: float) -> None:
    process.send_signal(signal.SIGTERM)
    signalled = asyncio.get_running_loop().time()
    result = await finish(process, started)
    assert result.elapsed - (signalled - started) < 3.0
    assert result.code == 128 + signal.SIGTERM
    assert result.lines == ["stagger: stopped by SIGTERM while waiting for ns/pod"]


async def test_proxy_variables_meant_for_the_app_are_ignored(lockd: FakeLockd, closed_url: str) -> None:
    proxies = {name: closed_url for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY")}
    result = await run(environment(lockd.url, **proxies))
    assert result.code == 0 and GRANTED_LINE.fullmatch(result.lines[-1]), result
    assert len(lockd.queries) == 1


async def test_no_http_library_is_loaded() -> None:
    """The init client speaks HTTP itself (initclient.http): requests, urllib3 and http.client cost an init
    container most of its start-up CPU and memory (0.11 s and 30 MiB, against 0.05 s and 17 MiB)."""
    check = (
        "import sys, initclient.__main__; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'requests', 'urllib3', 'http', 'ssl', 'email'}))"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", check, env=environment(None), cwd=REPO, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=RUN_LIMIT)
    assert process.returncode == 0
    assert stdout.decode().strip() == "[]"


async def test_help_starts_fast() -> None:
    result = await run(environment(None), "--help")
    assert result.code == 0
    assert result.stdout.startswith("usage: python -m initclient")
    assert result.elapsed < 2.0  # generous; it measures about 0.2 s
