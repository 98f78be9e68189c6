"""Cluster mode's watch of the cluster's DaemonSets for `waitForDaemonSets`: one list+watch of
`apps/v1` daemonsets in all namespaces, run only while the node's policy waits for DaemonSets (a node
that does not wait costs the API server nothing more), and what it says with the node's pods and Node
(`lockd.daemonsetwait`): which DaemonSets the node still waits for (those the node policy's `daemonSets`
filter chooses), each missing pod waited for at most `--daemonset-wait`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from lockd.daemonsetwait import (
    ALL,
    NOT_LISTED,
    DaemonSetView,
    MissingBound,
    Waiting,
    daemonset_view,
    lean_daemonset,
    waiting_for,
)
from stagger.informer import Informer, InformerSettings
from stagger.kube import DAEMONSETS, RestClient, WatchEventType
from stagger.policy import DaemonSetFilter
from stagger.waiting import stop_tasks

__all__ = ["DaemonSetWatch"]

logger = logging.getLogger(__name__)

Obj = dict[str, Any]


class DaemonSetWatch:
    """The DaemonSets informer while it is wanted (`want`), and the node's DaemonSet gate (`waiting`).

    `on_change` is called when what the node waits for changes because a DaemonSet or the Node changed
    (the node's pods wake the lock service themselves); `on_expired` when a DaemonSet with no pod here, or
    the DaemonSets not listed yet, stop being waited for at `bound`."""

    def __init__(
        self,
        *,
        client: RestClient,
        settings: InformerSettings,
        node: Callable[[], Obj | None],
        pods: Callable[[], Iterable[Obj]],
        own_pod: tuple[str, str] | None,
        bound: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.informer: Informer | None = None
        self.on_change: Callable[[], None] | None = None
        self.on_expired: Callable[[Waiting], None] | None = None
        self._client = client
        self._settings = settings
        self._node = node
        self._pods = pods
        self._own_pod = own_pod
        self._clock = clock
        self._missing = MissingBound(bound=bound)
        self._wanted = False
        self._chosen: DaemonSetFilter = ALL
        self._toggled = asyncio.Event()
        self._view: DaemonSetView | None = None
        self._observing = False
        self._last: list[Waiting] = []

    @property
    def wanted(self) -> bool:
        return self._wanted

    @property
    def chosen(self) -> DaemonSetFilter:
        return self._chosen

    def want(self, wanted: bool, *, chosen: DaemonSetFilter | None = None) -> None:
        """Watch the DaemonSets (the node's policy has `waitForDaemonSets`), or stop (it no longer has);
        `chosen`, its `daemonSets` filter (None: as it was)."""
        if chosen is not None and chosen != self._chosen:
            self._chosen = chosen
            self.changed()
        if wanted != self._wanted:
            self._wanted = wanted
            self._toggled.set()

    def changed(self) -> None:
        """The Node or a DaemonSet changed: which DaemonSets should run here is read anew."""
        self._view = None
        self._schedule_observe()

    def waiting(self) -> list[str]:
        """The DaemonSets the node waits for now, each with why (for the 423 reason)."""
        return [str(item) for item in self._judge()]

    def _judge(self) -> list[Waiting]:
        informer = self.informer
        view: DaemonSetView | None = None
        extra: list[Waiting] = []
        if informer is not None and informer.synced.is_set():
            if self._view is None:
                self._view = daemonset_view(informer.objects(), self._node(), self._chosen)
            view = self._view
        elif informer is not None:
            extra = [NOT_LISTED]
        found = waiting_for(self._pods(), view=view, own_pod=self._own_pod, chosen=self._chosen) + extra
        kept, expired = self._missing.apply(found, now=self._clock())
        for item in expired:
            self._expired(item)
        return kept

    def _expired(self, item: Waiting) -> None:
        if item.why == "notListed":
            logger.warning(
                "the DaemonSets could not be listed within %gs (--daemonset-wait): waitForDaemonSets waits "
                "only for the DaemonSet pods on this node until they are",
                self._missing.bound,
            )
        else:
            logger.warning(
                "DaemonSet %s should run on this node but has no pod here after %gs (--daemonset-wait): "
                "no longer waiting for it",
                item.key,
                self._missing.bound,
            )
        if self.on_expired is not None:
            self.on_expired(item)

    def _schedule_observe(self) -> None:
        """One look per turn of the event loop, however many events came in it (a relist brings every
        DaemonSet at once): starts the clocks of missing pods when they go missing, not at the next ask,
        and wakes the waiters when the answer changed."""
        if self._observing or self.informer is None:
            return
        self._observing = True
        asyncio.get_running_loop().call_soon(self._observe)

    def _observe(self) -> None:
        self._observing = False
        if self.informer is None:
            return
        now = self._judge()
        if now != self._last:
            self._last = now
            if self.on_change is not None:
                self.on_change()

    def _on_daemonset(self, kind: WatchEventType, obj: Obj) -> None:
        if self.informer is not None and self.informer.synced.is_set():
            self.changed()

    async def run(self) -> None:
        """The informer runs while wanted; stopped, its cache and the clocks are dropped (a new start lists
        anew: the cache would be stale)."""
        while True:
            while not self._wanted:
                self._toggled.clear()
                await self._toggled.wait()
            informer = Informer(
                client=self._client, resource=DAEMONSETS, settings=self._settings, transform=lean_daemonset
            )
            informer.add_handler(self._on_daemonset)
            self.informer = informer
            logger.info("watching DaemonSets (waitForDaemonSets)")
            tasks = [
                asyncio.create_task(informer.run(), name="daemonset-informer"),
                asyncio.create_task(self._when_listed(informer), name="daemonsets-listed"),
            ]
            try:
                self._schedule_observe()  # the clock of "not listed yet" starts now
                while self._wanted:
                    self._toggled.clear()
                    await self._toggled.wait()
            finally:
                await stop_tasks(tasks)
                self.informer, self._view, self._last = None, None, []
                self._missing.reset()
            logger.info("stopped watching DaemonSets (no waitForDaemonSets)")

    async def _when_listed(self, informer: Informer) -> None:
        await informer.synced.wait()
        logger.info("listed %d DaemonSets", len(informer.store))
        self.changed()
