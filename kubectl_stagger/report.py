"""`status` as data: the controller's and every lockd's `/status` documents (docs/contracts.md) turned into
one report (what `-o json|yaml` prints) and its table rows. Pure: no I/O, so every shape of answer,
missing fields and unreachable pods included, is tested without a cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GROUP_HEADERS",
    "NODE_HEADERS",
    "Fetched",
    "group_rows",
    "node_rows",
    "status_report",
]

GROUP_HEADERS = ("POLICY", "GROUP", "MODE", "READY", "STARTING", "HELD", "LIMIT", "PACER")
NODE_HEADERS = ("NODE", "LOCKD", "SLOTS", "WAITING", "POLICY", "CPU", "SAYS NO")


@dataclass(frozen=True)
class Fetched:
    """One pod's `/status`: the document, or why there is none (`error`)."""

    pod: str
    node: str = ""
    doc: Mapping[str, Any] | None = None
    error: str = ""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _controller_part(controller: Fetched | None) -> dict[str, Any] | None:
    if controller is None:
        return None
    if controller.doc is None:
        return {"pod": controller.pod, "error": controller.error}
    groups = _mapping(controller.doc.get("groups"))
    part: dict[str, Any] = {
        "pod": controller.pod,
        "ready": bool(controller.doc.get("ready")),
        "granting": bool(groups.get("granting")),
        "leader": groups.get("leader"),
        "prefix": _mapping(controller.doc.get("controller")).get("prefix"),
    }
    if groups.get("enabled") is False:
        part["groupsOff"] = str(groups.get("why") or "group pacing is off")
    reload_error = _mapping(controller.doc.get("policy")).get("lastReloadError")
    if reload_error:
        part["policyReloadError"] = reload_error
    return part


def _groups(controller: Fetched | None) -> list[dict[str, Any]]:
    doc = controller.doc if controller is not None else None
    rows = _mapping(_mapping(doc).get("groups")).get("groups")
    return [dict(row) for row in rows if isinstance(row, Mapping)] if isinstance(rows, list) else []


def _node(fetched: Fetched) -> dict[str, Any]:
    if fetched.doc is None:
        return {"node": fetched.node, "pod": fetched.pod, "error": fetched.error}
    doc = fetched.doc
    policy = _mapping(doc.get("policy"))
    queue = [entry for entry in doc.get("queue") or [] if isinstance(entry, Mapping)]
    slots = doc.get("slots") if isinstance(doc.get("slots"), list) else []
    node: dict[str, Any] = {
        "node": str(doc.get("node") or fetched.node),
        "pod": fetched.pod,
        "slots": len(slots or []),
        "maxConcurrent": policy.get("maxConcurrent"),
        "waiting": int(doc.get("waiting") or 0),
        "policy": policy.get("name"),
        "cpuPercent": _mapping(doc.get("load")).get("cpuPercent"),
        # Why the first in line waits now: the throttle that says no, with its numbers (lockd's words).
        "saysNo": str(queue[0].get("reason") or "") if queue else "",
    }
    if policy.get("lastReloadError"):
        node["policyReloadError"] = policy["lastReloadError"]
    return node


def status_report(*, controller: Fetched | None, lockds: Sequence[Fetched]) -> dict[str, Any]:
    """Every group the controller paces and every node's lockd, nodes in name order."""
    nodes = sorted((_node(each) for each in lockds), key=lambda n: (n["node"], n["pod"]))
    return {"controller": _controller_part(controller), "groups": _groups(controller), "nodes": nodes}


def _text(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def group_rows(report: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            _text(group.get("policy")),
            _text(group.get("key")),
            _text(group.get("mode")),
            _text(group.get("ready")),
            _text(group.get("starting")),
            _text(group.get("held")),
            _text(group.get("limit")),
            _text(group.get("pacer")),
        ]
        for group in report.get("groups") or []
    ]


def _slots(node: Mapping[str, Any]) -> str:
    limit = node.get("maxConcurrent")
    return f"{node.get('slots', 0)}/{limit}" if limit is not None else f"{node.get('slots', 0)}/-"


def _cpu(value: object) -> str:
    return f"{value:.0f}%" if isinstance(value, int | float) else "-"


def node_rows(report: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for node in report.get("nodes") or []:
        if "error" in node:
            rows.append(
                [_text(node.get("node")), node["pod"], "-", "-", "-", "-", f"(no answer: {node['error']})"]
            )
            continue
        rows.append(
            [
                _text(node.get("node")),
                node["pod"],
                _slots(node),
                str(node.get("waiting", 0)),
                _text(node.get("policy")),
                _cpu(node.get("cpuPercent")),
                _text(node.get("saysNo")),
            ]
        )
    return rows
