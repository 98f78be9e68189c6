"""The DaemonSet controller's decisions: one pod per eligible node, pinned to it for the scheduler."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from sim.cluster.kubernetes.placement import NodeInfo, matches_node_affinity, node_info, tolerates
from sim.cluster.kubernetes.workloads.actions import (
    Action,
    Create,
    controlled_by,
    delete_pods,
    deletion_rank,
    is_available,
    pod_from_template,
    status_patch,
)
from sim.cluster.objects import is_terminating, meta, namespace_of, node_name_of
from stagger.daemonplacement import DAEMON_TOLERATIONS
from stagger.kube import DAEMONSETS, PODS
from stagger.objects import Obj
from stagger.podstate import is_pod_ready, pod_phase


def daemon_pod_target(pod: Mapping[str, Any]) -> str:
    """The node a DaemonSet pod is for: its nodeName, or the node its affinity pins it to."""
    if node_name_of(pod):
        return node_name_of(pod)
    terms = (
        (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for req in term.get("matchFields") or []:
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and req.get("values"):
                return str(req["values"][0])
    return ""


def _daemon_template_pod(ds: Mapping[str, Any]) -> Obj:
    spec = copy.deepcopy(((ds.get("spec") or {}).get("template") or {}).get("spec") or {})
    tolerations = list(spec.get("tolerations") or [])
    # The tolerations the DaemonSet controller adds: the list the product reads too. The one for host
    # network pods (stagger.daemonplacement.HOST_NETWORK_TOLERATION) is left out: this controller does not model it.
    for tol in DAEMON_TOLERATIONS:
        if tol not in tolerations:
            tolerations.append(tol)
    spec["tolerations"] = tolerations
    return {"spec": spec}


def daemon_should_run(ds: Mapping[str, Any], node: NodeInfo) -> bool:
    """The template's node selector / required affinity match and its tolerations cover the taints."""
    pod = _daemon_template_pod(ds)
    tolerations = pod["spec"]["tolerations"]
    if any(
        t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t) for t in node.taints
    ):
        return False
    return matches_node_affinity(pod, node)


def reconcile_daemonset(
    ds: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: dt.datetime,
) -> list[Action]:
    """One pod per eligible node, pinned with a ``metadata.name`` node affinity for the scheduler."""
    spec = ds.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    owned = controlled_by(pods, ds)
    infos = {info.name: info for info in (node_info(n) for n in nodes)}
    eligible = sorted(name for name, info in infos.items() if daemon_should_run(ds, info))
    by_node: dict[str, list[Obj]] = {}
    for pod in owned:
        if not is_terminating(pod):
            by_node.setdefault(daemon_pod_target(pod), []).append(pod)
    actions: list[Action] = []
    deletable = not is_terminating(ds)
    for node_name in eligible:
        node_pods = by_node.get(node_name, [])
        failed = [p for p in node_pods if pod_phase(p) == "Failed"]
        live = [p for p in node_pods if pod_phase(p) != "Failed"]
        actions += delete_pods(failed)
        if not live and deletable:
            body = pod_from_template(spec.get("template") or {}, owner=ds, owner_resource=DAEMONSETS)
            body["spec"]["tolerations"] = _daemon_template_pod(ds)["spec"]["tolerations"]
            body["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node_name]}
                                ]
                            }
                        ]
                    }
                }
            }
            actions.append(Create(PODS, namespace_of(ds), body))
        actions += delete_pods(sorted(live, key=deletion_rank)[: max(0, len(live) - 1)])
    misscheduled = [p for target, ps in by_node.items() if target not in eligible for p in ps]
    actions += delete_pods(misscheduled)
    by_node = {n: [p for p in ps if pod_phase(p) != "Failed"] for n, ps in by_node.items()}
    scheduled = [n for n in eligible if any(node_name_of(p) == n for p in by_node.get(n, []))]
    ready_nodes = [n for n in eligible if any(is_pod_ready(p) for p in by_node.get(n, []))]
    available_nodes = [
        n
        for n in eligible
        if any(is_available(p, now=now, min_ready_seconds=min_ready) for p in by_node.get(n, []))
    ]
    status = {
        "desiredNumberScheduled": len(eligible),
        "currentNumberScheduled": len(scheduled),
        "updatedNumberScheduled": len(scheduled),
        "numberMisscheduled": len({node_name_of(p) for p in misscheduled if node_name_of(p)}),
        "numberReady": len(ready_nodes),
        "numberAvailable": len(available_nodes),
        "numberUnavailable": len(eligible) - len(available_nodes),
        "observedGeneration": int(meta(ds).get("generation") or 1),
    }
    return actions + status_patch(DAEMONSETS, ds, status)
