"""`kubectl stagger convert` on pod-startup-lock's flags (serhii-samoilenko/pod-startup-lock): the lock
service's command line and DaemonSet and k8s-health's DaemonSet and command line from their READMEs,
verbatim, as a text file or YAML, become one node policy: `maxConcurrent.value` = --locks, `holdTimeout` =
--timeout (10 s by default), `dependencies` for --check endpoints (http, tcp; 10 s each, as its checker;
`interval`/`failInterval` from --passHc/--failHc), `waitForDaemonSets` only when a --check reaches
k8s-health's endpoint (its --host/--port; its default port on the node when no k8s-health is given), with
k8s-health's --hostNet/--namespace/--in/--ex as `daemonSets` filters, and the lock DaemonSet's nodeSelector.
A `$(VAR)` the container's env makes the node's IP or name (by its name in a text) is `$(NODE_IP)` or
`$(NODE_NAME)`. Flags read as Go's flag package reads them; what the programs refuse (a malformed --check,
--in with --ex, a bad label:value, k8s-health without NODE_NAME) is an error, exit 1; what stagger does
otherwise (a lock that lasts its whole timeout, an unknown $(VAR)) is said on stderr. Then the chart's
lockd.podStartupLock values (the init containers' port, a longer hold) and the programs to delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
from kubectl_stagger.convert.run import Converted
from stagger.policy import DaemonSetFilter, Dependency, MaxConcurrent, NodePolicy, ThrottleConfig
from stagger.selectors import LabelSelector
from tests.convert.plugin import convert, data


def lock_policy(**fields: object) -> NodePolicy:
    values: dict[str, object] = {
        "name": "pod-startup-lock",
        "throttle": ThrottleConfig(max_concurrent=MaxConcurrent(value=1)),
        "hold_timeout": 10.0,
    }
    return NodePolicy(**(values | fields))  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_lock_services_command_line() -> None:
    run = convert(data("startup-lock-run-locally.txt"))
    assert run.loaded().node_policies == (
        lock_policy(
            throttle=ThrottleConfig(max_concurrent=MaxConcurrent(value=2)),
            dependencies=(
                Dependency(kind="http", target="http://myelasticsearch:9200", timeout=10.0),
                Dependency(kind="tcp", target="mymongodb:27017", timeout=10.0),
            ),
        ),
    )
    assert any("whole --timeout (10 s)" in line for line in run.not_carried)
    # Its --port 9000 is where its init containers ask: lockd's pod-startup-lock port.
    assert run.notes[-3:] == [
        "chart value: lockd.podStartupLock.port: 9000: pod-startup-lock's init containers ask the node's port as "
        "they are; lockd answers them there (a pod known by its IP asks as itself, its slot ending when it is Ready)",
        "chart values as flags of helm install or upgrade: --set lockd.podStartupLock.port=9000",
        "no longer needed: pod-startup-lock's lock service (its DaemonSet): delete it before "
        "lockd.podStartupLock.port is set, as both take the node's port 9000",
    ]


@pytest.mark.slow
def test_the_lock_daemonset_whose_check_is_k8s_health_at_its_default_port() -> None:
    run = convert(data("startup-lock-daemonset.yaml"))
    assert run.loaded().node_policies == (
        lock_policy(
            node_selector=LabelSelector.from_labels({"kubernetes.io/role": "node"}), wait_for_daemonsets=True
        ),
    )
    assert any(
        "--check http://$(HOST_IP):9999 is k8s-health's port (9999) on the node: waitForDaemonSets: true" in n
        for n in run.notes
    )
    assert run.notes[-2:] == [
        "no longer needed: pod-startup-lock's lock service (DaemonSet startup-lock): delete it before "
        "lockd.podStartupLock.port is set, as both take the node's port 8888",
        "no longer needed: k8s-health (its DaemonSet): lockd watches the node's DaemonSets itself (waitForDaemonSets)",
    ]


@pytest.mark.slow
def test_the_lock_and_k8s_health_daemonsets_make_waiting_with_its_filters() -> None:
    lock, health = data("startup-lock-daemonset.yaml"), data("startup-lock-k8s-health-daemonset.yaml")
    local = data("startup-lock-k8s-health-run-locally.txt")
    run = convert(lock, health, local)
    (policy,) = run.loaded().node_policies
    assert (policy.wait_for_daemonsets, policy.daemonsets) == (True, DaemonSetFilter(host_network=True))
    assert "  daemonSets:\n    hostNetwork: true\n" in run.stdout
    # The README's local k8s-health serves the same port: the DaemonSet's, first, is the one carried over.
    assert run.not_carried[0] == (
        f"{local}:4: k8s-health's flags: another k8s-health on the endpoint the lock checks: only the first's "
        f"({health}: spec.template.spec.containers[0]) filters are carried over"
    )
    assert "no longer needed: k8s-health (DaemonSet startup-lock-k8s-health): lockd watches" in run.notes[-1]


@pytest.mark.slow
def test_k8s_health_that_no_check_asks_is_no_waiting() -> None:
    health = data("startup-lock-k8s-health-daemonset.yaml")
    run = convert(data("startup-lock-run-locally.txt"), health)
    (policy,) = run.loaded().node_policies
    assert (policy.wait_for_daemonsets, len(policy.dependencies)) == (False, 2)
    assert run.not_carried[0] == (
        f"{health}: spec.template.spec.containers[0]: k8s-health's flags: no lock --check asks its endpoint, so "
        "the lock never waited for DaemonSets: no waitForDaemonSets"
    )


def lock(text: str, *, source: str = "flags.txt") -> tuple[NodePolicy, Converted]:
    converted = convert_inputs([Input(source=source, text=text)], peer="pod-startup-lock")
    (policy,) = converted.policy_file.node_policies
    return policy, converted


def test_go_flag_syntax_and_a_yaml_args_list() -> None:
    policy, _ = lock("/bin/lock -locks=3 --timeout 0x1e \\\n  --check=https://es:9200/_cluster/health\n")
    assert policy == lock_policy(
        throttle=ThrottleConfig(max_concurrent=MaxConcurrent(value=3)),
        hold_timeout=30.0,
        dependencies=(Dependency(kind="http", target="https://es:9200/_cluster/health", timeout=10.0),),
    )
    listed, _ = lock('["--locks", "2", "--timeout", "20"]\n')
    assert (listed.throttle.max_concurrent, listed.hold_timeout) == (MaxConcurrent(value=2), 20.0)
    values, _ = lock("lock:\n  image: ssamoilenko/startup-lock\n  args: [--locks, '4']\n")
    assert values.throttle.max_concurrent == MaxConcurrent(value=4)


def test_pass_and_fail_hc_are_each_dependencys_intervals() -> None:
    policy, converted = lock("lock --check tcp://db:5432 --check http://es:9200 --passHc 30 --failHc 5\n")
    assert policy.dependencies == (
        Dependency(kind="tcp", target="db:5432", timeout=10.0, interval=30.0, fail_interval=5.0),
        Dependency(kind="http", target="http://es:9200", timeout=10.0, interval=30.0, fail_interval=5.0),
    )
    assert "interval: 30s" in converted.text and "failInterval: 5s" in converted.text
    zero, converted = lock("lock --check tcp://db:5432 --failHc 0\n")
    assert zero.dependencies[0].fail_interval is None
    assert converted.not_carried[0].endswith(
        "--failHc 0: the lock re-checks at once, without a pause; stagger's dependencies need an interval of at "
        "least 1 s: lockd's own here"
    )


def daemonset(
    args: list[str], *, env: str, image: str = "ssamoilenko/startup-lock", host_network: bool = True
) -> str:
    return (
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: lock}\nspec:\n  template:\n    spec:\n"
        f"      hostNetwork: {'true' if host_network else 'false'}\n      containers:\n"
        f"      - name: c\n        image: {image}\n        args: {args!r}\n        env:\n{env}"
    )


HOST_IP = "        - name: HOST_IP\n          valueFrom: {fieldRef: {fieldPath: status.hostIP}}\n"
MY_NODE = "        - name: MY_NODE\n          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\n"
POD_IP = "        - name: POD_IP\n          valueFrom: {fieldRef: {fieldPath: status.podIP}}\n"
DB = "        - name: DB\n          value: db.shop\n"


@pytest.mark.parametrize(
    ("text", "targets"),
    [
        pytest.param(
            daemonset(
                ["--check", "http://$(HOST_IP):8080/ready", "--check", "tcp://$(MY_NODE):5432"],
                env=HOST_IP + MY_NODE,
            ),
            [("http", "http://$(NODE_IP):8080/ready"), ("tcp", "$(NODE_NAME):5432")],
            id="env-of-the-node",
        ),
        pytest.param(
            daemonset(["--check", "tcp://$(POD_IP):53"], env=POD_IP),
            [("tcp", "$(NODE_IP):53")],
            id="host-network-pod-ip",
        ),
        pytest.param(
            daemonset(["--check", "tcp://$(DB):5432"], env=DB),
            [("tcp", "db.shop:5432")],
            id="a-plain-value",
        ),
        pytest.param(
            "lock --check http://$(HOST_IP):8080/ready --check tcp://$(NODE_NAME):22\n",
            [("http", "http://$(NODE_IP):8080/ready"), ("tcp", "$(NODE_NAME):22")],
            id="text-by-the-readmes-names",
        ),
    ],
)
def test_node_relative_checks_are_node_ip_and_node_name(text: str, targets: list[tuple[str, str]]) -> None:
    policy, _ = lock(text)
    assert [(each.kind, each.target) for each in policy.dependencies] == targets


def test_checks_stagger_cannot_make_a_dependency_of() -> None:
    policy, converted = lock(
        "lock --check http://$(APP_HOST):8080/ready --check udp://dns:53 --check tcp://db:99999\n"
    )
    assert policy.dependencies == ()
    assert [line.split(": ", 1)[1] for line in converted.not_carried[:3]] == [
        "--check http://$(APP_HOST):8080/ready: $(APP_HOST) is neither the node's IP nor its name (Kubernetes "
        "expands it from the container's env, lockd only $(NODE_IP) and $(NODE_NAME)); add it to dependencies "
        "with the address written out",
        "--check udp://dns:53: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only",
        "--check tcp://db:99999: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only",
    ]


@pytest.mark.parametrize(
    ("health", "check", "waits", "filters"),
    [
        pytest.param("", "http://$(HOST_IP):9999", True, DaemonSetFilter(), id="defaults"),
        pytest.param(
            "--namespace infra --in app:cni --in tier:node",
            "http://localhost:9999/",
            True,
            DaemonSetFilter(namespaces=("infra",), include=("app:cni", "tier:node")),
            id="namespace-and-in",
        ),
        pytest.param(
            "--ex app:debug --hostNet",
            "http://127.0.0.1:9999",
            True,
            DaemonSetFilter(host_network=True, exclude=("app:debug",)),
            id="ex-and-host-net",
        ),
        pytest.param("--port 9100", "http://$(HOST_IP):9100", True, DaemonSetFilter(), id="its-own-port"),
        pytest.param("--port 9100", "http://$(HOST_IP):9999", False, DaemonSetFilter(), id="another-port"),
        pytest.param(
            "--host 127.0.0.1", "http://localhost:9999", True, DaemonSetFilter(), id="bound-to-loopback"
        ),
        pytest.param(
            "--host 127.0.0.1", "http://$(HOST_IP):9999", False, DaemonSetFilter(), id="loopback-only"
        ),
        pytest.param("", "https://$(HOST_IP):9999", False, DaemonSetFilter(), id="it-serves-no-tls"),
        pytest.param("", "http://elsewhere:9999", False, DaemonSetFilter(), id="another-host"),
    ],
)
def test_waiting_for_daemonsets_only_where_a_check_reaches_k8s_health(
    health: str, check: str, waits: bool, filters: DaemonSetFilter
) -> None:
    policy, _ = lock(f"lock --check {check}\nk8s-health {health}\n")
    assert (policy.wait_for_daemonsets, policy.daemonsets) == (waits, filters)
    # A check that does not reach k8s-health is a dependency like any other.
    assert len(policy.dependencies) == (0 if waits else 1)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            "lock --check mymongodb:27017\n",
            'flags.txt:1: --check mymongodb:27017: the lock refuses it ("Endpoint malformed": no PROTOCOL://)',
            id="check-without-protocol",
        ),
        pytest.param(
            "lock --check tcp://mymongodb\n",
            'flags.txt:1: --check tcp://mymongodb: the lock refuses it ("Address malformed": not HOST:PORT)',
            id="tcp-without-port",
        ),
        pytest.param(
            "lock\nk8s-health --in app:a --ex app:b\n",
            'flags.txt:2: --in with --ex: k8s-health refuses them together ("Cannot specify both Included and '
            'Excluded DaemonSet labels, choose one")',
            id="in-with-ex",
        ),
        pytest.param(
            "lock\nk8s-health --in app\n",
            'flags.txt:2: --in app: k8s-health refuses it ("Failed to parse value": not label:value)',
            id="in-without-value",
        ),
        pytest.param(
            daemonset(
                ["--hostNet"],
                env="        - {name: OTHER, value: x}\n",
                image="ssamoilenko/startup-lock-k8s-health",
            ),
            "flags.txt: spec.template.spec.containers[0]: no NODE_NAME in the container's env: k8s-health refuses "
            'to start ("NODE_NAME not specified")',
            id="k8s-health-without-node-name",
        ),
        pytest.param(
            "lock --locks 0\n",
            "flags.txt:1: --locks 0 never grants a lock; stagger needs at least 1",
            id="no-locks",
        ),
    ],
)
def test_what_the_programs_refuse_is_an_error(text: str, error: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        lock(text)
    assert refused.value.errors == (error,)


@pytest.mark.slow
def test_flags_the_lock_refuses_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "flags.txt"
    path.write_text("lock --locks 0 --colour blue\n")
    run = convert(path, "--from", "pod-startup-lock")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr.splitlines() == [
        f"{path}:1: lock: flag provided but not defined: -colour",
        f"{path}:1: --locks 0 never grants a lock; stagger needs at least 1",
    ]
    with pytest.raises(InvalidInput):
        lock("lock --timeout\n")


@pytest.mark.parametrize(
    ("text", "values"),
    [
        pytest.param("lock --locks 1\n", {"lockd.podStartupLock.port": 8888}, id="defaults"),
        pytest.param(
            "lock --port 9000 --timeout 20\n",
            {"lockd.podStartupLock.port": 9000, "lockd.podStartupLock.holdTimeout": "20s"},
            id="port-and-timeout",
        ),
        pytest.param(
            "lock --port 9000\ninit --port 9001 --duration 30\n",
            {"lockd.podStartupLock.port": 9001, "lockd.podStartupLock.holdTimeout": "30s"},
            id="the-init-containers-port-and-duration",
        ),
    ],
)
def test_the_chart_values_of_the_init_containers(text: str, values: dict[str, object]) -> None:
    _, converted = lock(text)
    assert {each.key: each.value for each in converted.chart_values} == values
