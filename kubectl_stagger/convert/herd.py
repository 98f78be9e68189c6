"""thundering-herd-scheduler (dbschenker/thundering-herd-scheduler): a kube-scheduler Permit plugin,
`ThunderingHerdScheduling`, whose arguments (pkg/thunderingherdscheduling/config.go) are
`parallelStartingPodsPerNode` or `parallelStartingPodsPerCore` (default 1.0), `timeoutSeconds` (5) and
`maxRetries` (5). Read from a KubeSchedulerConfiguration's `pluginConfig` (its README), a ConfigMap that
holds one (its manifests), its chart's values (`scheduler.pluginConfig`, or `scheduler.profilesOverride`,
which the chart's configmap.yaml uses instead when set), or the arguments alone.

What the plugin does (main.go, pkg/nodestate/state_v2.go): a pod may be bound to a node while the node's
not-Ready pods of every namespace (plus those it bound in the last 5 s) are fewer than the limit; else it
waits timeoutSeconds^2 x attempt, and after maxRetries attempts it is bound anyway (maxRetries 0: at once,
so it holds nothing). In stagger: one node policy for every node with `maxConcurrent`, `countAllStarting`
over every namespace and `countDaemonSets` (the plugin counts DaemonSet pods too), and `maxWait`, the most a
pod waits there before it starts anyway; with maxRetries 0, no throttle at all. The plugin's schedulers
become the chart's `controller.webhook.schedulerNames`, so pods keep naming them.

What the plugin refuses (ParseArguments: a value its decoder cannot take, PerNode and PerCore together)
convert refuses; values it takes that stagger cannot (a limit below 1) are carried over as near as stagger
goes, and said."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubectl_stagger.convert.common import (
    ChartValue,
    Conversion,
    Input,
    InvalidInput,
    go_get,
    policy_name,
    unknown_keys,
    yaml_documents,
)
from stagger.durations import format_duration
from stagger.policy import MaxConcurrent, NodePolicy, ThrottleConfig

__all__ = ["convert", "is_herd"]

logger = logging.getLogger(__name__)

PLUGIN = "ThunderingHerdScheduling"
_ARGS = ("parallelStartingPodsPerNode", "parallelStartingPodsPerCore", "timeoutSeconds", "maxRetries")
_DEFAULT_PER_CORE = 1.0
_DEFAULT_TIMEOUT = 5
_DEFAULT_RETRIES = 5
_DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class _Found:
    """One set of plugin arguments, where it was found and the scheduler (profile) it configures."""

    args: Mapping[str, Any]
    where: str
    scheduler: str = "thundering-herd-scheduler"


def _from_scheduler_config(config: Mapping[str, Any], *, where: str) -> Iterator[_Found]:
    """The plugin's args in each profile of a KubeSchedulerConfiguration (or a list of profiles)."""
    profiles = config.get("profiles")
    for index, profile in enumerate(profiles if isinstance(profiles, list) else []):
        if not isinstance(profile, Mapping):
            continue
        scheduler = profile.get("schedulerName") or _DEFAULT_SCHEDULER
        for entry in profile.get("pluginConfig") or []:
            if isinstance(entry, Mapping) and entry.get("name") == PLUGIN:
                args = entry.get("args") or {}
                if isinstance(args, Mapping):
                    yield _Found(args, f"{where}profiles[{index}]", str(scheduler))


def _found_in(document: object, *, where: str) -> Iterator[_Found]:
    if not isinstance(document, Mapping):
        return
    if document.get("kind") == "KubeSchedulerConfiguration":
        yield from _from_scheduler_config(document, where=where)
        return
    if document.get("kind") == "ConfigMap" and isinstance(document.get("data"), Mapping):
        for key, text in document["data"].items():
            for inner in (yaml_documents(text) or []) if isinstance(text, str) else []:
                yield from _found_in(inner, where=f"{where}data[{key!r}]: ")
        return
    scheduler = document.get("scheduler")
    if isinstance(scheduler, Mapping) and ("pluginConfig" in scheduler or "profilesOverride" in scheduler):
        yield from _from_chart_values(scheduler, where=f"{where}scheduler.")
        return
    if unknown_keys(document, _ARGS) != list(map(str, document)):
        yield _Found(document, where or "the plugin's arguments")


def _from_chart_values(scheduler: Mapping[str, Any], *, where: str) -> Iterator[_Found]:
    """The chart's configmap.yaml: its profilesOverride when set, else one profile from pluginConfig, which
    writes parallelStartingPodsPerNode when set, else parallelStartingPodsPerCore when set."""
    if scheduler.get("profilesOverride"):
        yield from _from_scheduler_config(
            {"profiles": scheduler["profilesOverride"]}, where=f"{where}profilesOverride: "
        )
        return
    values = scheduler.get("pluginConfig")
    if not isinstance(values, Mapping):
        return
    args: dict[str, Any] = {}
    if values.get("parallelStartingPodsPerNode"):
        args["parallelStartingPodsPerNode"] = values["parallelStartingPodsPerNode"]
    elif values.get("parallelStartingPodsPerCore"):
        args["parallelStartingPodsPerCore"] = values["parallelStartingPodsPerCore"]
    for key in ("timeoutSeconds", "maxRetries"):
        if key in values:
            args[key] = values[key]
    yield _Found(args, f"{where}pluginConfig")


