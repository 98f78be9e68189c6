"""pod-pacemaker (woehrl01/pod-pacemaker): `PacemakerConfig` objects (apiVersion woehrl.net/v1alpha;
spec.nodeSelector, priority and throttleConfig: rateLimit, maxConcurrent, cpu, io, loadAvg, its numbers
written as strings where its CRD takes strings). stagger's policy loader reads them itself, as node
policies (`stagger.policy.parse_policy_text`, which accepts files of PacemakerConfig documents and says in
`PolicyFile.notes` what it read in another spelling): this is that one reader, not a second one, so what
`convert` prints is what lockd would do with the same file.

Before it: what the API server refuses, convert refuses too. The CRD (charts/pod-pacemaker/crds/
woehrl.net_pacemakerconfigs.yaml) requires spec.nodeSelector, spec.priority and spec.throttleConfig once
`spec` is given (a `spec: {}`, as a YAML whose indentation was lost reads, is refused); a `spec` left out or
null (the API server prunes a null) is an object that selects every node and throttles nothing, in
pod-pacemaker and here alike. An object name that is no DNS-1123 label (pod-pacemaker takes any object
name) is made one, and said.

After it: nodes that no PacemakerConfig selects are not throttled by pod-pacemaker (cmd/node-daemon/
throttlerconfigurator.go: "No matching config found", no throttlers) but get stagger's built-in node policy;
convert says which when no converted policy selects every node."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import yaml

from kubectl_stagger.convert.common import (
    ChartValue,
    Conversion,
    Input,
    InvalidInput,
    go_get,
    policy_name,
    unique_name,
    yaml_documents,
)
from stagger import policy
from stagger.objectnames import is_dns1123_label
from stagger.policy.pacemaker import API_VERSION, KIND, LIST_KINDS

__all__ = ["convert", "is_pacemaker"]

logger = logging.getLogger(__name__)

# The CRD's `required` of spec (api/v1alpha/pacemakerconfig.go: no omitempty, no Optional marker).
_REQUIRED = ("nodeSelector", "priority", "throttleConfig")


def _is_config(document: object) -> bool:
    # Its kind, or its API group alone: the reader then says what else is wrong with it.
    return isinstance(document, Mapping) and (
        document.get("kind") == KIND
        or str(document.get("apiVersion", "")).startswith(API_VERSION.split("/")[0] + "/")
    )


def is_pacemaker(documents: Sequence[Any]) -> bool:
    """Any document a PacemakerConfig, or a List of them (`kubectl get pacemakerconfigs -o yaml`)."""
    return any(
        _is_config(each)
        or (
            isinstance(each, Mapping)
            and each.get("kind") in LIST_KINDS
            and isinstance(each.get("items"), list)
            and any(_is_config(item) for item in each["items"])
        )
        for each in documents
    )


def _configs(documents: Sequence[Any]) -> Iterator[tuple[str, Any]]:
    """Each PacemakerConfig of the documents (those of a List too), with how messages name it."""
    for number, document in enumerate(documents, start=1):
        where = f"document {number}" if len(documents) > 1 else ""
        if not isinstance(document, Mapping):
            continue
        items = document.get("items") if document.get("kind") in LIST_KINDS else None
        if isinstance(items, list):
            for index, item in enumerate(items):
                if isinstance(item, Mapping) and item.get("kind") == KIND:
                    yield f"{where}{' ' if where else ''}items[{index}]", item
        elif document.get("kind") == KIND:
            yield where, document


def _shown(config: Mapping[Any, Any], where: str) -> str:
    metadata = config.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    label = f"{KIND} {name!r}" if isinstance(name, str) else KIND
    return f"{where} ({label})" if where else label


def _refused(source: str, configs: Sequence[tuple[str, Any]]) -> list[str]:
    """What the API server refuses of these PacemakerConfigs (the CRD's required fields of spec)."""
    errors = []
    for where, config in configs:
        spec = go_get(config, "spec")
        if not isinstance(spec, Mapping):
            continue  # absent or null: an object without spec; anything else the reader refuses
        missing = [key for key in _REQUIRED if go_get(spec, key) is None]
        if not missing:
            continue
        hint = (
            " (an empty spec: was the YAML's indentation lost, copied from a web page?)" if not spec else ""
        )
        errors.append(
            f"{source}: {_shown(config, where)}: spec.{', spec.'.join(missing)}: required by pod-pacemaker's "
            f"CRD: the API server refuses the object{hint}"
        )
    return errors


def _renamed(configs: Sequence[tuple[str, Any]], *, source: str) -> list[str]:
    """Each name that is no DNS-1123 label made one, in place (pod-pacemaker takes any object name; a
    stagger node policy's is a label); what was renamed."""
    taken = {
        name
        for _, config in configs
        if isinstance(config.get("metadata"), Mapping)
        and isinstance(name := config["metadata"].get("name"), str)
        and is_dns1123_label(name)
    }
    notes = []
    for index, (where, config) in enumerate(configs):
        metadata = config.get("metadata")
        name = metadata.get("name") if isinstance(metadata, MutableMapping) else None
        if isinstance(name, str) and not is_dns1123_label(name):
            label = unique_name(policy_name(name, fallback=f"pacemaker-{index}"), taken=taken)
            assert isinstance(metadata, MutableMapping)  # for mypy: read above
            metadata["name"] = label
            notes.append(
                f"{source}: {_shown(config, where)}: read as the node policy {label!r} (its name {name!r} "
                "is no DNS-1123 label, as a stagger node policy's must be)"
            )
    return notes


def _read(each: Input) -> tuple[policy.PolicyFile, list[str]]:
    """The file's node policies by stagger's own reader, the CRD's refusals first, names made labels."""
    documents = yaml_documents(each.text) or []
    configs = list(_configs(documents))
    if errors := _refused(each.source, configs):
        raise InvalidInput(errors)
    notes = _renamed(configs, source=each.source)
    # Unchanged, the text itself (its lines in the reader's errors); renamed, the documents written again.
    text = yaml.safe_dump_all(documents, sort_keys=False) if notes else each.text
    try:
        loaded = policy.parse_policy_text(text, source=each.source)
    except policy.PolicyError as error:
        # The loader's errors name a path in the file; said here with the file, as several may be given.
        raise InvalidInput(
            [
                line if line.startswith(each.source) else f"{each.source}: {line}"
                for line in error.errors or (str(error),)
            ]
        ) from error
    for where, config in configs:
        if go_get(config, "spec") is None:
            notes.append(
                f"{each.source}: {_shown(config, where)}: no spec: pod-pacemaker reads it as selecting every "
                "node and throttling nothing; so does its node policy here"
            )
    return loaded, notes + [f"{each.source}: {note}" for note in loaded.notes]


def _unselected(nodes: Sequence[policy.NodePolicy]) -> list[str]:
    """Which nodes no node policy selects, when none selects every node: pod-pacemaker throttles nothing
    there (no matching config), stagger applies its built-in node policy."""
    if not nodes or any(each.node_selector.is_empty for each in nodes):
        return []
    selectors = "; ".join(f"{each.node_selector.to_query()} ({each.name})" for each in nodes)
    builtin = policy.DEFAULT_NODE_POLICY.throttle
    assert builtin.max_concurrent is not None  # for mypy: the built-in policy has one
    return [
        f"nodes none of these select (matching none of: {selectors}) get stagger's built-in node policy "
        f"(cpu maxLoad {builtin.cpu_max_load:g}, maxConcurrent perCore {builtin.max_concurrent.per_core:g}), "
        "where pod-pacemaker throttled nothing (no matching config); to keep them unthrottled add a node "
        "policy with nodeSelector: {} and no throttleConfig"
    ]


_CHART_VALUES = (
    ChartValue(
        "lockd.pacemakerConfigs",
        True,
        "lockd reads the PacemakerConfig objects from the API server (and any change at once), as "
        "pod-pacemaker's node daemon did",
        when="to keep the PacemakerConfig objects as they are instead of this file",
    ),
    ChartValue(
        "controller.webhook.namespaceOptIn",
        True,
        "pod-pacemaker throttled every pod of a node (but kube-system's, DaemonSets' and those annotated "
        "pod-pacemaker/skip); stagger throttles the pods opted in: label each namespace "
        "(kubectl label namespace NS <prefix>/enable=1, prefix v1.stagger.technicianted by default) to opt in "
        'all its pods, and label a pod <prefix>/enable: "0" to keep it out, as pod-pacemaker/skip did',
    ),
)

_NO_LONGER_NEEDED = (
    "pod-pacemaker's DaemonSet pod-pacemaker (node-daemon and its init-cni), ServiceAccount and RBAC (helm "
    "uninstall pod-pacemaker): first set its cni.disableThrottle: true (helm upgrade), or delete "
    "/etc/cni/net.d/00-merged-pod-pacemaker.conflist on every node, since its chained CNI plugin stays in the "
    "node's CNI configuration after the uninstall (its README)",
    "the pod-pacemaker taint (its chart's taintToRemove) in your node pools: its node daemon took it off each "
    "new node, and nothing will now",
    "the CRD pacemakerconfigs.woehrl.net and its PacemakerConfig objects, unless lockd.pacemakerConfigs reads "
    "them",
)


def convert(inputs: Sequence[Input]) -> Conversion:
    errors: list[str] = []
    staggering: list[policy.StaggeringPolicy] = []
    nodes: list[policy.NodePolicy] = []
    notes: list[str] = []
    for each in inputs:
        try:
            loaded, said = _read(each)
        except InvalidInput as error:
            errors += error.errors
            continue
        staggering += loaded.staggering_policies
        nodes += loaded.node_policies
        notes += said
    if errors:
        raise InvalidInput(errors)
    return Conversion(
        staggering_policies=tuple(staggering),
        node_policies=tuple(nodes),
        notes=tuple(notes),
        not_carried=tuple(_unselected(nodes)),
        chart_values=_CHART_VALUES,
        no_longer_needed=_NO_LONGER_NEEDED,
    )
