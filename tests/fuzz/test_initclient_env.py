"""Fuzzing the init client's environment (hypothesis): random values of its variables (`STAGGER_LOCKD_URL`,
`POD_NAMESPACE`, `POD_NAME`, `POD_UID`, `STAGGER_MAX_WAIT`, `STAGGER_POLL_WAIT`, `STAGGER_MAX_BACKOFF`,
`STAGGER_REQUEST_TIMEOUT`, `STAGGER_RELEASE_TOKEN_FILE`): durations of every spelling and size, URLs,
`$(VAR)` that Kubernetes did not expand, and bytes that are not UTF-8. Then the real `python -m initclient`
for a few bad environments.

What must hold (docs/design.md, "The init client"): the settings parse, or a `ConfigError` names every bad
variable, never another exception; settings that parse can be used (the first request to lockd is built,
every wait fits the timers); and the process on a bad environment fails open at once, exit 0, with one
error line naming the variable and no traceback: an init container must never wedge its pod.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from initclient import client, http
from initclient.settings import MAX_DURATION, MAX_POLL_WAIT, ConfigError, Settings, parse_settings
from tests.initclient.process import REPO, spawn

logger = logging.getLogger(__name__)

RUN_LIMIT = 10.0  # seconds; a bad configuration fails open at once

GOOD = {
    "STAGGER_LOCKD_URL": "http://127.0.0.1:9400",
    "POD_NAMESPACE": "ns",
    "POD_NAME": "pod",
    "POD_UID": "0f7c-4e1d",
    "STAGGER_MAX_WAIT": "10m",
    "STAGGER_POLL_WAIT": "30",
    "STAGGER_MAX_BACKOFF": "10s",
    "STAGGER_REQUEST_TIMEOUT": "10s",
    "STAGGER_RELEASE_TOKEN_FILE": "/stagger/token",
}
VARIABLES = sorted(GOOD)

FUZZ_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Environment bytes that are not UTF-8 reach Python as lone surrogates (os.fsdecode does the same).
not_utf8 = st.binary(min_size=1, max_size=12).map(os.fsdecode)
durations = st.one_of(
    st.sampled_from(
        [
            "0",
            "0s",
            "-1",
            "-1s",
            "1e3",
            "inf",
            "nan",
            "1_0",
            "٣s",
            "10 minutes",
            "1h-30m",
            "9" * 400,
            "9" * 30 + "h",
            "99999999999999999999h",
            "8760h",
            "8760h1ns",
            ".5",
            "5.",
            "500ms",
            "1h30m",
            "61",
            "60",
            "1ns",
            "$(MAX_WAIT)",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers().map(str),
    st.builds(
        lambda n, unit: f"{n}{unit}",
        st.integers(min_value=0),
        st.sampled_from(["h", "m", "s", "ms", "us", "ns", "d", ""]),
    ),
)
urls = st.one_of(
    st.sampled_from(
        [
            "http://10.0.0.5:9400",
            "https://lockd.local:9443/",
            "http://[fd00::5]:9400",
            "http://[::1:9400",
            "http://$(HOST_IP):9400",
            "http://${HOST_IP}:9400",
            "http://lockd host:9400",
            "http://10.0.0.300:9400",
            "http://h:99999",
            "http://h:-1",
            "http://h/?a=1",
            "http://h/#x",
            "ftp://h",
            "lockd:9400",
            "http://",
            "http://:9400",
            "http://user:pass@h:1",
            "http://h:1/ä",
            "http://ä:1",
            "http://" + "a" * 300 + ":1",
        ]
    ),
    st.builds(lambda host, port: f"http://{host}:{port}", st.text(max_size=12), st.integers()),
)
values = st.one_of(
    durations,
    urls,
    not_utf8,
    st.text(max_size=30),
    st.sampled_from(["", " ", "\t", "$(POD_NAME)", "a" * 5000]),
)


def bad_alone(variable: str, value: str) -> bool:
    try:
        parse_settings([], {**GOOD, variable: value})
    except ConfigError:
        return True
    return False


def check_usable(parsed: Settings) -> None:
    """What the client does with its settings before its first answer: the timer, the first request."""
    for seconds in (parsed.max_wait, parsed.poll_wait, parsed.max_backoff, parsed.request_timeout):
        assert math.isfinite(seconds) and 0 <= seconds <= MAX_DURATION
    assert parsed.poll_wait <= MAX_POLL_WAIT and parsed.max_backoff > 0 and parsed.request_timeout > 0
    assert parsed.lockd_url.startswith(("http://", "https://")) and not parsed.lockd_url.endswith("/")
    state = client.start(settings=parsed, now=0.0)
    request = client.plan_request(settings=parsed, state=state, now=0.0)
    if request is None:
        assert parsed.max_wait == 0
        return
    # The request's bytes as fetch_lock has them built (no connection is made).
    http.build_request(
        method="GET",
        target=http.target_of(parsed.lockd_url),
        path="/v1/lock",
        query=dict(request.params),
        headers={},
    )


# --- one variable at a time --------------------------------------------------------------------------

ONE_EXAMPLES = 300


@settings(FUZZ_SETTINGS, max_examples=ONE_EXAMPLES)
@given(variable=st.sampled_from(VARIABLES), value=values)
# A max-wait past what the timers hold (setitimer: OverflowError) was a traceback, not a fail-open.
@example(variable="STAGGER_MAX_WAIT", value="99999999999999999999h")
# A POD_NAME that is not UTF-8 made the client raise UnicodeEncodeError building the URL.
@example(variable="POD_NAME", value=os.fsdecode(b"p\xff"))
def test_a_variable_parses_to_usable_settings_or_is_named_in_a_config_error(
    variable: str, value: str
) -> None:
    try:
        parsed = parse_settings([], {**GOOD, variable: value})
    except ConfigError as error:
        assert str(error).startswith((f"{variable}: ", f"{variable} (or ")), (
            f"{error} does not name {variable}"
        )
        assert "Traceback" not in str(error)
    else:
        check_usable(parsed)


# --- many at once ------------------------------------------------------------------------------------

MANY_EXAMPLES = 150


@settings(FUZZ_SETTINGS, max_examples=MANY_EXAMPLES)
@given(env=st.dictionaries(st.sampled_from(VARIABLES), values, max_size=len(VARIABLES)))
def test_every_bad_variable_is_named_at_once(env: dict[str, str]) -> None:
    whole = {**GOOD, **env}
    bad = [name for name, value in env.items() if bad_alone(name, value)]
    try:
        parsed = parse_settings([], whole)
    except ConfigError as error:
        assert bad, f"{error} though every variable is good alone"
        for name in bad:
            assert f"{name}: " in str(error) or f"{name} (or " in str(error), f"{error} does not name {name}"
    else:
        assert not bad
        check_usable(parsed)


# --- the process -------------------------------------------------------------------------------------


def _environment(**extra: bytes) -> dict[bytes, bytes]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("STAGGER_", "POD_", "KUBECONFIG"))}
    env = {os.fsencode(k): os.fsencode(v) for k, v in kept.items()}
    env[b"PYTHONPATH"] = os.fsencode(REPO)
    # Port 1 on loopback: nothing listens; a bad configuration must not get as far as asking.
    env.update({b"STAGGER_LOCKD_URL": b"http://127.0.0.1:1", b"POD_NAMESPACE": b"ns", b"POD_NAME": b"pod"})
    env.update({key.encode(): value for key, value in extra.items()})
    return env


@pytest.mark.parametrize(
    ("env", "named"),
    [
        pytest.param(
            _environment(STAGGER_MAX_WAIT=b"99999999999999999999h"),
            "STAGGER_MAX_WAIT: must be at most 8760h",
            id="max-wait-past-the-timers",
        ),
        pytest.param(_environment(POD_NAME=b"pod-\xff"), "POD_NAME: not valid UTF-8", id="pod-name-not-utf8"),
        pytest.param(
            _environment(STAGGER_LOCKD_URL=b"http://\xc3\x28:9400"),
            "STAGGER_LOCKD_URL: not valid UTF-8",
            id="url-not-utf8",
        ),
        pytest.param(
            _environment(STAGGER_POLL_WAIT=b"-5", STAGGER_REQUEST_TIMEOUT=b"nan"),
            "STAGGER_POLL_WAIT: not a duration",
            id="negative-poll-and-nan-timeout",
        ),
        pytest.param(
            _environment(STAGGER_MAX_BACKOFF=b"$(BACKOFF)"),
            "STAGGER_MAX_BACKOFF: $(BACKOFF) was not expanded",
            id="unexpanded",
        ),
    ],
)
async def test_the_process_fails_open_at_once_on_a_bad_environment(
    env: dict[bytes, bytes], named: str
) -> None:
    process = await spawn(env=env)
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=RUN_LIMIT)
    lines = stderr.decode(errors="backslashreplace").splitlines()
    assert process.returncode == 0, lines  # fail-open: the pod starts
    [line] = lines
    assert line.startswith("stagger: error: invalid configuration (") and named in line, line
    assert line.endswith("; proceeding without a start-up slot (fail-open)")
