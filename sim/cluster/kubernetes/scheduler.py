"""The simulated kube-scheduler: watches pods and nodes, binds pending pods (decisions in ``sim.cluster.kubernetes.placement``)."""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass, field

import aiohttp

from sim.cluster.clock import SimClock
from sim.cluster.kubernetes.placement import (
    DEFAULT_SCHEDULER,
    Bind,
    Decision,
    MarkUnschedulable,
    needs_condition_update,
    schedule,
)
from sim.cluster.objects import set_condition
from sim.kubeclient import bind_pod
from stagger.informer import Informer, InformerSettings, cache_key
from stagger.kube import NODES, PODS, ApiError, RestClient
from stagger.timestamps import format_rfc3339
from stagger.waiting import wait_event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchedulerSettings:
    scheduler_name: str = DEFAULT_SCHEDULER
    retry_seconds: float = 2.0
    """Wall seconds between passes when nothing changes (unschedulable pods are retried then)."""
    write_concurrency: int = 16
    informer: InformerSettings = field(default_factory=InformerSettings)


class Scheduler:
    """Run with ``await scheduler.run()`` (until cancelled)."""

    def __init__(
        self, *, client: RestClient, clock: SimClock, settings: SchedulerSettings = SchedulerSettings()
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.pods = Informer(client=client, resource=PODS, settings=settings.informer)
        self.nodes = Informer(client=client, resource=NODES, settings=settings.informer)
        self._wake = asyncio.Event()
        for informer in (self.pods, self.nodes):
            informer.add_handler(lambda _kind, _obj: self._wake.set())
        self._limit = asyncio.Semaphore(settings.write_concurrency)

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(i.run(), name=f"scheduler-{i.resource.plural}")
            for i in (self.pods, self.nodes)
        ]
        try:
            await self.pods.synced.wait()
            await self.nodes.synced.wait()
            while True:
                self._wake.clear()
                await self.schedule_once()
                await wait_event(self._wake, within=self.settings.retry_seconds)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def schedule_once(self) -> None:
        decisions = schedule(
            pods=self.pods.objects(), nodes=self.nodes.objects(), scheduler_name=self.settings.scheduler_name
        )
        await asyncio.gather(*(self._carry_out(d) for d in decisions))

    async def _carry_out(self, decision: Decision) -> None:
        key = f"{decision.namespace}/{decision.name}"
        pod = self.pods.store.get(key)
        if pod is None:
            return
        async with self._limit:
            try:
                if isinstance(decision, Bind):
                    await bind_pod(
                        self.client, namespace=decision.namespace, name=decision.name, node=decision.node
                    )
                    # Assume the binding until the watch confirms it, so the next pass counts this pod.
                    assumed = copy.deepcopy(pod)
                    assumed.setdefault("spec", {})["nodeName"] = decision.node
                    self.pods.record(assumed)
                    logger.debug("bound %s to %s", cache_key(pod), decision.node)
                elif isinstance(decision, MarkUnschedulable) and needs_condition_update(pod, decision):
                    conditions = set_condition(
                        (pod.get("status") or {}).get("conditions") or [],
                        kind="PodScheduled",
                        status="False",
                        now=format_rfc3339(self.clock.datetime_now().timestamp(), digits=0),
                        reason=decision.reason,
                        message=decision.message,
                    )
                    updated = await self.client.patch(
                        PODS,
                        name=decision.name,
                        namespace=decision.namespace,
                        subresource="status",
                        patch={"status": {"conditions": conditions}},
                        patch_type="strategic",
                    )
                    self.pods.record(updated)
                    logger.info("%s: %s: %s", key, decision.reason, decision.message)
            except ApiError as exc:
                # 404: deleted meanwhile; 409: bound by someone else. The next pass sees the truth.
                level = logging.DEBUG if exc.status in (404, 409) else logging.WARNING
                logger.log(level, "scheduling %s: %s", key, exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                logger.warning("scheduling %s: %r", key, exc)
