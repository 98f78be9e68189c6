"""pod-pacemaker's `PacemakerConfig` (github.com/woehrl01/pod-pacemaker, api/v1alpha/pacemakerconfig.go and its
CRD charts/pod-pacemaker/crds/woehrl.net_pacemakerconfigs.yaml) read as a stagger node policy: a document of a
policy file may be one, or a List of them as `kubectl get pacemakerconfigs -o yaml` prints it.

`metadata.name` is the node policy's name (it must be a DNS-1123 label), `spec.nodeSelector` a plain label
map, `spec.priority`, and `spec.throttleConfig` the same five throttles as stagger's own `throttleConfig`.
Numbers written as strings are read where the CRD takes strings (maxLoad, incrementBy, maxConcurrent.perCore,
with its pattern); every other value has stagger's type and rules. What `kubectl get -o yaml` adds
(metadata's other fields, `status`) is read and ignored; any other unknown key is an error, as in stagger's
own format. Every node policy field a PacemakerConfig does not have keeps stagger's default."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stagger.policy.model import NodePolicy
from stagger.policy.rules import (
    DNS_LABEL_SPELLED,
    Findings,
    Key,
    Rule,
    anything,
    dns_label_check,
    error,
    integer,
    join,
    lookup,
    mapping,
    one_of,
)
from stagger.policy.schema import throttle_config
from stagger.selectors import LabelSelector, label_key_problem, label_value_problem

__all__ = ["API_VERSION", "KIND", "LIST_KINDS", "Read", "is_kubernetes_object", "read_kubernetes_document"]

API_VERSION = "woehrl.net/v1alpha"
KIND = "PacemakerConfig"
# `kubectl get -o yaml` prints a v1 List; the API itself answers a PacemakerConfigList.
LIST_KINDS = {"List": "v1", "PacemakerConfigList": API_VERSION}

# ObjectMeta's fields besides `name`: what the API server adds (`kubectl get -o yaml`), nothing stagger reads.
_IGNORED_METADATA = (
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


@dataclass(frozen=True)
class Read:
    """A node policy read from a PacemakerConfig, and the path of its name (for a name used twice)."""

    where: str
    policy: NodePolicy


def is_kubernetes_object(document: Mapping[Any, Any]) -> bool:
    """A document with a kind or an apiVersion: a Kubernetes object, not stagger's own format."""
    return lookup(document, "kind") is not None or lookup(document, "apiVersion") is not None


# A PacemakerConfig's name may be any object name; it becomes a node policy's, which must be a DNS-1123 label.
_check_policy_name = dns_label_check(
    f"cannot be a stagger node policy name: must be a DNS-1123 label ({DNS_LABEL_SPELLED})"
)


def _label_path(path: str, key: object) -> str:
    return f"{path}[{json.dumps(key) if isinstance(key, str) else repr(key)}]"


def _check_label_map(value: object, path: str, found: Findings) -> Any:
    """A plain map of labels (the CRD's `map[string]string`): no matchLabels or matchExpressions form."""
    if not isinstance(value, Mapping):
        return error(found, path, "must be a map of labels", value)
    before = len(found.errors)
    for key, label in value.items():
        if problem := label_key_problem(key):
            error(found, path, problem, key)
        elif problem := label_value_problem(label):
            error(found, _label_path(path, key), problem, label)
    return LabelSelector.from_labels(value) if len(found.errors) == before else None


_METADATA = mapping(
    [
        Key("name", "name", Rule(_check_policy_name, {"type": "string"}), required=True),
        *(Key(key, key, anything) for key in _IGNORED_METADATA),
    ],
    lambda *, name, **_ignored: name,
)

_SPEC = mapping(
    [
        Key("nodeSelector", "node_selector", Rule(_check_label_map, {"type": "object"})),
        Key("priority", "priority", integer()),
        Key("throttleConfig", "throttle", throttle_config(text=True)),
    ],
    dict,
)


def _node_policy(*, name: str, spec: Mapping[str, Any] | None = None, **_kind_and_status: Any) -> NodePolicy:
    return NodePolicy(name=name, **(spec or {}))


_PACEMAKER_CONFIG = mapping(
    [
        Key("apiVersion", "api_version", one_of(API_VERSION), required=True),
        Key("kind", "kind", one_of(KIND), required=True),
        Key("metadata", "name", _METADATA, required=True),
        Key("spec", "spec", _SPEC),
        Key("status", "status", anything),
    ],
    _node_policy,
)


def _label(document: Mapping[Any, Any], where: str) -> str:
    """How errors and notes name a PacemakerConfig: `documents[1] (PacemakerConfig "x")`."""
    metadata = lookup(document, "metadata")
    name = lookup(metadata, "name") if isinstance(metadata, Mapping) else None
    shown = f"{KIND} {json.dumps(name[:80], ensure_ascii=False)}" if isinstance(name, str) else KIND
    return f"{where} ({shown})" if where else shown


def _read_config(document: Mapping[Any, Any], *, where: str, found: Findings) -> Read | None:
    path = _label(document, where)
    node_policy: NodePolicy | None = _PACEMAKER_CONFIG(document, path, found)
    if node_policy is None:
        return None
    found.notes.append(f'{path}: read as node policy "{node_policy.name}"')
    return Read(where=join(path, "metadata.name"), policy=node_policy)


def _check_items(value: object, path: str, found: Findings) -> Any:
    if not isinstance(value, list):
        return error(found, path, f"must be a list of {KIND}s", value)
    read: list[Read] = []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(item, Mapping) or lookup(item, "kind") != KIND:
            kind = lookup(item, "kind") if isinstance(item, Mapping) else item
            error(
                found, join(where, "kind") if isinstance(item, Mapping) else where, f"must be a {KIND}", kind
            )
        elif config := _read_config(item, where=where, found=found):
            read.append(config)
    return tuple(read)


_LIST = mapping(
    [
        # Which apiVersion depends on the kind: read_kubernetes_document checks the two together.
        Key("apiVersion", "api_version", anything, required=True),
        Key("kind", "kind", one_of(*LIST_KINDS), required=True),
        Key("metadata", "metadata", anything),
        Key("items", "items", Rule(_check_items, {"type": "array"})),
    ],
    lambda *, items=(), **_ignored: items,
)


def read_kubernetes_document(document: Mapping[Any, Any], *, where: str, found: Findings) -> tuple[Read, ...]:
    """A PacemakerConfig, or a List of them, as node policies; errors and notes (one for each PacemakerConfig
    read) go to `found`, their paths under `where` ("" for the only document of a file)."""
    kind = lookup(document, "kind")
    if kind in LIST_KINDS:
        version = lookup(document, "apiVersion")
        if version is not None and version != LIST_KINDS[kind]:
            error(found, join(where, "apiVersion"), f"must be {LIST_KINDS[kind]} for a {kind}", version)
        items: tuple[Read, ...] | None = _LIST(document, where, found)
        return items or ()
    if kind == KIND:
        config = _read_config(document, where=where, found=found)
        return (config,) if config else ()
    reason = f"must be {KIND} (apiVersion {API_VERSION}) or a List of them"
    error(found, join(where, "kind"), reason, kind)
    return ()
