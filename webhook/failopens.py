"""Every fail-open counted and explained: the pods that started without their start-up slot.

stagger lets a pod start when it cannot pace it (docs/contracts.md, "Fail-open causes"). The controller's
pod watch sees each such pod: its init client finished and said why in its termination message, lockd
marked its grant `failed-open`, or admission never injected the init client. The leader then, once per pod:

- puts a Warning Event on it (`StaggerStartedWithoutSlot`) naming the cause and the init client's reason,
- counts it in `stagger_controller_fail_opens_total{cause}`,
- marks it (`started-without-slot: <cause>`), so that no replica, now or after a restart, counts it again.

Every replica's `/status` (`failOpens`) sums the marked pods it knows of by cause, node and group, and the
gauge `stagger_controller_pods_started_without_slot{cause}` says how many there are now.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from stagger.contracts.failopen import CAUSES, FailOpenCause, read_outcome
from stagger.events import PodRef
from stagger.groupbook import pair_label
from stagger.kube import PODS, ApiError, RestClient, WatchEventType
from stagger.names import Names
from stagger.objects import Obj
from stagger.waiting import stop_tasks
from webhook.admission.inject import HOLD_CONTAINER
from webhook.app import METRICS
from webhook.groups.podwatch import PodWatch
from webhook.groups.state import GROUPS

__all__ = [
    "EVENT_REASON",
    "FailOpen",
    "FailOpens",
    "fail_open_of",
    "marked_cause",
    "publish",
    "status_section",
    "tally",
]

logger = logging.getLogger(__name__)

EVENT_REASON = "StaggerStartedWithoutSlot"
# How often the leader looks through every known pod for one not yet counted: what a failed patch, or
# a fail-open seen while another replica led, waits at most.
SWEEP_SECONDS = 30.0
RECENT = 20  # the newest counted fail-opens /status lists
EVENT_MESSAGE_LIMIT = 1024  # the API server refuses an Event message over 1 KiB

_STARTED_PHASES = frozenset({"Running", "Succeeded", "Failed"})
_GROUP_CAUSES: Mapping[FailOpenCause, str] = {
    "groupPacerUnreachable": "lockd granted its node slot without the group pacer, which it could not "
    "reach (groupFailurePolicy open)",
    "groupPacerNotConfigured": "lockd granted its node slot without the group pacer: lockd has no "
    "--controller-url",
}


@dataclass(frozen=True)
class FailOpen:
    cause: FailOpenCause
    reason: str


def marked_cause(pod: Mapping[str, Any], *, names: Names) -> str | None:
    """The cause a pod was marked with once counted (`started-without-slot`), or None."""
    cause = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.started_without_slot_annotation)
    return cause if isinstance(cause, str) else None


def fail_open_of(pod: Mapping[str, Any], *, names: Names, init_container: str) -> FailOpen | None:
    """Why an opted-in pod started without its slot, or None (it got one, has not started, or has been
    counted already). Pure; reads the pod as `webhook.groups.podwatch.slim_pod` keeps it."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if (metadata.get("labels") or {}).get(names.enable_label) != "1":
        return None
    if marked_cause(pod, names=names) is not None:
        return None
    marked = annotations.get(names.failed_open_annotation)
    for cause, reason in _GROUP_CAUSES.items():
        if marked == cause:
            return FailOpen(cause=cause, reason=reason)
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    injected = {c.get("name") for c in spec.get("initContainers") or ()}
    if init_container not in injected and HOLD_CONTAINER not in injected:
        if status.get("phase") not in _STARTED_PHASES:
            return None
        return FailOpen(
            cause="webhookNotCalled",
            reason="admitted without stagger's init container: the admission webhook was not called, or "
            "failed (failurePolicy Ignore)",
        )
    for container in status.get("initContainerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated") or {}
        if container.get("name") != init_container or terminated.get("exitCode") != 0:
            continue
        outcome = read_outcome(terminated.get("message"))
        if outcome is None:
            if names.node_slot_annotation in annotations:
                return None  # an init client that writes no outcome, granted by lockd
            return FailOpen(cause="unknown", reason="the init client finished without a grant or a reason")
        if outcome["slot"] == "granted":
            return None
        return FailOpen(cause=outcome.get("cause", "unknown"), reason=outcome.get("reason", ""))
    return None


def tally(pods: Iterable[Obj], *, names: Names, groups_of: Callable[[Obj], list[str]]) -> dict[str, Any]:
    """The counted (marked) pods among `pods`, summed by cause, node and group. Pure."""
    by_cause: Counter[str] = Counter()
    by_node: Counter[str] = Counter()
    by_group: Counter[str] = Counter()
    for pod in pods:
        cause = marked_cause(pod, names=names)
        if cause is None:
            continue
        by_cause[cause] += 1
        by_node[str((pod.get("spec") or {}).get("nodeName") or "(not scheduled)")] += 1
        by_group.update(groups_of(pod) or ["(no group)"])
    return {
        "pods": sum(by_cause.values()),
        "byCause": dict(sorted(by_cause.items())),
        "byNode": dict(sorted(by_node.items())),
        "byGroup": dict(sorted(by_group.items())),
    }