def _all_found(inputs: Sequence[Input]) -> list[tuple[Input, _Found]]:
    return [
        (each, found)
        for each in inputs
        for document in yaml_documents(each.text) or []
        for found in _found_in(document, where="")
    ]


def is_herd(documents: Sequence[Any]) -> bool:
    return any(True for document in documents for _ in _found_in(document, where=""))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(args: Mapping[str, Any], field: str, *, where: str, errors: list[str]) -> int | None:
    """A Go *int as encoding/json fills it: a whole number (a YAML 2.0 is the JSON 2), negative too; anything
    else makes the plugin's ParseArguments fail, and the scheduler does not start."""
    value = go_get(args, field)
    if value is None:
        return None
    if not _number(value) or not float(value).is_integer():
        errors.append(
            f"{where}.{field}: not a whole number (got {value!r}): the plugin refuses its arguments"
        )
        return None
    return int(value)


def _per_core(args: Mapping[str, Any], *, where: str, errors: list[str]) -> float | None:
    value = go_get(args, "parallelStartingPodsPerCore")
    if value is None:
        return None
    if not _number(value):
        errors.append(
            f"{where}.parallelStartingPodsPerCore: not a number (got {value!r}): the plugin refuses its arguments"
        )
        return None
    return float(value)


def _limit(
    per_node: int | None, per_core: float | None, *, where: str, not_carried: list[str]
) -> MaxConcurrent:
    """The plugin's limit of not-Ready pods on a node (nodestate/state_v2.go NotReadyPodsAllowedInParallel)."""
    if per_node is not None:
        if per_node >= 1:
            return MaxConcurrent(value=per_node)
        not_carried.append(
            f"{where}.parallelStartingPodsPerNode: {per_node} lets no pod through at once: the plugin makes every "
            "pod wait all its retries before binding it; stagger needs at least 1: maxConcurrent.value 1 here"
        )
        return MaxConcurrent(value=1)
    per_core = per_core if per_core is not None else _DEFAULT_PER_CORE
    if per_core <= 0:
        # calculateParallelStartingPodsPerCore: below 1 is 1 ("to avoid starvation").
        not_carried.append(
            f"{where}.parallelStartingPodsPerCore: {per_core:g} is 1 pod a node to the plugin (at least 1): "
            "maxConcurrent.value 1 here"
        )
        return MaxConcurrent(value=1)
    not_carried.append(
        f"{where}: parallelStartingPodsPerCore {per_core:g} is rounded down by the plugin (allocatable CPU x "
        f"{per_core:g}, at least 1) and up by stagger (the node's cores x {per_core:g}, at least 1); set "
        "maxConcurrent.value per node pool for an exact limit"
    )
    return MaxConcurrent(per_core=per_core)


def _max_wait(timeout: int, retries: int, *, where: str, notes: list[str], not_carried: list[str]) -> float:
    """The most the plugin holds a pod: attempt n waits timeoutSeconds^2 x n, and once its counter passes
    maxRetries it is bound anyway."""
    waited = timeout**2 * retries * (retries + 1) // 2
    if waited > 0:
        notes.append(
            f"{where}: maxWait {format_duration(waited)}: the plugin binds a pod anyway after maxRetries {retries} "
            f"waits of timeoutSeconds^2 x attempt ({timeout**2} s, then {2 * timeout**2} s, ...); stagger queues "
            "waiting pods first come, first served and lets each go the moment there is room"
        )
        return float(waited)
    not_carried.append(
        f"{where}: timeoutSeconds 0: each of the plugin's waits is 0 s, after which the scheduler tries the pod "
        f"again (its own backoff) up to maxRetries {retries} times; stagger's maxWait stays "
        f"{format_duration(NodePolicy.max_wait)}"
    )
    return NodePolicy.max_wait


