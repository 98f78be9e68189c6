"""Init client settings: env vars, flags winning over env, duration spellings, defaults, and a
ConfigError naming every bad or missing value (never an argparse exit)."""

from __future__ import annotations

import pytest

from initclient.settings import ConfigError, Settings, parse_settings

ENV = {"STAGGER_LOCKD_URL": "http://10.0.0.5:8080", "POD_NAMESPACE": "ns", "POD_NAME": "pod"}


def test_env_only_gives_the_defaults() -> None:
    assert parse_settings([], ENV) == Settings(
        lockd_url="http://10.0.0.5:8080",
        namespace="ns",
        name="pod",
        uid=None,
        max_wait=600.0,
        poll_wait=30.0,
        max_backoff=10.0,
        request_timeout=10.0,
    )


def test_every_setting_from_env() -> None:
    env = {
        **ENV,
        "STAGGER_LOCKD_URL": "https://lockd.local:9443/",
        "POD_UID": "1234-abcd",
        "STAGGER_MAX_WAIT": "1h30m",
        "STAGGER_POLL_WAIT": "45",
        "STAGGER_MAX_BACKOFF": "2.5s",
        "STAGGER_REQUEST_TIMEOUT": "500ms",
    }
    assert parse_settings([], env) == Settings(
        lockd_url="https://lockd.local:9443",
        namespace="ns",
        name="pod",
        uid="1234-abcd",
        max_wait=5400.0,
        poll_wait=45.0,
        max_backoff=2.5,
        request_timeout=0.5,
    )


def test_flags_win_over_env() -> None:
    env = {**ENV, "POD_UID": "env-uid", "STAGGER_MAX_WAIT": "10m", "STAGGER_POLL_WAIT": "30"}
    argv = [
        "--lockd-url=http://127.0.0.1:9999",
        "--namespace",
        "flag-ns",
        "--name",
        "flag-pod",
        "--uid",
        "flag-uid",
        "--max-wait",
        "90s",
        "--poll-wait",
        "5",
        "--max-backoff",
        "1m",
        "--request-timeout",
        "3",
    ]
    assert parse_settings(argv, env) == Settings(
        lockd_url="http://127.0.0.1:9999",
        namespace="flag-ns",
        name="flag-pod",
        uid="flag-uid",
        max_wait=90.0,
        poll_wait=5.0,
        max_backoff=60.0,
        request_timeout=3.0,
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("10m", 600.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours and minutes"),
        pytest.param("120", 120.0, id="bare seconds"),
        pytest.param("2.5", 2.5, id="bare fraction"),
        pytest.param(" 3m ", 180.0, id="surrounding spaces"),
        pytest.param("0", 0.0, id="zero: fail open at once"),
    ],
)
def test_max_wait_spellings(text: str, seconds: float) -> None:
    assert parse_settings([], {**ENV, "STAGGER_MAX_WAIT": text}).max_wait == seconds


def test_empty_values_count_as_not_given() -> None:
    settings = parse_settings(["--uid", ""], {**ENV, "POD_UID": "", "STAGGER_MAX_WAIT": "  "})
    assert settings.uid is None
    assert settings.max_wait == 600.0


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:9400",
        "http://[fd00::5]:9400",
        "https://lockd.stagger.svc.cluster.local.:9443",
        "http://node_1:9400",
        "http://lockd:9400/behind/a/proxy",
    ],
)
def test_good_lockd_urls_are_taken(url: str) -> None:
    assert parse_settings([], {**ENV, "STAGGER_LOCKD_URL": url}).lockd_url == url


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        pytest.param(
            [],
            {},
            ["STAGGER_LOCKD_URL (or --lockd-url)", "POD_NAMESPACE (or --namespace)", "POD_NAME"],
            id="empty",
        ),
        pytest.param([], {**ENV, "POD_NAME": " "}, ["POD_NAME (or --name) is required"], id="blank name"),
        pytest.param(
            [], {**ENV, "STAGGER_LOCKD_URL": "lockd:8080"}, ["STAGGER_LOCKD_URL: not an http"], id="no scheme"
        ),
        pytest.param(["--lockd-url", "ftp://x"], ENV, ["--lockd-url: not an http"], id="ftp"),
        pytest.param([], {**ENV, "STAGGER_LOCKD_URL": "http://"}, ["with a host"], id="no host"),
        pytest.param([], {**ENV, "STAGGER_LOCKD_URL": "http://h:99999"}, ["bad port"], id="bad port"),
        pytest.param([], {**ENV, "STAGGER_LOCKD_URL": "http://h/?a=1"}, ["query"], id="query"),
        pytest.param(
            [],
            {**ENV, "STAGGER_LOCKD_URL": "http://$(HOST_IP):9400"},
            ["STAGGER_LOCKD_URL: $(HOST_IP) was not expanded: Kubernetes leaves $(VAR) as it is"],
            id="unexpanded $(HOST_IP)",
        ),
        pytest.param(
            ["--lockd-url", "http://$(HOST_IP):$(LOCKD_PORT)"],
            ENV,
            ["--lockd-url: $(HOST_IP), $(LOCKD_PORT) were not expanded"],
            id="unexpanded in a flag",
        ),
        pytest.param(
            [], {**ENV, "STAGGER_LOCKD_URL": "http://[::1:9400"}, ["not a valid URL"], id="unclosed IPv6"
        ),
        pytest.param(
            [],
            {**ENV, "STAGGER_LOCKD_URL": "http://lockd host:9400"},
            ["'lockd host' is not a host name or IP address"],
            id="space in host",
        ),
        pytest.param(
            [], {**ENV, "STAGGER_LOCKD_URL": "http://10.0.0.300:9400"}, ["not a host name"], id="bad IPv4"
        ),
        pytest.param(
            [], {**ENV, "STAGGER_LOCKD_URL": "http://${HOST_IP}:9400"}, ["not a host name"], id="shell syntax"
        ),
        pytest.param(
            [], {**ENV, "STAGGER_MAX_WAIT": "10 minutes"}, ["STAGGER_MAX_WAIT: not a duration"], id="words"
        ),
        pytest.param(["--max-wait", "5x"], ENV, ["--max-wait: not a duration"], id="bad unit"),
        pytest.param(
            [],
            {**ENV, "STAGGER_POLL_WAIT": "61"},
            ["STAGGER_POLL_WAIT: must be between 0s and 1m"],
            id="long poll",
        ),
        pytest.param(
            [],
            {**ENV, "STAGGER_MAX_BACKOFF": "0"},
            ["STAGGER_MAX_BACKOFF: must be positive"],
            id="no backoff",
        ),
        pytest.param(
            ["--request-timeout", "0s"], ENV, ["--request-timeout: must be positive"], id="no request timeout"
        ),
        pytest.param(["--bogus"], ENV, ["unrecognized arguments: --bogus"], id="unknown flag"),
        pytest.param(["--name"], ENV, ["--name"], id="flag without value"),
        pytest.param(
            [],
            {
                "STAGGER_LOCKD_URL": "x",
                "POD_NAME": "p",
                "STAGGER_MAX_WAIT": "soon",
                "STAGGER_POLL_WAIT": "99",
            },
            ["STAGGER_LOCKD_URL:", "POD_NAMESPACE", "STAGGER_MAX_WAIT", "STAGGER_POLL_WAIT"],
            id="all problems at once",
        ),
    ],
)
def test_bad_config_raises_one_error_naming_each_problem(
    argv: list[str], env: dict[str, str], named: list[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(argv, env)
    for name in named:
        assert name in str(raised.value)