class FailOpens:
    """The leader's counting of fail-opens: it hears every change of an enabled pod from the pod watch,
    and looks through all of them every SWEEP_SECONDS for what it missed."""

    def __init__(
        self,
        *,
        client: RestClient,
        watch: PodWatch,
        init_container: str,
        counted: Callable[[FailOpenCause], None],
    ) -> None:
        self._client = client
        self._watch = watch
        self._names = watch.pacing.names
        self._init_container = init_container
        self._counted = counted
        self._queue: asyncio.Queue[tuple[Obj, FailOpen]] = asyncio.Queue()
        self._queued: set[str] = set()  # uids queued or being marked
        self.totals: Counter[FailOpenCause] = Counter()  # counted by this replica since it started
        self.recent: deque[dict[str, str]] = deque(maxlen=RECENT)
        watch.informer.add_handler(self._handle)

    def _handle(self, kind: WatchEventType, pod: Obj) -> None:
        if kind != "DELETED":
            self._consider(pod)

    def _consider(self, pod: Obj) -> None:
        if not self._watch.announce_events:  # only the leader counts, once per pod
            return
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if not uid or uid in self._queued:
            return
        found = fail_open_of(pod, names=self._names, init_container=self._init_container)
        if found is not None:
            self._queued.add(uid)
            self._queue.put_nowait((pod, found))

    async def run(self) -> None:
        sweeper = asyncio.create_task(self._sweep(), name="fail-open-sweep")
        try:
            while True:
                pod, found = await self._queue.get()
                try:
                    await self._record(pod, found)
                finally:
                    self._queued.discard(str(pod["metadata"].get("uid", "")))
        finally:
            await stop_tasks([sweeper])

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            for pod in self._watch.informer.objects():
                self._consider(pod)

    async def _record(self, pod: Obj, found: FailOpen) -> None:
        """Mark the pod, then count it and say why on it; a pod that could not be marked is left for the
        next change or sweep, so that it is counted once."""
        metadata = pod["metadata"]
        namespace, name, uid = str(metadata["namespace"]), str(metadata["name"]), str(metadata["uid"])
        # metadata.uid in a patch is a precondition: a namesake created since is not marked (409), as
        # the kubelet guards its status patches (kubernetes/kubernetes#86320).
        patch = {
            "metadata": {
                "uid": uid,
                "annotations": {self._names.started_without_slot_annotation: found.cause},
            }
        }
        try:
            await self._client.patch(PODS, name=name, namespace=namespace, patch=patch)
        except ApiError as err:
            if err.status not in (404, 409):
                logger.warning("could not mark %s/%s as started without a slot: %s", namespace, name, err)
            return
        except (aiohttp.ClientError, TimeoutError) as err:
            logger.warning("could not mark %s/%s as started without a slot: %r", namespace, name, err)
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        logger.warning(
            "%s/%s on %s started without a start-up slot (%s): %s",
            namespace,
            name,
            node or "?",
            found.cause,
            found.reason,
        )
        self.totals[found.cause] += 1
        self.recent.append(
            {"namespace": namespace, "name": name, "node": node, "cause": found.cause, "reason": found.reason}
        )
        self._counted(found.cause)
        message = f"started without a start-up slot ({found.cause}): {found.reason}"
        ref = PodRef(namespace=namespace, name=name, uid=uid)
        self._watch.announce_to(ref, EVENT_REASON, message[:EVENT_MESSAGE_LIMIT], kind="Warning")

    def status(self) -> dict[str, Any]:
        """The `failOpens` section of `/status`."""
        book = self._watch.pacing.book

        def groups_of(pod: Obj) -> list[str]:
            metadata = pod.get("metadata") or {}
            record = book.get((str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
            return [pair_label(pair) for pair in record.pacer_groups] if record is not None else []

        return {
            **tally(self._watch.informer.objects(), names=self._names, groups_of=groups_of),
            "countedHere": {cause: self.totals[cause] for cause in CAUSES if self.totals[cause]},
            "recent": list(self.recent),
        }

    def now_by_cause(self) -> dict[str, int]:
        """For the gauge: the marked pods known now, by cause (every cause, zeros too)."""
        counts = Counter(marked_cause(pod, names=self._names) for pod in self._watch.informer.objects())
        return {cause: counts[cause] for cause in CAUSES}


def publish(app: web.Application) -> None:
    """The gauge of pods started without a slot, as of now (called before each scrape)."""
    fail_opens = app[GROUPS].fail_opens
    if fail_opens is None:
        return
    gauge = app[METRICS].pods_without_slot
    for cause, count in fail_opens.now_by_cause().items():
        gauge.labels(cause=cause).set(count)


def status_section(app: web.Application) -> tuple[str, dict[str, Any]]:
    groups = app[GROUPS]
    if groups.fail_opens is None:
        why = groups.off or "the pod watch has not started"
        return "failOpens", {"enabled": False, "why": why}
    return "failOpens", {"enabled": True, **groups.fail_opens.status()}
