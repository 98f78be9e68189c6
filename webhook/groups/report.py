"""What the group part shows: its gauges (read off the state at each scrape), the readiness check that
holds a leader's replica unready until its counts are rebuilt, and the `groups` section of `/status`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from stagger.groupbook import pair_label
from stagger.timestamps import format_rfc3339
from webhook.app import (
    METRICS,
)
from webhook.groups.state import GROUPS

__all__ = ["not_synced", "publish", "status_section"]


def publish(app: web.Application) -> None:
    """The group gauges and the leader gauge, as of now (called before each scrape)."""
    groups = app[GROUPS]
    metrics = app[METRICS]
    leadership = groups.leadership
    metrics.leader.set(1 if leadership is not None and leadership.is_leader else 0)
    rows = groups.pacing.rows()
    metrics.groups.set(len(rows))
    for state in ("ready", "starting", "held"):
        metrics.group_pods.labels(state=state).set(sum(getattr(row, state) for row in rows))
    metrics.group_waits.set(groups.pacing.waiters)
    metrics.reservations.set(len(groups.pacing.book.claims()))


def not_synced(app: web.Application) -> str | None:
    groups = app[GROUPS]
    if groups.off is not None or groups.watch is None:
        return None  # admission only: ready as soon as admission is
    return None if groups.watch.synced else "listing enabled pods (group counts not rebuilt yet)"


def status_section(app: web.Application) -> tuple[str, dict[str, Any]]:
    groups = app[GROUPS]
    if groups.off is not None:
        return "groups", {"enabled": False, "why": groups.off}
    leadership = groups.leadership
    rows = groups.pacing.rows()
    now = groups.pacing.clock()
    claims = groups.pacing.book.claims()
    evictions = groups.evictions
    return "groups", {
        "enabled": True,
        "leader": None if leadership is None else leadership.leader,
        "isLeader": bool(leadership is not None and leadership.is_leader),
        "granting": groups.granting,
        "pods": len(groups.pacing.book),
        "waits": groups.pacing.waiters,
        "groups": [
            {
                "policy": row.policy,
                "key": row.key,
                "mode": row.mode,
                "ready": row.ready,
                "starting": row.starting,
                "held": row.held,
                "limit": "none" if row.limit is None else row.limit,
                "pacer": row.pacer,
            }
            for row in rows
        ],
        "reservations": {
            "count": len(claims),
            # Claims admission took whose pods never showed in the watch in time (since the start).
            "lapsedUnconfirmed": groups.pacing.book.claims_lapsed,
            "confirmTimeoutSeconds": groups.pacing.claim_confirm_timeout,
            # The newest 100: what /status shows of a large release.
            "items": [
                {
                    "id": claim.id,
                    "kind": "owner" if claim.owner and not claim.taken else "admitted",
                    "owner": claim.owner or None,
                    "groups": [pair_label(pair) for pair in claim.pairs],
                    "ageSeconds": round(now - claim.since, 1),
                    "heldForSeconds": None if claim.first_held is None else round(now - claim.first_held, 1),
                    # When it lapses unless its pod shows first (an admitted one: the confirm timeout).
                    "lapsesAt": format_rfc3339(claim.lapses_at),
                }
                for claim in claims[-100:]
            ],
        },
        "evictions": None
        if evictions is None
        else {**evictions.stats, "backingOff": evictions.backing_off()},
    }
