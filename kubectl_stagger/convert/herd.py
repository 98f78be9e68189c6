"""thundering-herd-scheduler (dbschenker/thundering-herd-scheduler): a kube-scheduler Permit plugin,
`ThunderingHerdScheduling`, whose arguments (pkg/thunderingherdscheduling/config.go) are
`parallelStartingPodsPerNode` or `parallelStartingPodsPerCore` (default 1.0), `timeoutSeconds` (5) and
`maxRetries` (5). Read from a KubeSchedulerConfiguration's `pluginConfig` (its README), a ConfigMap that
holds one (its manifests), its chart's values (`scheduler.pluginConfig`, or `scheduler.profilesOverride`,
which the chart's configmap.yaml uses instead when set), or the arguments alone.

What the plugin does (main.go, pkg/nodestate/state_v2.go): a pod may be bound to a node while the node's
not-Ready pods of every namespace (plus those it bound in the last 5 s) are fewer than the limit; else it
waits timeoutSeconds^2 x attempt, and after maxRetries attempts it is bound anyway. In stagger: one node
policy for every node with `maxConcurrent`, `countAllStarting: true` over every namespace, and `maxWait`,
the most a pod waits there before it starts anyway."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubectl_stagger.convert.common import (
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
        scheduler = profile.get("schedulerName") or "default-scheduler"
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


def _whole(args: Mapping[str, Any], field: str, *, where: str, errors: list[str]) -> int | None:
    value = go_get(args, field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(f"{where}.{field}: must be a whole number, not negative (got {value!r})")
        return None
    return value


def _per_core(args: Mapping[str, Any], *, where: str, errors: list[str]) -> float | None:
    value = go_get(args, "parallelStartingPodsPerCore")
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        errors.append(f"{where}.parallelStartingPodsPerCore: must be a number above 0 (got {value!r})")
        return None
    return float(value)


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
    if per_node == 0:
        errors.append(
            f"{where}.parallelStartingPodsPerNode: 0 never lets a pod start; stagger needs at least 1"
        )
    if errors:
        raise InvalidInput(errors)
    not_carried = [
        f"{where}.{extra}: not an argument of the plugin (it ignores it)"
        for extra in unknown_keys(found.args, _ARGS)
    ]
    notes: list[str] = []
    if per_node is not None:
        limit = MaxConcurrent(value=per_node)
    else:
        per_core = per_core if per_core is not None else _DEFAULT_PER_CORE
        limit = MaxConcurrent(per_core=per_core)
        not_carried.append(
            f"{where}: parallelStartingPodsPerCore {per_core:g} is rounded down by the plugin (allocatable CPU x "
            f"{per_core:g}, at least 1) and up by stagger (the node's cores x {per_core:g}, at least 1); set "
            "maxConcurrent.value per node pool for an exact limit"
        )
    timeout = _DEFAULT_TIMEOUT if timeout is None else timeout
    retries = _DEFAULT_RETRIES if retries is None else retries
    # Attempt n waits timeoutSeconds^2 x n; after maxRetries of them the pod is bound anyway.
    waited = timeout**2 * retries * (retries + 1) // 2
    policy = NodePolicy(
        name=policy_name(found.scheduler, fallback="thundering-herd-scheduler"),
        throttle=ThrottleConfig(max_concurrent=limit),
        count_all_starting=True,
        exclude_namespaces=(),  # the plugin counts the not-Ready pods of every namespace
        max_wait=float(waited) if waited > 0 else NodePolicy.max_wait,
    )
    if waited > 0:
        notes.append(
            f"{where}: maxWait {format_duration(waited)}: the plugin binds a pod anyway after maxRetries {retries} "
            f"waits of timeoutSeconds^2 x attempt ({timeout**2} s, then {2 * timeout**2} s, ...); stagger queues "
            "waiting pods first come, first served and lets each go the moment there is room"
        )
    else:
        not_carried.append(
            f"{where}: timeoutSeconds or maxRetries 0: the plugin never holds a pod; stagger's maxWait stays 10m"
        )
    not_carried += [
        f"{where}: the plugin counts a not-Ready DaemonSet pod too; stagger's countAllStarting never does",
        f"{where}: a pod that never becomes Ready counts for the plugin until it is; a stagger slot ends at "
        "holdTimeout (2m) at the latest",
    ]
    notes.append(
        f'{where}: pods opt in with the label v1.stagger.technicianted/enable: "1" instead of schedulerName: '
        f"{found.scheduler} (they keep the default scheduler); stagger holds them on their node, in their init "
        "container, where the plugin held them before binding"
    )
    return policy, not_carried, notes


def convert(inputs: Sequence[Input]) -> Conversion:
    found = _all_found(inputs)
    if not found:
        return Conversion()
    (first_input, first), *others = found
    policy, not_carried, notes = _node_policy(first, source=first_input.source)
    for each_input, other in others:
        _node_policy(other, source=each_input.source)  # refused arguments are errors wherever they are
        not_carried.append(
            f"{each_input.source}: {other.where}: another scheduler profile ({other.scheduler}): a node policy "
            f"holds every opted-in pod of a node alike, so only the first ({first.scheduler}) is carried over"
        )
    return Conversion(node_policies=(policy,), not_carried=tuple(not_carried), notes=tuple(notes))
