"""Scenario files for the simulated cluster: parsing (with errors that name the field) and manifests.

A scenario (YAML) gives the nodes, the workloads, whether stagger runs (and lockd's policy file), the
start-up model's parameters, the time scale and a deadline. ``sim/cluster/scenarios/herd.yaml`` is the default.
A workload's ``readinessPeriodSeconds`` gives its pods a readiness probe (an ``exec`` one: see
``readiness_probe``); without it they have none, and are Ready as soon as their start-up work is done.
"""

from __future__ import annotations

import copy
import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from sim.cluster import podparams
from sim.cluster.objects import byte_count, cpu_millis
from sim.cluster.startup import ModelSettings
from stagger.names import Names
from stagger.objects import Obj

DEFAULT_SCENARIO = "herd.yaml"
INITCLIENT_CONTAINER = "stagger-init"
DEFAULT_IMAGE = "registry.example/app:1.0"
STAGGER_IMAGE = "registry.example/stagger:dev"

WorkloadKind = Literal["Deployment", "Job"]


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names the field."""


@dataclass(frozen=True)
class NodePool:
    count: int = 4
    cores: float = 4.0
    memory: str = "16Gi"
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind
    name: str
    namespace: str = "default"
    replicas: int = 1
    """Deployment replicas, or Job parallelism."""
    completions: int | None = None
    backoff_limit: int = 6
    cpu_seconds: float = podparams.DEFAULT_CPU_SECONDS
    liveness_seconds: float | None = podparams.DEFAULT_LIVENESS_SECONDS
    run_seconds: float | None = None
    readiness_period: int | None = None
    """The pods' readiness probe's ``periodSeconds`` (simulated seconds; Kubernetes' default is 10): Ready
    at the first probe once the start-up work is done. None: no probe, Ready as soon as the work is done.
    A whole number, as the API's field is."""
    requests: Mapping[str, str] = field(default_factory=dict)
    image: str = DEFAULT_IMAGE
    stagger: bool = True
    """Opt the pods in (init client + enable label) when the scenario runs with stagger."""
    pod_failure_policy: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    """More labels on the pods (what staggering policies select)."""


LockdMode = Literal["cluster", "standalone"]


@dataclass(frozen=True)
class StaggerConfig:
    enabled: bool = False
    host_port: int = 9400
    """0: pick a port that is free on every node address."""
    max_wait: str = "10m"
    policies: str = ""
    """lockd's policy file (YAML text)."""
    lockd_mode: LockdMode = "cluster"
    """cluster: lockd watches the pods of its node through the emulator and ends slots at Ready itself;
    standalone: lockd knows only namespace/name and the kubelet gives slots back (DELETE) at Ready."""
    controller: bool = False
    """The real controller runs (`python -m webhook`): its admission injects the init client and puts pods
    in their staggering groups, and lockd asks it for group grants. Default: when the policy file has
    staggeringPolicies."""
    controller_replicas: int = 1
    """Controller replicas; with 2 or more they elect a leader on a Lease."""


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: NodePool
    workloads: tuple[Workload, ...]
    stagger: StaggerConfig = field(default_factory=StaggerConfig)
    model: ModelSettings = field(default_factory=ModelSettings)
    time_scale: float = 10.0
    deadline_seconds: float = 900.0
    """Simulated seconds a run may take before it is called off."""


# ------------------------------------------------------------------------------------------- parsing


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{path}: expected a mapping (got {type(value).__name__})")
    return value


def _allowed(data: Mapping[str, Any], path: str, keys: set[str]) -> None:
    unknown = sorted(set(data) - keys)
    if unknown:
        raise ScenarioError(
            f"{path}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(keys))})"
        )


def _number(
    data: Mapping[str, Any],
    key: str,
    path: str,
    default: float,
    *,
    minimum: float = 0.0,
    exclusive: bool = False,
) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{path}.{key}: expected a number (got {value!r})")
    if value < minimum or (exclusive and value == minimum):
        raise ScenarioError(f"{path}.{key}: must be {'>' if exclusive else '>='} {minimum:g} (got {value!r})")
    return float(value)


def _integer(data: Mapping[str, Any], key: str, path: str, default: int, *, minimum: int = 0) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScenarioError(f"{path}.{key}: expected a whole number >= {minimum} (got {value!r})")
    return value


def _string(data: Mapping[str, Any], key: str, path: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{path}.{key}: expected a non-empty string (got {value!r})")
    return value


def _string_map(value: object, path: str) -> dict[str, str]:
    data = _mapping(value, path)
    return {str(k): str(v) for k, v in data.items()}


def _parse_nodes(data: Mapping[str, Any]) -> NodePool:
    path = "nodes"
    _allowed(data, path, {"count", "cores", "memory", "pods", "labels", "taints"})
    memory = str(data.get("memory", NodePool.memory))
    try:
        byte_count(memory)
    except ValueError:
        raise ScenarioError(f"{path}.memory: not a quantity like 16Gi (got {memory!r})") from None
    taints = data.get("taints") or []
    if not isinstance(taints, list) or not all(isinstance(t, Mapping) and t.get("key") for t in taints):
        raise ScenarioError(f"{path}.taints: expected a list of {{key, value, effect}}")
    return NodePool(
        count=_integer(data, "count", path, NodePool.count, minimum=1),
        cores=_number(data, "cores", path, NodePool.cores, exclusive=True),
        memory=memory,
        pods=_integer(data, "pods", path, NodePool.pods, minimum=1),
        labels=_string_map(data.get("labels"), f"{path}.labels"),
        taints=tuple(dict(t) for t in taints),
    )


def _optional_seconds(data: Mapping[str, Any], key: str, path: str, default: float | None) -> float | None:
    if key in data and data[key] is None:
        return None
    if key not in data:
        return default
    return _number(data, key, path, 0.0, exclusive=True)


def _parse_workload(data: Mapping[str, Any], path: str) -> Workload:
    _allowed(
        data,
        path,
        {
            "kind",
            "name",
            "namespace",
            "replicas",
            "parallelism",
            "completions",
            "backoffLimit",
            "cpuSeconds",
            "livenessSeconds",
            "runSeconds",
            "readinessPeriodSeconds",
            "requests",
            "image",
            "stagger",
            "podFailurePolicy",
            "labels",
        },
    )
    kind = data.get("kind")
    if kind not in ("Deployment", "Job"):
        raise ScenarioError(f"{path}.kind: expected Deployment or Job (got {kind!r})")
    requests = _string_map(data.get("requests"), f"{path}.requests")
    for resource, amount in requests.items():
        try:
            cpu_millis(amount) if resource == "cpu" else byte_count(amount)
        except ValueError:
            raise ScenarioError(f"{path}.requests.{resource}: not a quantity (got {amount!r})") from None
    stagger = data.get("stagger", True)
    if not isinstance(stagger, bool):
        raise ScenarioError(f"{path}.stagger: expected true or false (got {stagger!r})")
    completions = data.get("completions")
    if completions is not None:
        completions = _integer(data, "completions", path, 1, minimum=1)
    policy = data.get("podFailurePolicy")
    period = data.get("readinessPeriodSeconds")
    if period is not None:
        period = _integer(data, "readinessPeriodSeconds", path, 10, minimum=1)
    replicas_key = "parallelism" if kind == "Job" else "replicas"
    return Workload(
        kind=kind,
        name=_string(data, "name", path, ""),
        namespace=_string(data, "namespace", path, "default"),
        replicas=_integer(data, replicas_key, path, 1),
        completions=completions if kind == "Job" else None,
        backoff_limit=_integer(data, "backoffLimit", path, 6),
        cpu_seconds=_number(data, "cpuSeconds", path, podparams.DEFAULT_CPU_SECONDS),
        liveness_seconds=_optional_seconds(data, "livenessSeconds", path, podparams.DEFAULT_LIVENESS_SECONDS),
        run_seconds=_optional_seconds(data, "runSeconds", path, 1.0 if kind == "Job" else None),
        readiness_period=period,
        requests=requests,
        image=_string(data, "image", path, DEFAULT_IMAGE),
        stagger=stagger,
        pod_failure_policy=dict(_mapping(policy, f"{path}.podFailurePolicy")) if policy is not None else None,
        labels=_string_map(data.get("labels"), f"{path}.labels"),
    )


def _parse_stagger(data: Mapping[str, Any]) -> StaggerConfig:
    path = "stagger"
    _allowed(
        data,
        path,
        {"enabled", "hostPort", "maxWait", "policies", "lockdMode", "controller", "controllerReplicas"},
    )
    enabled = data.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ScenarioError(f"{path}.enabled: expected true or false (got {enabled!r})")
    policies = data.get("policies", "")
    if isinstance(policies, Mapping):
        policies = yaml.safe_dump(dict(policies), sort_keys=False)
    if not isinstance(policies, str):
        raise ScenarioError(f"{path}.policies: expected lockd's policy file as a mapping or YAML text")
    port = _integer(data, "hostPort", path, StaggerConfig.host_port)
    if port > 65535:
        raise ScenarioError(f"{path}.hostPort: must be a port number (got {port})")
    mode = data.get("lockdMode", StaggerConfig.lockd_mode)
    if mode not in ("cluster", "standalone"):
        raise ScenarioError(f"{path}.lockdMode: must be cluster or standalone (got {mode!r})")
    try:
        groups = (yaml.safe_load(policies) or {}).get("staggeringPolicies") if policies.strip() else None
    except (yaml.YAMLError, AttributeError):
        groups = None  # lockd and the controller report a bad policy file with the field named
    controller = data.get("controller", bool(groups))
    if not isinstance(controller, bool):
        raise ScenarioError(f"{path}.controller: expected true or false (got {controller!r})")
    if controller and mode != "cluster":
        raise ScenarioError(
            f"{path}.controller: needs lockdMode cluster (lockd asks the controller about pods it sees)"
        )
    return StaggerConfig(
        enabled=enabled,
        host_port=port,
        max_wait=_string(data, "maxWait", path, StaggerConfig.max_wait),
        policies=policies,
        lockd_mode=mode,
        controller=controller,
        controller_replicas=_integer(data, "controllerReplicas", path, 1, minimum=1),
    )


def _parse_model(data: Mapping[str, Any]) -> ModelSettings:
    path = "model"
    _allowed(data, path, {"contentionPenalty", "backoffBaseSeconds", "backoffCapSeconds", "backoffJitter"})
    defaults = ModelSettings()
    try:
        return ModelSettings(
            penalty=_number(data, "contentionPenalty", path, defaults.penalty),
            backoff_base_seconds=_number(data, "backoffBaseSeconds", path, defaults.backoff_base_seconds),
            backoff_cap_seconds=_number(data, "backoffCapSeconds", path, defaults.backoff_cap_seconds),
            backoff_jitter=_number(data, "backoffJitter", path, defaults.backoff_jitter),
        )
    except ValueError as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"{path}: {exc}") from None


def parse_scenario(data: object) -> Scenario:
    root = _mapping(data, "scenario")
    _allowed(
        root, "scenario", {"name", "timeScale", "deadlineSeconds", "nodes", "model", "stagger", "workloads"}
    )
    workloads = root.get("workloads") or []
    if not isinstance(workloads, list) or not workloads:
        raise ScenarioError("workloads: expected a non-empty list")
    parsed = tuple(
        _parse_workload(_mapping(w, f"workloads[{i}]"), f"workloads[{i}]") for i, w in enumerate(workloads)
    )
    seen: set[tuple[str, str, str]] = set()
    for i, w in enumerate(parsed):
        key = (w.kind, w.namespace, w.name)
        if key in seen:
            raise ScenarioError(f"workloads[{i}].name: duplicate {w.kind} {w.namespace}/{w.name}")
        seen.add(key)
    return Scenario(
        name=_string(root, "name", "scenario", "scenario"),
        nodes=_parse_nodes(_mapping(root.get("nodes"), "nodes")),
        workloads=parsed,
        stagger=_parse_stagger(_mapping(root.get("stagger"), "stagger")),
        model=_parse_model(_mapping(root.get("model"), "model")),
        time_scale=_number(root, "timeScale", "scenario", 10.0, exclusive=True),
        deadline_seconds=_number(root, "deadlineSeconds", "scenario", 900.0, exclusive=True),
    )


def load_scenario(path: Path | None = None) -> Scenario:
    """Read a scenario file (the packaged ``herd.yaml`` without a path)."""
    if path is None:
        text = importlib.resources.files("sim.cluster").joinpath("scenarios", DEFAULT_SCENARIO).read_text()
        source = f"sim/cluster/scenarios/{DEFAULT_SCENARIO}"
    else:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
        source = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML: {exc}") from None
    try:
        return parse_scenario(data)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def with_stagger(scenario: Scenario, enabled: bool) -> Scenario:
    return replace(scenario, stagger=replace(scenario.stagger, enabled=enabled))


# ----------------------------------------------------------------------------------------- manifests


def initclient_container(*, host_port: int, max_wait: str) -> Obj:
    """The init container the webhook would inject: the real init client, asking the node's lockd."""

    def field_env(name: str, path: str) -> Obj:
        return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}

    return {
        "name": INITCLIENT_CONTAINER,
        "image": STAGGER_IMAGE,
        "command": ["python", "-m", "initclient"],
        "env": [
            field_env("HOST_IP", "status.hostIP"),
            {"name": "STAGGER_LOCKD_URL", "value": f"http://$(HOST_IP):{host_port}"},
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_UID", "metadata.uid"),
            {"name": "STAGGER_MAX_WAIT", "value": max_wait},
        ],
        "resources": {"requests": {"cpu": "10m", "memory": "24Mi"}},
    }


