"""`GET /status`: what this node's lockd is doing, as JSON for tools and as a table for a person."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NotRequired, TypedDict

from lockd import ledger
from lockd.dependencies import DependencyStatus
from lockd.nodepolicy import ActivePolicy
from lockd.service import Counters
from stagger import policy, throttles
from stagger.timestamps import format_rfc3339


class LoadThrottleStatus(TypedDict):
    throttle: str  # loadAvg, cpu, io, memory
    maxLoad: float
    sampled: float | None  # the throttle's number as read (loadAvg's per core when perCore)
    grantsSinceSample: int  # grants since that number was read
    assumed: float  # what they are assumed to add until the next reading (grants x incrementBy)


class LoadStatus(TypedDict):
    cpuPercent: float | None
    ioPercent: float | None
    memoryPercent: float | None  # memory pressure (PSI "some avg10"); null without PSI
    load1: float | None  # the 1-minute load average, not divided by the cores
    source: str
    throttles: list[LoadThrottleStatus]  # the node policy's load throttles


class SlotStatus(TypedDict, total=False):
    namespace: str
    name: str
    uid: str
    grantedAt: str
    ageSeconds: float
    expiresInSeconds: float
    pending: bool
    phase: str  # cluster mode
    heldBecause: str  # cluster mode
    readinessProbe: str  # cluster mode: lockd's last run of the pod's probes, or why it runs none
    via: str  # the listener it was asked on, when not the lock port: "podStartupLock" (lockd.startuplock)


class QueueStatus(TypedDict, total=False):
    namespace: str
    name: str
    uid: str
    position: int
    waitingSeconds: float
    reason: str
    phase: str  # cluster mode


class PushedGrantsStatus(TypedDict):
    received: int
    used: int
    lapsed: int
    held: int


class GroupStreamStatus(TypedDict):
    connected: bool
    requests: int
    wakeups: int
    stepAside: int  # pods stepping aside for their group now
    pushedGrants: PushedGrantsStatus  # granted in the stream's answers


class Status(TypedDict):
    node: str
    mode: str
    policy: dict[str, Any]
    load: LoadStatus
    # The node policy's dependencies, each with its last result and when it was checked (lockd.dependencies).
    dependencies: list[DependencyStatus]
    slots: list[SlotStatus]
    waiting: int  # every waiter; `queue` lists the first `limit` of them
    queue: list[QueueStatus]
    counters: dict[str, int]
    # Cluster mode with --controller-url: the node's wait stream to the controller (lockd.groupclient.GroupWatch).
    groupStream: NotRequired[GroupStreamStatus]


def build_status(
    *,
    node: str,
    mode: str,
    active: ActivePolicy,
    cores: int,
    book: ledger.Ledger,
    sample: throttles.LoadSample,
    counters: Counters,
    readings: Sequence[throttles.LoadReading] = (),
    now: float,
    limit: int = 100,
    reason: Callable[[ledger.Waiter], str] | None = None,
    details: Callable[[ledger.PodKey], dict[str, str]] | None = None,
    dependencies: list[DependencyStatus] | None = None,
) -> Status:
    """Pure: the status document from the service's state at monotonic time `now`.

    Lists every slot (at most the node's limit) but only the first `limit` waiters, so its size and cost
    do not grow with a long queue; `reason(waiter)` says why each waits as of now."""
    described = policy.describe_node_policy(active.node_policy, cores=cores)
    slots: list[SlotStatus] = []
    for slot in sorted(book.slots.values(), key=lambda s: s.granted_at):
        entry: SlotStatus = {
            "namespace": slot.namespace,
            "name": slot.name,
            "uid": slot.uid,
            "grantedAt": format_rfc3339(slot.granted_wall),
            "ageSeconds": round(now - slot.granted_at, 3),
            "expiresInSeconds": round(max(0.0, slot.expires_at - now), 3),
            "pending": slot.pending,
        }
        if slot.via:
            entry["via"] = slot.via
        if details is not None and not slot.anonymous:
            found = details((slot.namespace, slot.name))
            entry["phase"], entry["heldBecause"] = found["phase"], found["heldBecause"]
            if "readinessProbe" in found:
                entry["readinessProbe"] = found["readinessProbe"]
        slots.append(entry)
    queue: list[QueueStatus] = []
    for position, waiter in enumerate(book.waiters(limit), start=1):
        item: QueueStatus = {
            "namespace": waiter.namespace,
            "name": waiter.name,
            "uid": waiter.uid,
            "position": position,
            "waitingSeconds": round(now - waiter.first_seen, 3),
            "reason": reason(waiter) if reason is not None else waiter.reason,
        }
        if details is not None:
            item["phase"] = details((waiter.namespace, waiter.name))["phase"]
        queue.append(item)
    return {
        "node": node,
        "mode": mode,
        "policy": {**described, "source": active.source, "why": active.why, "cores": cores},
        "load": {
            "cpuPercent": sample.cpu_percent,
            "ioPercent": sample.io_percent,
            "memoryPercent": sample.memory_percent,
            "load1": sample.load1,
            "source": sample.source,
            "throttles": [
                {
                    "throttle": r.throttle,
                    "maxLoad": r.max_load,
                    "sampled": r.sampled,
                    "grantsSinceSample": r.grants,
                    "assumed": round(r.assumed, 6),
                }
                for r in readings
            ],
        },
        "dependencies": dependencies or [],
        "slots": slots,
        "waiting": len(book.queue),
        "queue": queue,
        "counters": dict(counters.__dict__),
    }


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    return [line, *("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)]


def _dependency_line(dependency: DependencyStatus) -> str:
    # A target with $(NODE_NAME) or $(NODE_IP) is shown as this node checks it too.
    checked = dependency.get("checkedTarget")
    name = dependency["name"] + (f" [{checked}]" if checked and checked != dependency["target"] else "")
    ago = dependency["checkedSecondsAgo"]
    if ago is None:
        return f"dependency {name}: not checked yet"
    state = "up" if dependency["up"] else f"DOWN: {dependency['error']}"
    return f"dependency {name}: {state} (checked {ago:.1f}s ago)"


def _load_number(throttle: str, value: float) -> str:
    return f"{value:.2f}" if throttle == "loadAvg" else f"{value:.0f}%"


def _load_lines(load: LoadStatus) -> list[str]:
    load1 = "n/a" if load["load1"] is None else f"{load['load1']:.2f}"
    cpu, io = _percent(load["cpuPercent"]), _percent(load["ioPercent"])
    lines = [f"load cpu {cpu}  io {io}  load1 {load1}  ({load['source']})"]
    for each in load["throttles"]:
        name, sampled, grants = each["throttle"], each["sampled"], each["grantsSinceSample"]
        shown = "no reading (holds no pod)" if sampled is None else f"{_load_number(name, sampled)} sampled"
        if each["assumed"]:
            assumed = _load_number(name, each["assumed"])
            shown += f" + {assumed} assumed for {grants} grant{'' if grants == 1 else 's'} since"
        lines.append(f"  {name} < {each['maxLoad']:g}: {shown}")
    return lines


def render_text(status: Status) -> str:
    """The same document as a readable table for `curl <node>:<port>/status?format=text`."""
    pol = status["policy"]
    limit = pol.get("maxConcurrent")
    load = status["load"]
    counters = status["counters"]
    out = [
        f"node {status['node']}  mode {status['mode']}",
        f"policy {pol['name']} ({pol['why']})",
        "  limits: maxConcurrent {}  cpu<{}  io<{}  rateLimit {}  holdTimeout {}s".format(
            "none" if limit is None else limit,
            "n/a" if pol.get("cpuMaxLoad") is None else f"{pol['cpuMaxLoad']:g}%",
            "n/a" if pol.get("ioMaxLoad") is None else f"{pol['ioMaxLoad']:g}%",
            "none"
            if not pol.get("rateLimit")
            else "burst {burst} every {fillFactorSeconds:g}s".format(**pol["rateLimit"]),
            f"{pol['holdTimeoutSeconds']:g}",
        ),
        *_load_lines(load),
        *(_dependency_line(d) for d in status["dependencies"]),
        *(
            [f"policy reload FAILED, the last good policy stays: {pol['lastReloadError']}"]
            if pol.get("lastReloadError")
            else []
        ),
        "counters " + "  ".join(f"{k} {v}" for k, v in counters.items()),
        "",
        f"slots in use: {len(status['slots'])}" + ("" if limit is None else f" of {limit}"),
    ]
    if status["slots"]:
        # The HELD BECAUSE column only means something in cluster mode, where lockd sees the pods.
        cluster = any("heldBecause" in s for s in status["slots"])
        # VIA only when a slot was asked for on another port than the lock port's.
        via = any("via" in s for s in status["slots"])
        headers = ["NAMESPACE", "NAME", "UID", "GRANTED", "AGE", "EXPIRES IN"] + (
            ["HELD BECAUSE"] if cluster else []
        )
        headers += ["VIA"] if via else []
        rows = [
            [
                s["namespace"] or "-",
                s["name"],
                s["uid"] or "-",
                s["grantedAt"],
                f"{s['ageSeconds']:.1f}s",
                f"{s['expiresInSeconds']:.0f}s",
            ]
            + (["granting…" if s.get("pending") else s.get("heldBecause", "-")] if cluster else [])
            + ([s.get("via", "lock port")] if via else [])
            for s in status["slots"]
        ]
        out += ["  " + line for line in _table(headers, rows)]
    shown = len(status["queue"])
    more = status["waiting"] - shown
    out += [
        "",
        f"waiting: {status['waiting']}" + (f" (first {shown} shown; ?limit=N for more)" if more > 0 else ""),
    ]
    if status["queue"]:
        out += [
            "  " + line
            for line in _table(
                ["POS", "NAMESPACE", "NAME", "WAITING", "REASON"],
                [
                    [
                        str(q["position"]),
                        q["namespace"],
                        q["name"],
                        f"{q['waitingSeconds']:.1f}s",
                        q["reason"],
                    ]
                    for q in status["queue"]
                ],
            )
        ]
    return "\n".join(out) + "\n"
