"""Node policy keys for the throttles and checks taken from pod-pacemaker and pod-startup-lock: `incrementBy`
of `cpu` and `io` (percent, 0..100, default 0), `loadAvg` {maxLoad > 0 required, perCore, incrementBy >= 0},
and `dependencies`, each `{http: URL}` or `{tcp: HOST:PORT}` with a `timeout` (default 2s): what loads, with
its defaults, and every error's exact message."""

from __future__ import annotations

from typing import Any

import pytest

from stagger.policy import Dependency, LoadAvg, PolicyError, ThrottleConfig, parse_policy_file


def node(**fields: Any) -> dict[str, Any]:
    return {"nodePolicies": [{"name": "n", **fields}]}


def throttle(**fields: Any) -> dict[str, Any]:
    return node(throttleConfig=fields)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(throttle(cpu={"maxLoad": 80}), ThrottleConfig(cpu_max_load=80.0), id="cpu-increment-defaults-to-0"),
        pytest.param(
            throttle(cpu={"maxLoad": 80, "incrementBy": 10}, io={"maxLoad": 20, "incrementBy": 0.5}),
            ThrottleConfig(cpu_max_load=80.0, cpu_increment_by=10.0, io_max_load=20.0, io_increment_by=0.5),
            id="increments",
        ),
        pytest.param(throttle(cpu={"maxLoad": 100, "incrementBy": 100}), ThrottleConfig(cpu_max_load=100.0, cpu_increment_by=100.0), id="increment-at-most-100"),
        pytest.param(throttle(loadAvg={"maxLoad": 4}), ThrottleConfig(load_avg=LoadAvg(max_load=4.0)), id="load-avg-defaults"),
        pytest.param(
            throttle(loadAvg={"maxLoad": 0.75, "perCore": True, "incrementBy": 0}),
            ThrottleConfig(load_avg=LoadAvg(max_load=0.75, per_core=True, increment_by=0.0)),
            id="load-avg-every-key",
        ),
        pytest.param(throttle(loadAvg={"maxLoad": 200, "incrementBy": 150}), ThrottleConfig(load_avg=LoadAvg(max_load=200.0, increment_by=150.0)), id="load-avg-has-no-100-cap"),
    ],
)  # fmt: skip
def test_throttles_load(data: dict[str, Any], expected: ThrottleConfig) -> None:
    assert parse_policy_file(data).node_policies[0].throttle == expected


@pytest.mark.parametrize(
    ("dependencies", "expected"),
    [
        pytest.param([], (), id="none"),
        pytest.param([{"http": "http://registry:5000/v2/"}], (Dependency("http", "http://registry:5000/v2/", 2.0),), id="http-default-timeout"),
        pytest.param([{"http": "https://user@vault.example/v1/sys/health?standbyok=true", "timeout": "500ms"}], (Dependency("http", "https://user@vault.example/v1/sys/health?standbyok=true", 0.5),), id="https"),
        pytest.param([{"tcp": "db.example:5432", "timeout": 5}], (Dependency("tcp", "db.example:5432", 5.0),), id="tcp"),
        pytest.param([{"tcp": "10.0.0.7:1"}, {"tcp": "[fd00::7]:65535"}], (Dependency("tcp", "10.0.0.7:1"), Dependency("tcp", "[fd00::7]:65535")), id="addresses"),
        pytest.param([{"http": "http://[::1]:8080/ready"}], (Dependency("http", "http://[::1]:8080/ready"),), id="http-v6"),
        pytest.param([{"http": "HTTP://Registry:5000/"}], (Dependency("http", "HTTP://Registry:5000/"),), id="a-scheme-in-any-case"),
    ],
)  # fmt: skip
def test_dependencies_load(dependencies: list[dict[str, Any]], expected: tuple[Dependency, ...]) -> None:
    assert parse_policy_file(node(dependencies=dependencies)).node_policies[0].dependencies == expected