def _model_annotations(w: Workload) -> dict[str, str]:
    result = {
        podparams.CPU_SECONDS: f"{w.cpu_seconds:g}",
        podparams.LIVENESS_SECONDS: "none" if w.liveness_seconds is None else f"{w.liveness_seconds:g}",
    }
    if w.run_seconds is not None:
        result[podparams.RUN_SECONDS] = f"{w.run_seconds:g}"
    return result


def readiness_probe(period: int) -> Obj:
    """The readiness probe of a simulated pod's container, run every ``period`` simulated seconds.

    Always an ``exec`` probe, never ``httpGet`` or ``tcpSocket``: lockd runs a held pod's own HTTP and TCP
    probes against the pod's IP (``lockd/podprobes.py``), and a simulated pod's IP (198.18.128.0/17) is
    no address anything listens on, so lockd must not try it. lockd never runs an ``exec`` probe (its slot
    then ends at the Ready condition), and the simulated kubelet runs none at all: its start-up model
    says when the probe passes (``sim.cluster.startup.probe_ready_at``).
    """
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"readiness_period must be a whole number of seconds >= 1, got {period!r}")
    return {"exec": {"command": ["true"]}, "periodSeconds": period}


def pod_template(w: Workload, *, stagger: StaggerConfig, names: Names | None = None) -> Obj:
    names = names or Names()
    labels = {**w.labels, "app": w.name}
    container: Obj = {
        "name": "app",
        "image": w.image,
        "resources": {"requests": dict(w.requests)} if w.requests else {},
    }
    if w.readiness_period is not None:
        # An exec probe only: lockd would probe an httpGet/tcpSocket one at the unreachable pod IP.
        container["readinessProbe"] = readiness_probe(w.readiness_period)
    spec: Obj = {
        "containers": [container],
        "restartPolicy": "Never" if w.kind == "Job" else "Always",
        "terminationGracePeriodSeconds": 30,
    }
    if stagger.enabled and w.stagger:
        labels[names.enable_label] = "1"
        if not stagger.controller:  # with the controller, its admission injects the init client
            spec["initContainers"] = [
                initclient_container(host_port=stagger.host_port, max_wait=stagger.max_wait)
            ]
    return {"metadata": {"labels": labels, "annotations": _model_annotations(w)}, "spec": spec}


