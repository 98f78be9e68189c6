"""The controller's option table: defaults, flags, `STAGGER_...` variables (flags win), the help naming
every variable, and each bad value as one error naming the flag or variable it came from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stagger.names import DEFAULT_PREFIX
from stagger.options import grouped
from webhook.settings import COMMAND, DEFAULT_MAX_BODY, OPTIONS, Settings, SettingsError, parse_settings

TLS = ["--tls-cert", "c.pem", "--tls-key", "k.pem"]
REQUIRED = ["--image", "stagger:1", *TLS]


def test_defaults() -> None:
    settings = parse_settings(REQUIRED, {})
    assert settings == grouped(
        Settings, dict(image="stagger:1", tls_cert=Path("c.pem"), tls_key=Path("k.pem"))
    )
    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 9443)
    assert (settings.server.probe_host, settings.server.probe_port) == ("0.0.0.0", 9090)
    assert settings.inject.lockd_port == 9400
    assert settings.policy.reload_interval == settings.server.shutdown_timeout == 5.0
    assert settings.server.header_timeout == 10.0
    assert settings.server.max_body == DEFAULT_MAX_BODY == 3 * 1024 * 1024
    assert settings.server.tls_read_buffer == 16 * 1024
    assert settings.prefix == DEFAULT_PREFIX
    assert settings.log_level == "info"
    assert settings.policy.policies is settings.serving.token_file is settings.cluster.kubeconfig is None
    assert settings.tls and not settings.serving.insecure_http


def test_every_flag() -> None:
    settings = parse_settings(
        [
            *REQUIRED,
            "--listen", "127.0.0.1:8443",
            "--probe-listen", "[::1]:9091",
            "--policies", "p.yaml",
            "--token-file", "token",
            "--lockd-port", "9500",
            "--kubeconfig", "kc",
            "--prefix", "example.com",
            "--reload-interval", "250ms",
            "--shutdown-timeout", "20s",
            "--header-timeout", "1m",
            "--max-body", "65536",
            "--tls-read-buffer", "65536",
            "--log-level", "DEBUG",
        ],
        {},
    )  # fmt: skip
    assert settings == grouped(
        Settings,
        dict(
            image="stagger:1",
            host="127.0.0.1",
            port=8443,
            tls_cert=Path("c.pem"),
            tls_key=Path("k.pem"),
            policies=Path("p.yaml"),
            token_file=Path("token"),
            lockd_port=9500,
            kubeconfig=Path("kc"),
            probe_host="::1",
            probe_port=9091,
            prefix="example.com",
            reload_interval=0.25,
            shutdown_timeout=20.0,
            header_timeout=60.0,
            max_body=65536,
            tls_read_buffer=65536,
            log_level="debug",
        ),
    )


def test_every_option_from_the_environment() -> None:
    env = {
        "STAGGER_IMAGE": "stagger:2",
        "STAGGER_LISTEN": "127.0.0.1:1",
        "STAGGER_TLS_CERT": "/tls/tls.crt",
        "STAGGER_TLS_KEY": "/tls/tls.key",
        "STAGGER_POLICIES": "/etc/stagger/policies.yaml",
        "STAGGER_TOKEN_FILE": "/token/token",
        "STAGGER_LOCKD_PORT": "9401",
        "KUBECONFIG": "/kc",
        "STAGGER_PROBE_LISTEN": "127.0.0.1:2",
        "STAGGER_PREFIX": "stagger.example.org",
        "STAGGER_RELOAD_INTERVAL": "1s",
        "STAGGER_SHUTDOWN_TIMEOUT": "2s",
        "STAGGER_HEADER_TIMEOUT": "3s",
        "STAGGER_MAX_BODY": "4096",
        "STAGGER_TLS_READ_BUFFER": "262144",
        "STAGGER_LOG_LEVEL": "warning",
    }
    settings = parse_settings([], env)
    assert settings == grouped(
        Settings,
        dict(
            image="stagger:2",
            host="127.0.0.1",
            port=1,
            tls_cert=Path("/tls/tls.crt"),
            tls_key=Path("/tls/tls.key"),
            policies=Path("/etc/stagger/policies.yaml"),
            token_file=Path("/token/token"),
            lockd_port=9401,
            kubeconfig=Path("/kc"),
            probe_host="127.0.0.1",
            probe_port=2,
            prefix="stagger.example.org",
            reload_interval=1.0,
            shutdown_timeout=2.0,
            header_timeout=3.0,
            max_body=4096,
            tls_read_buffer=262144,
            log_level="warning",
        ),
    )
    # STAGGER_KUBECONFIG wins over KUBECONFIG; flags win over both.
    assert parse_settings([], {**env, "STAGGER_KUBECONFIG": "/skc"}).cluster.kubeconfig == Path("/skc")
    assert parse_settings(["--image", "flag:1", "--lockd-port", "1"], env).inject.image == "flag:1"
    assert parse_settings(["--lockd-port", "1"], env).inject.lockd_port == 1


def test_insecure_http_needs_no_certificate_and_comes_from_the_environment() -> None:
    settings = parse_settings(["--image", "x"], {"STAGGER_INSECURE_HTTP": "true"})
    assert settings.serving.insecure_http and not settings.tls
    assert settings.serving.tls_cert is None
    assert parse_settings(["--image", "x", "--insecure-http"], {}).serving.insecure_http


def test_the_help_names_every_variable_and_what_is_required() -> None:
    text = COMMAND.parser().format_help()
    for option in OPTIONS:
        assert option.flag in text
        for env in option.envs:
            assert env in text
    assert "required unless --insecure-http" in " ".join(text.split())
    assert "required: the stagger image" in " ".join(text.split())


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(TLS, {}, "--image: required", id="no-image"),
        pytest.param(["--image", "x"], {}, "--tls-cert and --tls-key: required to serve TLS", id="no-tls"),
        pytest.param(["--image", "x", "--tls-cert", "c"], {}, "--tls-key: required", id="no-key"),
        pytest.param(
            [*REQUIRED, "--insecure-http"],
            {},
            "--insecure-http: cannot be combined with --tls-cert",
            id="both",
        ),
        pytest.param([*REQUIRED, "--listen", "9443"], {}, "--listen: expected HOST:PORT", id="listen"),
        pytest.param(
            [*REQUIRED, "--listen", "127.0.0.1:9000", "--probe-listen", "127.0.0.1:9000"],
            {},
            "--probe-listen: must differ from --listen",
            id="same-address",
        ),
        pytest.param(
            [*REQUIRED, "--lockd-port", "0"], {}, "--lockd-port: expected a whole number", id="port-0"
        ),
        pytest.param(
            [*REQUIRED, "--lockd-port", "70000"], {}, "--lockd-port: must be at most 65535", id="port"
        ),
        pytest.param(
            [*REQUIRED, "--reload-interval", "0s"], {}, "--reload-interval: must be greater", id="zero"
        ),
        pytest.param([*REQUIRED, "--shutdown-timeout", "soon"], {}, "--shutdown-timeout", id="duration"),
        pytest.param(
            [*REQUIRED, "--max-body", "10"], {}, "--max-body: expected a whole number of at least", id="body"
        ),
        pytest.param(
            [*REQUIRED, "--log-level", "loud"], {}, "--log-level: must be debug or info", id="level"
        ),
        pytest.param(
            [*REQUIRED, "--tls-read-buffer", "512"],
            {},
            "--tls-read-buffer: expected a whole number of at least 1024",
            id="tls-buffer-small",
        ),
        pytest.param(
            [*REQUIRED],
            {"STAGGER_TLS_READ_BUFFER": "2097152"},
            "STAGGER_TLS_READ_BUFFER: must be at most",
            id="tls-buffer-big",
        ),
        pytest.param([*REQUIRED, "--prefix", "-bad-"], {}, "--prefix", id="prefix"),
        pytest.param(
            REQUIRED, {"STAGGER_INSECURE_HTTP": "maybe"}, "STAGGER_INSECURE_HTTP: expected true", id="env"
        ),
        pytest.param(
            REQUIRED, {"STAGGER_MAX_BODY": "3MiB"}, "STAGGER_MAX_BODY: expected a whole", id="env-body"
        ),
        pytest.param(
            [*REQUIRED, "--no-such-flag"], {}, "unrecognized arguments: --no-such-flag", id="unknown"
        ),
    ],
)
def test_bad_values_name_their_flag_or_variable(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        parse_settings(argv, env)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        pytest.param("STAGGER_TOKN_FILE", "STAGGER_TOKN_FILE (did you mean STAGGER_TOKEN_FILE?)", id="typo"),
        pytest.param(
            "STAGGER_NOT_AN_OPTION", "unknown environment variable STAGGER_NOT_AN_OPTION", id="unknown"
        ),
    ],
)
def test_a_stagger_variable_no_option_reads_is_an_error(variable: str, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        parse_settings(REQUIRED, {variable: "x"})


@pytest.mark.parametrize(
    "variable",
    [
        pytest.param("STAGGER_CONTROLLER_SERVICE_HOST", id="service-host"),
        pytest.param("STAGGER_CONTROLLER_SERVICE_PORT_HTTPS", id="named-service-port"),
        pytest.param("STAGGER_CONTROLLER_PORT", id="port"),
        pytest.param("STAGGER_CONTROLLER_PORT_443_TCP_ADDR", id="port-addr"),
        pytest.param("OTHER_THING", id="not-ours"),
    ],
)
def test_service_link_variables_kubernetes_sets_are_not_typos(variable: str) -> None:
    """A Service named like the release (`stagger-controller`) gives every container of its namespace
    these (enableServiceLinks); they must not stop the process."""
    assert parse_settings(REQUIRED, {variable: "tcp://10.0.0.1:443"}).inject.image == "stagger:1"
