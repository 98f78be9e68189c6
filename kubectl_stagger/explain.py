"""`why POD` as data: the pod, its Events, the controller's and its node's lockd's `/status` documents
turned into one explanation (what `-o json|yaml` prints), a one-line verdict and table rows. Pure: no I/O.

What it reads (docs/design.md "Names on pods", docs/contracts.md): the pod's `<prefix>/...` labels and
annotations (its groups: `<prefix>/group-key`; `staggered`, `granted-at`, `node-slot`, `failed-open`,
`started-without-slot`), its conditions and scheduling gates, the init client's termination message, the
controller's group rows for its (policy, key) pairs, and lockd's queue and slots for the pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubectl_stagger.report import Fetched
from stagger.matching import parse_group_key
from stagger.names import DEFAULT_PREFIX

__all__ = [
    "CONDITION_HEADERS",
    "EVENT_HEADERS",
    "condition_rows",
    "event_rows",
    "explanation",
    "group_rows",
    "verdict",
]

EVENT_HEADERS = ("LAST SEEN", "TYPE", "REASON", "FROM", "MESSAGE")
CONDITION_HEADERS = ("CONDITION", "STATUS", "REASON", "MESSAGE")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _prefix(controller: Fetched | None) -> str:
    doc = controller.doc if controller is not None else None
    return str(_mapping(_mapping(doc).get("controller")).get("prefix") or DEFAULT_PREFIX)


def _stagger_marks(pod: Mapping[str, Any], prefix: str) -> dict[str, str]:
    meta = _mapping(pod.get("metadata"))
    marks = {**_mapping(meta.get("labels")), **_mapping(meta.get("annotations"))}
    return {key: str(value) for key, value in sorted(marks.items()) if key.startswith(prefix + "/")}


def _groups(marks: Mapping[str, str], prefix: str, controller: Fetched | None) -> list[dict[str, Any]]:
    pairs = parse_group_key(marks.get(f"{prefix}/group-key")) or {}
    doc = controller.doc if controller is not None else None
    rows = _mapping(_mapping(doc).get("groups")).get("groups")
    known = [row for row in rows if isinstance(row, Mapping)] if isinstance(rows, list) else []
    found = []
    for policy, key in sorted(pairs.items()):
        row = next((r for r in known if r.get("policy") == policy and r.get("key") == key), None)
        found.append({"policy": policy, "key": key, "pacer": dict(row) if row is not None else None})
    return found


def _at_lockd(pod: Mapping[str, Any], lockd: Fetched | None) -> dict[str, Any] | None:
    if lockd is None:
        return None
    if lockd.doc is None:
        return {"lockd": lockd.pod, "error": lockd.error}
    meta = _mapping(pod.get("metadata"))
    key = (meta.get("namespace"), meta.get("name"))
    part: dict[str, Any] = {"lockd": lockd.pod, "waiting": lockd.doc.get("waiting", 0)}
    for field in ("queue", "slots"):
        entries = lockd.doc.get(field)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping) and (entry.get("namespace"), entry.get("name")) == key:
                part["queued" if field == "queue" else "slot"] = dict(entry)
    return part


def _conditions(pod: Mapping[str, Any]) -> list[dict[str, str]]:
    status = _mapping(pod.get("status"))
    return [
        {k: str(c.get(k) or "") for k in ("type", "status", "reason", "message")}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    ]


def _init_client(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The init containers' states: the init client's outcome is its termination message (JSON)."""
    status = _mapping(pod.get("status"))
    found = []
    for each in status.get("initContainerStatuses") or []:
        state = _mapping(_mapping(each).get("state"))
        phase = next(iter(state), "unknown")
        item = {"name": _mapping(each).get("name"), "state": phase}
        message = _mapping(state.get(phase)).get("message") or _mapping(state.get(phase)).get("reason")
        if message:
            item["message"] = message
        found.append(item)
    return found