T = "nodePolicies[0].throttleConfig"
D = "nodePolicies[0].dependencies[0]"


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        pytest.param(throttle(cpu={"maxLoad": 50, "incrementBy": -1}), [f"{T}.cpu.incrementBy: must be at least 0 and at most 100 (got -1)"], id="increment-negative"),
        pytest.param(throttle(io={"maxLoad": 50, "incrementBy": 101}), [f"{T}.io.incrementBy: must be at least 0 and at most 100 (got 101)"], id="increment-over-100"),
        pytest.param(throttle(cpu={"maxLoad": 50, "incrementBy": "10"}), [f"{T}.cpu.incrementBy: must be a number (got '10')"], id="no-strings-in-stagger-s-format"),
        pytest.param(throttle(cpu={"incrementBy": 10}), [f"{T}.cpu.maxLoad: is required"], id="increment-without-max-load"),
        pytest.param(throttle(loadAvg={}), [f"{T}.loadAvg.maxLoad: is required"], id="load-avg-max-load-required"),
        pytest.param(throttle(loadAvg={"maxLoad": 0}), [f"{T}.loadAvg.maxLoad: must be greater than 0 (got 0)"], id="load-avg-zero"),
        pytest.param(throttle(loadAvg={"maxLoad": 1, "perCore": "yes"}), [f"{T}.loadAvg.perCore: must be true or false (got 'yes')"], id="load-avg-per-core"),
        pytest.param(throttle(loadAvg={"maxLoad": 1, "incrementBy": -0.5}), [f"{T}.loadAvg.incrementBy: must be at least 0 (got -0.5)"], id="load-avg-increment"),
        pytest.param(throttle(loadAvg={"maxLoad": float("inf")}), [f"{T}.loadAvg.maxLoad: must be a number (got inf)"], id="load-avg-inf"),
        pytest.param(throttle(loadAvg={"maxload": 1, "perCores": True}), [f"{T}.loadAvg.perCores: unknown key; did you mean 'perCore'?"], id="load-avg-typo"),
        pytest.param(node(dependencies={"http": "http://x/"}), ["nodePolicies[0].dependencies: must be a list (got {'http': 'http://x/'})"], id="not-a-list"),
        pytest.param(node(dependencies=["http://x/"]), [f"{D}: must be a mapping with keys http, tcp, timeout, interval, failInterval (got 'http://x/')"], id="a-bare-url"),
        pytest.param(node(dependencies=[{}]), [f"{D}: must have exactly one of http or tcp (got {{}})"], id="neither"),
        pytest.param(node(dependencies=[{"timeout": "1s"}]), [f"{D}: must have exactly one of http or tcp (got {{'timeout': '1s'}})"], id="only-a-timeout"),
        pytest.param(
            node(dependencies=[{"http": "http://x/", "tcp": "x:80"}]),
            [f"{D}: must have exactly one of http or tcp (got {{'http': 'http://x/', 'tcp': 'x:80'}})"],
            id="both",
        ),
        pytest.param(node(dependencies=[{"http": "ftp://x/"}]), [f"{D}.http: must be an http or https URL with a host (got 'ftp://x/')"], id="ftp"),
        pytest.param(node(dependencies=[{"http": "registry:5000"}]), [f"{D}.http: must be an http or https URL with a host (got 'registry:5000')"], id="no-scheme"),
        pytest.param(node(dependencies=[{"http": "http:///ready"}]), [f"{D}.http: must be an http or https URL with a host (got 'http:///ready')"], id="no-host"),
        pytest.param(node(dependencies=[{"http": "http://x:99999/"}]), [f"{D}.http: must be a URL with a port from 1 to 65535 (got 'http://x:99999/')"], id="port-too-big"),
        pytest.param(node(dependencies=[{"http": "http://ops:s3cret@x:99999/"}]), [f"{D}.http: must be a URL with a port from 1 to 65535 (got 'http://***@x:99999/')"], id="password-not-shown"),
        pytest.param(node(dependencies=[{"http": "http://ops:s3cret@x/a b"}]), [f"{D}.http: must be a URL like http://db.example:8080/ready (got 'http://***@x/a b')"], id="password-not-shown-either"),
        pytest.param(node(dependencies=[{"http": "http://x:0/"}]), [f"{D}.http: must be a URL with a port from 1 to 65535 (got 'http://x:0/')"], id="port-0"),
        pytest.param(node(dependencies=[{"http": "http://x/a b"}]), [f"{D}.http: must be a URL like http://db.example:8080/ready (got 'http://x/a b')"], id="space"),
        pytest.param(node(dependencies=[{"http": 80}]), [f"{D}.http: must be a URL like http://db.example:8080/ready (got 80)"], id="not-a-string"),
        pytest.param(node(dependencies=[{"tcp": "db"}]), [f"{D}.tcp: must be HOST:PORT like db.example:5432 (got 'db')"], id="no-port"),
        pytest.param(node(dependencies=[{"tcp": ":5432"}]), [f"{D}.tcp: must be HOST:PORT like db.example:5432 (got ':5432')"], id="no-host-tcp"),
        pytest.param(node(dependencies=[{"tcp": "db:0"}]), [f"{D}.tcp: must end in a port from 1 to 65535 (got 'db:0')"], id="tcp-port-0"),
        pytest.param(node(dependencies=[{"tcp": "db:65536"}]), [f"{D}.tcp: must end in a port from 1 to 65535 (got 'db:65536')"], id="tcp-port-too-big"),
        pytest.param(node(dependencies=[{"tcp": "db:http"}]), [f"{D}.tcp: must end in a port from 1 to 65535 (got 'db:http')"], id="named-port"),
        pytest.param(node(dependencies=[{"tcp": "fd00::1:80"}]), [f"{D}.tcp: must write an IPv6 host in brackets, like [fd00::1]:5432 (got 'fd00::1:80')"], id="v6-without-brackets"),
        pytest.param(node(dependencies=[{"tcp": "[db]:80"}]), [f"{D}.tcp: must have an IPv6 address between the brackets (got '[db]:80')"], id="brackets-without-v6"),
        pytest.param(node(dependencies=[{"tcp": "d b:80"}]), [f"{D}.tcp: must have a host name or an address (got 'd b:80')"], id="space-in-host"),
        pytest.param(node(dependencies=[{"tcp": 5432}]), [f"{D}.tcp: must be HOST:PORT like db.example:5432 (got 5432)"], id="a-bare-port"),
        pytest.param(node(dependencies=[{"tcp": "db:1", "timeout": "0s"}]), [f"{D}.timeout: must be longer than 0s (got '0s')"], id="timeout-zero"),
        pytest.param(node(dependencies=[{"tcp": "db:1", "timeout": "soon"}]), [f"{D}.timeout: not a duration like 90s, 10m or 1h30m (got 'soon')"], id="timeout-not-a-duration"),
        pytest.param(node(dependencies=[{"url": "http://x/"}]), [f"{D}.url: unknown key; expected one of http, tcp, timeout, interval, failInterval", f"{D}: must have exactly one of http or tcp (got {{'url': 'http://x/'}})"], id="unknown-key"),
    ],
)  # fmt: skip
def test_errors(data: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_file(data)
    assert list(caught.value.errors) == errors
