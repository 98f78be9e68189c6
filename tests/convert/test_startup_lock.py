"""`kubectl stagger convert` on pod-startup-lock's flags (serhii-samoilenko/pod-startup-lock): the lock
service's command line and DaemonSet and k8s-health's DaemonSet and command line from their READMEs,
verbatim, as a text file or YAML, become one node policy: `maxConcurrent.value` = --locks, `holdTimeout` =
--timeout (10 s by default), `dependencies` for --check endpoints (http, tcp; 10 s each, as its checker),
`waitForDaemonSets` for k8s-health (or a --check on its port), and the lock DaemonSet's nodeSelector. Flags
read as Go's flag package reads them; what stagger does otherwise (a lock that lasts its whole timeout,
k8s-health's DaemonSet filters, a $(VAR) in a URL) is said on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
from stagger.policy import Dependency, MaxConcurrent, NodePolicy, ThrottleConfig
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
    assert any("not --host/--port" in note for note in run.notes)


@pytest.mark.slow
def test_the_lock_daemonset_whose_check_is_k8s_health() -> None:
    run = convert(data("startup-lock-daemonset.yaml"))
    assert run.loaded().node_policies == (
        lock_policy(
            node_selector=LabelSelector.from_labels({"kubernetes.io/role": "node"}), wait_for_daemonsets=True
        ),
    )
    assert any(
        "--check http://$(HOST_IP):9999 is k8s-health's port: waitForDaemonSets: true" in n for n in run.notes
    )


@pytest.mark.slow
def test_the_lock_and_k8s_health_together_make_one_node_policy() -> None:
    run = convert(
        data("startup-lock-run-locally.txt"),
        data("startup-lock-k8s-health-daemonset.yaml"),
        data("startup-lock-k8s-health-run-locally.txt"),
    )
    (policy,) = run.loaded().node_policies
    assert (policy.throttle.max_concurrent, policy.wait_for_daemonsets, len(policy.dependencies)) == (
        MaxConcurrent(value=2),
        True,
        2,
    )
    health = data("startup-lock-k8s-health-run-locally.txt")
    assert (
        f"{health}:4: --in app:test --in version:1.1 (only the DaemonSets with these labels): stagger's "
        in ("\n".join(run.not_carried))
    )
    assert sum("--hostNet (only the DaemonSets on the host network)" in line for line in run.not_carried) == 2


def lock(text: str) -> tuple[NodePolicy, tuple[str, ...]]:
    converted = convert_inputs([Input(source="flags.txt", text=text)], peer="pod-startup-lock")
    (policy,) = converted.policy_file.node_policies
    return policy, converted.not_carried


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


def test_checks_stagger_cannot_make_a_dependency_of() -> None:
    policy, not_carried = lock(
        "lock --check http://$(HOST_IP):8080/ready --check udp://dns:53 --passHc 30 --check tcp://db:99999\n"
    )
    assert policy.dependencies == ()
    assert not_carried[3].endswith(
        "--check tcp://db:99999: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only"
    )
    assert [line.split(": ", 1)[1] for line in not_carried[:3]] == [
        "--passHc 30: lockd re-checks a dependency on its own schedule (a short cache)",
        "--check http://$(HOST_IP):8080/ready: Kubernetes expands $(VAR) in a container's args, not in a policy "
        "file; add it to dependencies with the address written out",
        "--check udp://dns:53: stagger checks http(s) URLs with a host and tcp HOST:PORT endpoints only",
    ]


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