def _node_policy(found: _Found, *, source: str) -> tuple[NodePolicy, list[str], list[str]]:
    """The node policy for one set of arguments, what could not be carried over, and notes."""
    where = f"{source}: {found.where}"
    errors: list[str] = []
    per_node = _whole(found.args, "parallelStartingPodsPerNode", where=where, errors=errors)
    per_core = _per_core(found.args, where=where, errors=errors)
    timeout = _whole(found.args, "timeoutSeconds", where=where, errors=errors)
    retries = _whole(found.args, "maxRetries", where=where, errors=errors)
    if per_node is not None and per_core is not None:
        errors.append(
            f"{where}: cannot specify parallelStartingPodsPerNode and parallelStartingPodsPerCore at the same "
            "time (the plugin refuses to start)"
        )
    if errors:
        raise InvalidInput(errors)
    not_carried = [
        f"{where}.{extra}: not an argument of the plugin (it ignores it)"
        for extra in unknown_keys(found.args, _ARGS)
    ]
    notes: list[str] = []
    timeout = abs(_DEFAULT_TIMEOUT if timeout is None else timeout)  # squared by the plugin
    retries = _DEFAULT_RETRIES if retries is None else retries
    name = policy_name(found.scheduler, fallback="thundering-herd-scheduler")
    if retries <= 0:
        # PermitInternal: the pod's counter, 1 at its first wait, is past maxRetries: bound at once.
        notes.append(
            f"{where}: maxRetries {retries}: the plugin binds every pod at its first Permit (its retry counter, 1, "
            "is already past it), so it holds nothing: the node policy throttles nothing either"
        )
        return _policy(name=name, limit=None, max_wait=NodePolicy.max_wait), not_carried, notes
    limit = _limit(per_node, per_core, where=where, not_carried=not_carried)
    max_wait = _max_wait(timeout, retries, where=where, notes=notes, not_carried=not_carried)
    not_carried.append(
        f"{where}: a pod that never becomes Ready counts for the plugin until it is; a stagger slot ends at "
        "holdTimeout (2m) at the latest"
    )
    notes.append(
        f"{where}: countAllStarting and countDaemonSets: the plugin counts every not-Ready pod of the node, of "
        "every namespace, DaemonSet pods too"
    )
    return _policy(name=name, limit=limit, max_wait=max_wait), not_carried, notes


def _policy(*, name: str, limit: MaxConcurrent | None, max_wait: float) -> NodePolicy:
    return NodePolicy(
        name=name,
        throttle=ThrottleConfig(max_concurrent=limit),
        count_all_starting=True,
        count_daemonsets=True,
        exclude_namespaces=(),  # the plugin counts the not-Ready pods of every namespace
        max_wait=max_wait,
    )


def _opt_in(found: Sequence[_Found]) -> tuple[list[ChartValue], list[str]]:
    """controller.webhook.schedulerNames: the plugin's schedulers, so that their pods opt in as they are;
    a profile of the default scheduler cannot be one (every pod would be opted in)."""
    names = list(dict.fromkeys(each.scheduler for each in found))
    custom = [each for each in names if each != _DEFAULT_SCHEDULER]
    notes = []
    if custom:
        notes.append(
            f"pods naming the scheduler {', '.join(custom)} are opted in by stagger's webhook and given "
            f"{_DEFAULT_SCHEDULER} (controller.webhook.schedulerNames; Kubernetes 1.28 or later); stagger holds "
            "them on their node, in their init container, where the plugin held them before binding"
        )
    if _DEFAULT_SCHEDULER in names:
        notes.append(
            f"the plugin ran in the {_DEFAULT_SCHEDULER} profile, so it saw every pod: stagger throttles the "
            'pods opted in: label each namespace <prefix>/enable: "1" (controller.webhook.namespaceOptIn)'
        )
    values = []
    if custom:
        values.append(
            ChartValue(
                "controller.webhook.schedulerNames",
                custom,
                "pods that name it are opted in and given the default scheduler, their manifests unchanged",
            )
        )
    return values, notes


_NO_LONGER_NEEDED = (
    "thundering-herd-scheduler's Deployment, its ConfigMap (the KubeSchedulerConfiguration), ServiceAccount, "
    "RBAC and PodDisruptionBudget (helm uninstall <release>): once stagger's webhook gives their pods the "
    "default scheduler, nothing asks for it",
)


def convert(inputs: Sequence[Input]) -> Conversion:
    found = _all_found(inputs)
    if not found:
        return Conversion()
    (first_input, first), *others = found
    policy, not_carried, notes = _node_policy(first, source=first_input.source)
    errors: list[str] = []
    for each_input, other in others:
        try:
            _node_policy(other, source=each_input.source)  # refused arguments are errors wherever they are
        except InvalidInput as error:
            errors += error.errors
        not_carried.append(
            f"{each_input.source}: {other.where}: another scheduler profile ({other.scheduler}): a node policy "
            f"holds every opted-in pod of a node alike, so only the first ({first.scheduler}) is carried over"
        )
    if errors:
        raise InvalidInput(errors)
    values, opt_in = _opt_in([each for _, each in found])
    return Conversion(
        node_policies=(policy,),
        not_carried=tuple(not_carried),
        notes=(*notes, *opt_in),
        chart_values=tuple(values),
        no_longer_needed=_NO_LONGER_NEEDED,
    )
