"""`kubectl stagger convert` on thundering-herd-scheduler's configuration (dbschenker/thundering-herd-scheduler):
its README's KubeSchedulerConfiguration, its development scheduler.yaml and its chart's values, verbatim,
become one node policy: `maxConcurrent` from parallelStartingPodsPerCore (or PerNode), `countAllStarting`
over every namespace (the plugin counts every not-Ready pod of the node), and `maxWait` the most the plugin
holds a pod (timeoutSeconds^2 x attempt, for maxRetries attempts: 375 s with its defaults). What differs
(rounding per core, DaemonSet pods, slots that end) is said on stderr. Arguments the plugin refuses
(PerNode and PerCore together) are an error, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
from stagger.policy import MaxConcurrent, NodePolicy, ThrottleConfig
from tests.convert.plugin import convert, data


def herd_policy(*, limit: MaxConcurrent, max_wait: float = 375.0) -> NodePolicy:
    return NodePolicy(
        name="thundering-herd-scheduler",
        throttle=ThrottleConfig(max_concurrent=limit),
        count_all_starting=True,
        exclude_namespaces=(),
        max_wait=max_wait,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "per_core", "where"),
    [
        pytest.param("herd-readme-config.yaml", 0.6, "profiles[0]", id="readme"),
        pytest.param("herd-development-scheduler.yaml", 0.67, "profiles[0]", id="development-scheduler"),
        pytest.param("herd-chart-values.yaml", 0.67, "scheduler.pluginConfig", id="chart-values"),
    ],
)
def test_the_peers_own_configurations(name: str, per_core: float, where: str) -> None:
    run = convert(data(name))
    assert run.loaded().node_policies == (herd_policy(limit=MaxConcurrent(per_core=per_core)),)
    assert run.loaded().staggering_policies == ()
    said = "\n".join(run.not_carried)
    assert (
        f"{data(name)}: {where}: parallelStartingPodsPerCore {per_core:g} is rounded down by the plugin"
        in said
    )
    assert "DaemonSet pod" in said and "holdTimeout" in said
    assert any("maxWait 6m15s" in note for note in run.notes)
    assert any("schedulerName: thundering-herd-scheduler" in note for note in run.notes)


def herd(text: str) -> NodePolicy:
    (policy,) = convert_inputs([Input(source="herd.yaml", text=text)]).policy_file.node_policies
    return policy


def test_per_node_and_the_timeouts() -> None:
    args = "parallelStartingPodsPerNode: 3\ntimeoutSeconds: 2\nmaxRetries: 3\n"
    # 4 s, 8 s, then 12 s of waiting before the plugin binds the pod anyway.
    assert herd(args) == herd_policy(limit=MaxConcurrent(value=3), max_wait=24.0)


def test_the_plugins_defaults_and_go_style_keys() -> None:
    config = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"
        "- schedulerName: herd\n  pluginConfig:\n  - name: ThunderingHerdScheduling\n"
        "    args: {ParallelStartingPodsPerNode: 2}\n"
    )
    assert herd(config) == NodePolicy(
        name="herd",
        throttle=ThrottleConfig(max_concurrent=MaxConcurrent(value=2)),
        count_all_starting=True,
        exclude_namespaces=(),
        max_wait=375.0,
    )
    # No limit at all: the plugin's default, 1.0 per core.
    assert herd(
        config.replace("{ParallelStartingPodsPerNode: 2}", "{}")
    ).throttle.max_concurrent == MaxConcurrent(per_core=1.0)


def test_a_configmap_holding_the_configuration_and_the_charts_profiles_override() -> None:
    readme = data("herd-readme-config.yaml").read_text()
    configmap = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndata:\n  kube-scheduler.yaml: |\n"
        + "".join(f"    {line}\n" for line in readme.splitlines())
    )
    assert herd(configmap).throttle.max_concurrent == MaxConcurrent(per_core=0.6)
    values = (
        "scheduler:\n  pluginConfig: {parallelStartingPodsPerCore: 0.67}\n  profilesOverride:\n"
        "  - schedulerName: thundering-herd-scheduler\n    pluginConfig:\n    - name: ThunderingHerdScheduling\n"
        "      args: {parallelStartingPodsPerNode: 3, timeoutSeconds: 5, maxRetries: 5}\n"
    )
    assert herd(values).throttle.max_concurrent == MaxConcurrent(value=3)


@pytest.mark.slow
def test_arguments_the_plugin_refuses_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "args.yaml"
    path.write_text("parallelStartingPodsPerNode: 3\nparallelStartingPodsPerCore: 0.5\n")
    run = convert(path)
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == (
        f"{path}: the plugin's arguments: cannot specify parallelStartingPodsPerNode and "
        "parallelStartingPodsPerCore at the same time (the plugin refuses to start)\n"
    )
    with pytest.raises(InvalidInput):
        herd("parallelStartingPodsPerNode: 0\n")
