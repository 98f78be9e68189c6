"""`kubectl stagger convert` on thundering-herd-scheduler's configuration (dbschenker/thundering-herd-scheduler):
its README's KubeSchedulerConfiguration, its development scheduler.yaml and its chart's values, verbatim,
become one node policy: `maxConcurrent` from parallelStartingPodsPerCore (or PerNode), `countAllStarting`
over every namespace and `countDaemonSets` (the plugin counts every not-Ready pod of the node, DaemonSet
pods too), and `maxWait` the most the plugin holds a pod (timeoutSeconds^2 x attempt, for maxRetries
attempts: 375 s with its defaults). maxRetries 0 (or below) holds nothing in the plugin (a pod's counter, 1,
is past it at once): a node policy without a throttle. Values the plugin takes that stagger cannot (a limit
below 1) convert to the nearest and are said; arguments the plugin refuses (PerNode and PerCore together, a
value of the wrong type) are an error, exit 1. Then the chart's `controller.webhook.schedulerNames` (the
plugin's custom schedulers, never default-scheduler) and the scheduler's objects to delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
from kubectl_stagger.convert.run import Converted
from stagger.policy import MaxConcurrent, NodePolicy, ThrottleConfig
from tests.convert.plugin import convert, data


def herd_policy(
    *, limit: MaxConcurrent | None, max_wait: float = 375.0, name: str = "thundering-herd-scheduler"
) -> NodePolicy:
    return NodePolicy(
        name=name,
        throttle=ThrottleConfig(max_concurrent=limit),
        count_all_starting=True,
        count_daemonsets=True,
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
    assert "  countDaemonSets: true\n" in run.stdout
    assert run.not_carried == [
        f"{data(name)}: {where}: parallelStartingPodsPerCore {per_core:g} is rounded down by the plugin (allocatable "
        f"CPU x {per_core:g}, at least 1) and up by stagger (the node's cores x {per_core:g}, at least 1); set "
        "maxConcurrent.value per node pool for an exact limit",
        f"{data(name)}: {where}: a pod that never becomes Ready counts for the plugin until it is; a stagger slot "
        "ends at holdTimeout (2m) at the latest",
    ]
    assert any("maxWait 6m15s" in note for note in run.notes)
    assert any("countAllStarting and countDaemonSets" in note for note in run.notes)
    assert run.notes[-3:] == [
        'chart value: controller.webhook.schedulerNames: ["thundering-herd-scheduler"]: pods that name it are '
        "opted in and given the default scheduler, their manifests unchanged",
        "chart values as flags of helm install or upgrade: --set 'controller.webhook.schedulerNames={thundering-herd-scheduler}'",
        "no longer needed: thundering-herd-scheduler's Deployment, its ConfigMap (the KubeSchedulerConfiguration), "
        "ServiceAccount, RBAC and PodDisruptionBudget (helm uninstall <release>): once stagger's webhook gives "
        "their pods the default scheduler, nothing asks for it",
    ]


def herd_conversion(text: str) -> Converted:
    return convert_inputs([Input(source="herd.yaml", text=text)])


def herd(text: str) -> NodePolicy:
    (policy,) = herd_conversion(text).policy_file.node_policies
    return policy


@pytest.mark.parametrize(
    ("args", "policy", "said"),
    [
        # 4 s, 8 s, then 12 s of waiting before the plugin binds the pod anyway.
        pytest.param(
            "parallelStartingPodsPerNode: 3\ntimeoutSeconds: 2\nmaxRetries: 3\n",
            herd_policy(limit=MaxConcurrent(value=3), max_wait=24.0),
            "maxWait 24s",
            id="per-node-and-timeouts",
        ),
        pytest.param(
            "parallelStartingPodsPerNode: 3.0\ntimeoutSeconds: 2.0\nmaxRetries: 1\n",
            herd_policy(limit=MaxConcurrent(value=3), max_wait=4.0),
            "maxWait 4s",
            id="whole-floats-as-go-reads-them",
        ),
        pytest.param(
            "parallelStartingPodsPerNode: 3\nmaxRetries: 0\n",
            herd_policy(limit=None, max_wait=600.0),
            "maxRetries 0: the plugin binds every pod at its first Permit",
            id="max-retries-0-holds-nothing",
        ),
        pytest.param(
            "maxRetries: -2\n",
            herd_policy(limit=None, max_wait=600.0),
            "maxRetries -2: the plugin binds every pod at its first Permit",
            id="max-retries-negative-holds-nothing",
        ),
        pytest.param(
            "parallelStartingPodsPerNode: 0\n",
            herd_policy(limit=MaxConcurrent(value=1)),
            "parallelStartingPodsPerNode: 0 lets no pod through at once",
            id="per-node-0",
        ),
        pytest.param(
            "parallelStartingPodsPerCore: 0\n",
            herd_policy(limit=MaxConcurrent(value=1)),
            "parallelStartingPodsPerCore: 0 is 1 pod a node to the plugin",
            id="per-core-0-is-one",
        ),
        pytest.param(
            "timeoutSeconds: 0\nparallelStartingPodsPerNode: 2\n",
            herd_policy(limit=MaxConcurrent(value=2), max_wait=600.0),
            "timeoutSeconds 0: each of the plugin's waits is 0 s",
            id="timeout-0",
        ),
    ],
)
def test_what_the_plugin_takes_converts(args: str, policy: NodePolicy, said: str) -> None:
    converted = herd_conversion(args)
    assert converted.policy_file.node_policies == (policy,)
    assert said in "\n".join(converted.not_carried + converted.notes)


@pytest.mark.slow
def test_max_retries_0_is_a_node_policy_without_a_throttle(tmp_path: Path) -> None:
    path = tmp_path / "args.yaml"
    path.write_text("parallelStartingPodsPerCore: 0.5\nmaxRetries: 0\n")
    run = convert(path)
    assert run.loaded().node_policies == (herd_policy(limit=None, max_wait=600.0),)
    assert "throttleConfig" not in run.stdout


def test_the_plugins_defaults_and_go_style_keys() -> None:
    config = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"
        "- schedulerName: herd\n  pluginConfig:\n  - name: ThunderingHerdScheduling\n"
        "    args: {ParallelStartingPodsPerNode: 2}\n"
    )
    assert herd(config) == herd_policy(limit=MaxConcurrent(value=2), name="herd")
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


def profiles(*names: str | None) -> str:
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"
    for name in names:
        text += f"- schedulerName: {name}\n" if name else "- plugins: {}\n"
        text += "  pluginConfig:\n  - name: ThunderingHerdScheduling\n    args: {parallelStartingPodsPerNode: 2}\n"
    return text


@pytest.mark.parametrize(
    ("text", "names", "namespace_note"),
    [
        pytest.param(
            profiles("herd-a", "herd-b", "herd-a"), ["herd-a", "herd-b"], False, id="custom-schedulers"
        ),
        pytest.param(profiles(None), [], True, id="default-scheduler-profile"),
        pytest.param(profiles("default-scheduler", "herd"), ["herd"], True, id="both"),
    ],
)
def test_scheduler_names_are_the_plugins_custom_schedulers(
    text: str, names: list[str], namespace_note: bool
) -> None:
    converted = herd_conversion(text)
    assert [(each.key, each.value) for each in converted.chart_values] == (
        [("controller.webhook.schedulerNames", names)] if names else []
    )
    said = "\n".join(converted.notes)
    assert ("the plugin ran in the default-scheduler profile, so it saw every pod" in said) is namespace_note


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(
            "parallelStartingPodsPerNode: 3\nparallelStartingPodsPerCore: 0.5\n",
            "the plugin's arguments: cannot specify parallelStartingPodsPerNode and parallelStartingPodsPerCore at "
            "the same time (the plugin refuses to start)",
            id="per-node-and-per-core",
        ),
        pytest.param(
            "timeoutSeconds: '5'\n",
            "the plugin's arguments.timeoutSeconds: not a whole number (got '5'): the plugin refuses its arguments",
            id="a-string-for-an-int",
        ),
        pytest.param(
            "maxRetries: 2.5\n",
            "the plugin's arguments.maxRetries: not a whole number (got 2.5): the plugin refuses its arguments",
            id="a-fraction-for-an-int",
        ),
        pytest.param(
            "parallelStartingPodsPerCore: half\n",
            "the plugin's arguments.parallelStartingPodsPerCore: not a number (got 'half'): the plugin refuses its "
            "arguments",
            id="a-string-for-a-float",
        ),
    ],
)
def test_arguments_the_plugin_refuses_are_an_error(args: str, error: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        herd_conversion(args)
    assert refused.value.errors == (f"herd.yaml: {error}",)


@pytest.mark.slow
def test_refused_arguments_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "args.yaml"
    path.write_text("parallelStartingPodsPerNode: 3\nparallelStartingPodsPerCore: 0.5\n")
    run = convert(path)
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == (
        f"{path}: the plugin's arguments: cannot specify parallelStartingPodsPerNode and "
        "parallelStartingPodsPerCore at the same time (the plugin refuses to start)\n"
    )
