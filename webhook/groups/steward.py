"""The steward: keeps `granting` true exactly while this replica leads with its counts rebuilt from the
API; a reloaded policy file reaching the pacers; and, on the way out, the wait until the grants this
leader reserved show on their pods."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from stagger.policy import PolicyFile
from stagger.waiting import wait_event
from webhook import admission
from webhook.groups.pacing import Pacing
from webhook.groups.state import GROUPS

__all__ = ["STEWARD_SECONDS", "drain_reservations", "policies_changed", "run_steward"]

logger = logging.getLogger(__name__)


STEWARD_SECONDS = 0.5


async def drain_reservations(pacing: Pacing, *, within: float) -> None:
    deadline = time.monotonic() + within
    while pacing.book.reservations() and time.monotonic() < deadline:
        await pacing.changed(since=pacing.version, within=0.1)
    left = pacing.book.reservations()
    if left:
        logger.warning("%d grants not yet seen on their pods when giving up leadership", left)


def policies_changed(app: web.Application, new: PolicyFile) -> None:
    """A reloaded policy file reaches the pacers at once (the policy watcher's subscriber): every known pod
    is read again, since bypass selectors and groupings may have changed."""
    groups = app[GROUPS]
    pods = groups.watch.informer.objects() if groups.watch is not None else ()
    # The same maxWait admission gives the init clients (webhook.app's Admission.build): the hold of a
    # "never" policy's pods.
    groups.pacing.replace_policies(new.staggering_policies, pods, max_wait=admission.max_wait_for(new))
    logger.info("group pacing: %d staggering policies now", len(new.staggering_policies))


async def run_steward(app: web.Application) -> None:
    """Keeps `granting` true exactly while this replica leads with its counts rebuilt. (The gauges are read
    off the state at each scrape: `publish`.)"""
    groups = app[GROUPS]
    pacing = groups.pacing
    was_leader = False
    while True:
        leadership, watch = groups.leadership, groups.watch
        assert leadership is not None and watch is not None
        leading = leadership.is_leader
        if leading != was_leader:
            logger.info(
                "%s the leader%s",
                "became" if leading else "no longer",
                ": rebuilding group counts from the API before granting"
                if leading and not watch.synced
                else "",
            )
            was_leader = leading
        granting = leading and watch.synced and not groups.stopping
        if granting and not pacing.granting:
            logger.info("granting: %d enabled pods in %d groups", len(pacing.book), len(pacing.book.pairs()))
        pacing.set_granting(granting)
        watch.announce_events = leading
        if leading and not watch.synced:
            await wait_event(
                watch.informer.synced, within=STEWARD_SECONDS
            )  # grant once the counts are rebuilt
        else:
            await asyncio.sleep(STEWARD_SECONDS)
