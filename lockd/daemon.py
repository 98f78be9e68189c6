"""The node lock daemon put together: the policy watcher, the load reader, the metrics and the lock service
built with its parts, the app around them (`lockd.app`), and cluster mode's parts when not standalone
(`lockd.clustermode`, imported only then: a standalone lockd never loads the informers, the group client
or the Event recorder)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from lockd import app as lockd_app
from lockd import appstate, heap, ledger, load, statefile
from lockd.metrics import Metrics
from lockd.nodepolicy import choose_node_policy
from lockd.service import build_service
from lockd.settings import Settings
from stagger.policywatch import PolicyWatcher

__all__ = ["make_app"]

logger = logging.getLogger(__name__)

Persist = Callable[[list[ledger.Slot]], None]


def _saved_slots(
    path: Path, *, clock: Callable[[], float], wall: Callable[[], float]
) -> tuple[list[ledger.Slot], Persist]:
    """Standalone restarts keep their slots: the slots read back from the state file, and the function
    that keeps the file current."""
    try:
        saved = statefile.load(path, now=clock(), wall=wall())
    except statefile.StateFileError as err:
        # Refusing to start would leave the node without lockd (every init client then fails open after
        # maxWait): start empty, keep the bad file for a person to look at.
        logger.error("%s; starting with no slots (the file is kept as %s.bad)", err, path)
        path.replace(path.with_name(path.name + ".bad"))
        saved = []
    if saved:
        logger.info("restored %d slots from the state file %s", len(saved), path)

    def persist(slots: list[ledger.Slot]) -> None:
        try:
            statefile.save(path, slots, now=clock(), wall=wall())
        except OSError as err:
            logger.error("cannot write the state file %s: %s", path, err)

    return saved, persist


async def _trim_heap(app: web.Application) -> None:
    heap.trim()


def make_app(settings: Settings, *, reader: load.LoadReader | None = None) -> web.Application:
    """Builds lockd. Raises `policy.PolicyError` (naming every bad field) if the policy file is bad, and
    `kube.ConfigError` in cluster mode when there is no way to reach the API server."""
    watcher = PolicyWatcher.load(settings.policy.policies, absent="built-in")
    if reader is None:
        reader = (
            load.FileLoad(path=settings.node.load_file)
            if settings.node.load_file
            else load.SystemLoad(proc_root=settings.node.proc_root)
        )
    cores = settings.node.cores or os.cpu_count() or 1
    cache = appstate.LoadCache(sample=reader.read())
    metrics = Metrics()
    lockd_app.publish_load(metrics, cache.sample)
    app = lockd_app.make_app(settings, watcher=watcher, cache=cache, reader=reader, metrics=metrics)
    if not settings.standalone:
        from lockd import clustermode

        # The service is built when the app starts, with the parts that need the API server's session;
        # the heap is trimmed once the node's pods are listed.
        clustermode.install(app, cores=cores)
        return app
    saved, persist = (
        _saved_slots(settings.queue.state_file, clock=time.monotonic, wall=time.time)
        if settings.queue.state_file is not None
        else ([], None)
    )
    service = build_service(
        settings,
        active=choose_node_policy(
            policy_file=lockd_app.policy_file_of(watcher),
            source=watcher.source,
            node_labels=dict(settings.node.node_labels),
        ),
        cores=cores,
        metrics=metrics,
        load=cache.get,
        persist=persist,
        dependencies=app[appstate.DEPENDENCIES].get,
    )
    for slot in saved:
        service.ledger.restore(slot)
    if persist is not None:
        persist(list(service.ledger.slots.values()))
    app[appstate.SERVICE] = service
    app.on_startup.append(_trim_heap)  # start-up is over: nothing more to list before answering
    lockd_app.log_start(app)
    return app