def workload_manifest(w: Workload, *, stagger: StaggerConfig, names: Names | None = None) -> Obj:
    template = pod_template(w, stagger=stagger, names=names)
    labels = {"app": w.name}
    metadata: Obj = {"name": w.name, "namespace": w.namespace, "labels": labels}
    if w.kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": w.replicas,
                "selector": {"matchLabels": {"app": w.name}},
                "template": template,
            },
        }
    enable = (names or Names()).enable_label
    if template["metadata"]["labels"].get(enable) == "1":
        # The controller's Job webhook selects Jobs by the enable label on the Job itself (evict mode's
        # podFailurePolicy rule); a user labels both, as the README says.
        labels[enable] = "1"
    job_spec: Obj = {
        "parallelism": w.replicas,
        "completions": w.completions if w.completions is not None else w.replicas,
        "backoffLimit": w.backoff_limit,
        "template": template,
    }
    if w.pod_failure_policy is not None:
        job_spec["podFailurePolicy"] = copy.deepcopy(dict(w.pod_failure_policy))
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def expected_pods(scenario: Scenario) -> int:
    """How many pods the workloads want Ready (Deployments) or completed (Jobs) at the end."""
    total = 0
    for w in scenario.workloads:
        total += w.replicas if w.kind == "Deployment" else (w.completions or w.replicas)
    return total
