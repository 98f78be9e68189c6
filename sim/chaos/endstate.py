"""What lockd and the pods say at the end of a chaos run: the slots lockd still holds, and for the pods not
Ready at the deadline where each is (node, phase, gates, init containers) and what lockd says of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp

from sim.cluster.measure.grouprun import controller_statuses
from sim.cluster.simcluster import SimCluster
from stagger.informer import Informer
from stagger.objects import condition

__all__ = ["held_slots", "lockd_slots", "lockd_statuses", "stuck"]

logger = logging.getLogger(__name__)


def _pod_state(pod: Any) -> str:
    """Where a pod is: node, phase, being deleted, scheduling gates, the init containers' states, Ready."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    parts = [str(spec.get("nodeName") or "unscheduled"), str(status.get("phase") or "no phase")]
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    if deleting:
        # Evicted or deleted, and still there: its kubelet has not finished terminating it.
        parts.append(f"terminating since {deleting}")
    gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    if gates:
        parts.append(f"gates {gates}")
    for container in status.get("initContainerStatuses") or []:
        state = container.get("state") or {}
        [(kind, detail)] = list(state.items())[:1] or [("unknown", {})]
        reason = (detail or {}).get("reason") or ""
        parts.append(f"init {container.get('name')} {kind}{' ' + reason if reason else ''}")
    ready = condition(pod, "Ready")
    parts.append(f"Ready {ready.get('status') if ready else 'unknown'}")
    return ", ".join(parts)


async def stuck(sim: SimCluster, informer: Informer, keys: list[str], *, most: int = 5) -> list[str]:
    """For the first pods not Ready at the deadline (`keys`, namespace/name): their state, what lockd says
    of them (slot, or queue position and reason), and the leader's groups (held pods wait for those)."""
    if not keys:
        return []
    said: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        statuses = await lockd_statuses(sim, session, each_within=5.0, limit=1000)
        groups = await _leader_groups(sim, session)
    for node, status in statuses.items():
        for slot in status.get("slots") or []:
            said[f"{slot.get('namespace')}/{slot.get('name')}"] = f"holds a slot on {node}"
        for waiter in status.get("queue") or []:
            said[f"{waiter.get('namespace')}/{waiter.get('name')}"] = (
                f"waiting on {node} at {waiter.get('position')} for {waiter.get('waitingSeconds')}s: "
                f"{waiter.get('reason')}"
            )
    lines = []
    for key in keys[:most]:
        pod = informer.get(key)
        where = _pod_state(pod) if pod is not None else "gone from the watch"
        lines.append(f"  {key}: {where}; lockd: {said.get(key, 'knows nothing of it')}")
    if groups:
        lines.append(f"  the leader's groups: {groups}")
    logger.warning("pods not Ready at the deadline:\n%s", "\n".join(lines))
    return [f"stuck: {line.strip()}" for line in lines]


async def _leader_groups(sim: SimCluster, session: aiohttp.ClientSession) -> str:
    """The leading replica's groups (ready/starting/held of limit), for why held pods were not released."""
    if sim.controller is None:
        return ""
    for section in await controller_statuses(sim.controller, session):
        if section.get("isLeader"):
            return (
                "; ".join(
                    f"{g.get('policy')}/{g.get('key')} {g.get('ready')} ready, {g.get('starting')} starting, "
                    f"{g.get('held')} held (limit {g.get('limit')})"
                    for g in section.get("groups") or []
                )
                + f"; reservations {(section.get('reservations') or {}).get('count')}"
            )
    return "no replica leads"


async def lockd_slots(sim: SimCluster, *, within: float) -> list[str]:
    """The slots lockd still holds `within` seconds after every pod was Ready (asked every second until
    none is left): each should have ended when its pod was Ready."""
    deadline = time.monotonic() + within
    while True:
        held = await held_slots(sim)
        if not held or time.monotonic() >= deadline:
            return held
        await asyncio.sleep(1.0)


async def held_slots(sim: SimCluster) -> list[str]:
    async with aiohttp.ClientSession() as session:
        statuses = await lockd_statuses(sim, session, each_within=5.0)
    return [
        f"{name}: {slot.get('name') or slot}"
        for name, status in statuses.items()
        for slot in status.get("slots") or []
    ]


async def lockd_statuses(
    sim: SimCluster, session: aiohttp.ClientSession, *, each_within: float, limit: int = 100
) -> dict[str, dict[str, Any]]:
    """Each lockd's `/status` by node; a lockd that does not answer in time is left out."""
    statuses: dict[str, dict[str, Any]] = {}
    for name, lockd in sim.lockds.items():
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with session.get(
                f"{lockd.spec.url}/status?limit={limit}",
                headers={"Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=each_within),
            ) as response:
                statuses[name] = await response.json(content_type=None)
    return statuses