def _events(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    def when(event: Mapping[str, Any]) -> str:
        return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")

    return [
        {
            "lastSeen": when(e),
            "type": e.get("type"),
            "reason": e.get("reason"),
            "from": _mapping(e.get("source")).get("component") or e.get("reportingComponent"),
            "count": e.get("count"),
            "message": e.get("message"),
        }
        for e in sorted(events, key=when)
    ]


def explanation(
    *,
    pod: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    controller: Fetched | None,
    lockd: Fetched | None,
) -> dict[str, Any]:
    prefix = _prefix(controller)
    meta, spec, status = _mapping(pod.get("metadata")), _mapping(pod.get("spec")), _mapping(pod.get("status"))
    marks = _stagger_marks(pod, prefix)
    found: dict[str, Any] = {
        "pod": f"{meta.get('namespace')}/{meta.get('name')}",
        "node": spec.get("nodeName") or None,
        "phase": status.get("phase") or "Pending",
        "ready": any(c["type"] == "Ready" and c["status"] == "True" for c in _conditions(pod)),
        "schedulingGates": [str(_mapping(g).get("name")) for g in spec.get("schedulingGates") or []],
        "stagger": marks,
        "groups": _groups(marks, prefix, controller),
        "atNode": _at_lockd(pod, lockd),
        "controller": None
        if controller is None
        else (controller.pod if controller.doc else controller.error),
        "initContainers": _init_client(pod),
        "conditions": _conditions(pod),
        "events": _events(events),
    }
    found["verdict"] = verdict(found, prefix=prefix)
    return found


def _group_text(groups: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for group in groups:
        row = group.get("pacer")
        label = f"{group['policy']}[{group['key']}]" if group.get("key") else str(group["policy"])
        if row is None:
            parts.append(f"{label} (unknown to the controller)")
        else:
            parts.append(
                f"{label}: {row.get('starting')} starting of limit {row.get('limit')}, {row.get('held')} held"
            )
    return "; ".join(parts)


def verdict(found: Mapping[str, Any], *, prefix: str) -> str:
    """One line: why the pod waits now, or what let it start."""
    marks = _mapping(found.get("stagger"))
    at_node = _mapping(found.get("atNode"))
    if found.get("ready"):
        granted = marks.get(f"{prefix}/granted-at")
        without = marks.get(f"{prefix}/started-without-slot")
        if without:
            return f"Ready; started without a start-up slot ({without})"
        return f"Ready; its start-up slot was granted at {granted}" if granted else "Ready"
    if "queued" in at_node:
        queued = at_node["queued"]
        return (
            f"waiting in {found.get('node')}'s lockd queue at position {queued.get('position')} "
            f"for {queued.get('waitingSeconds')}s: {queued.get('reason')}"
        )
    if "slot" in at_node:
        return (
            f"holds a start-up slot on {found.get('node')} since {at_node['slot'].get('grantedAt')}; starting"
        )
    if found.get("schedulingGates"):
        return f"not scheduled: held by scheduling gates {', '.join(found['schedulingGates'])}"
    if marks.get(f"{prefix}/staggered") == "1":
        return "held for its group: " + (_group_text(found.get("groups") or []) or "no group known")
    if "error" in at_node:
        return f"its node's lockd did not answer: {at_node['error']}"
    if not marks:
        return "not staggered: the pod carries no stagger labels or annotations"
    return "not waiting for stagger now"


def event_rows(found: Mapping[str, Any]) -> list[list[str]]:
    return [
        [str(e.get("lastSeen") or "-"), str(e.get("type") or "-"), str(e.get("reason") or "-"),
         str(e.get("from") or "-"), str(e.get("message") or "").replace("\n", " ")]
        for e in found.get("events") or []
    ]  # fmt: skip


def condition_rows(found: Mapping[str, Any]) -> list[list[str]]:
    return [
        [c["type"], c["status"], c["reason"] or "-", c["message"].replace("\n", " ") or "-"]
        for c in found.get("conditions") or []
    ]


def group_rows(found: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for group in found.get("groups") or []:
        row = _mapping(group.get("pacer"))
        rows.append(
            [str(group["policy"]), str(group["key"] or "-")]
            + [str(row.get(k, "?")) for k in ("mode", "ready", "starting", "held", "limit", "pacer")]
        )
    return rows
