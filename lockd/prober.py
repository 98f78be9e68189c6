"""lockd runs held pods' own readiness probes, so that a slot ends when its pod is ready, not when the kubelet
next looks (issue 38; what is probed and when it has passed: `lockd.podprobes`).

Every `probePeriod` of the node policy, each slot held (granted, not being finished) whose pod lockd can
probe gets one attempt, unless its previous one is still running: one attempt at a time a pod, each check
bounded by the probe's `timeoutSeconds` and `--probe-max-timeout`, at most `--probe-max-in-flight`
checks on the node at once (the others wait for the next period, counted as `skipped`). Only while the
slot is held: a slot that ends cancels its attempt and forgets its tally.

A check is the kubelet's: an HTTP GET of the probe's path with its headers (a 2xx passes; TLS for
`scheme: HTTPS` without checking the certificate, as the kubelet does) or a TCP connection accepted.
Stricter in one way: a redirect is never followed and does not pass (the kubelet follows one to the same
host and passes one to another); its slot then ends at the Ready condition, as without lockd's probe. The
body is never read, and the connection is closed after the answer (`Connection: close`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yarl

from lockd import ledger, podprobes
from lockd.metrics import Metrics
from lockd.service import LockService
from stagger.version import VERSION

__all__ = ["ReadinessProber"]

logger = logging.getLogger(__name__)

OFF_RECHECK_SECONDS = 2.0
"""While the node policy has probeReadiness off, how often the loop looks whether it is on again."""

USER_AGENT = f"kube-probe/stagger-lockd-{VERSION}"
"""Apps that keep probes out of their access logs match `kube-probe/`; the rest says who asks."""


@dataclass
class _Attempt:
    """One held slot's probing: its tally of passes, the attempt running, and the last results (/status)."""

    granted_at: float
    tally: dict[str, int] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    last: str = ""


class ReadinessProber:
    def __init__(
        self,
        *,
        service: Callable[[], LockService],
        pod_of: Callable[[ledger.PodKey], Mapping[str, Any] | None],
        session: aiohttp.ClientSession,
        metrics: Metrics,
        max_in_flight: int,
        max_timeout: float,
        record: Callable[[ledger.PodKey, float], Coroutine[Any, Any, None]] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`record(key, wall)` writes on the pod that its probe passed (`clusterwatch.record_probed_ready`)."""
        self._service, self._pod_of, self._session, self._metrics = service, pod_of, session, metrics
        self._record = record
        self._max_in_flight, self._max_timeout, self._wall = max_in_flight, max_timeout, wall
        self._slots: dict[ledger.PodKey, _Attempt] = {}
        self._in_flight = 0
        self._writes: set[asyncio.Task[None]] = set()

    def describe(self, key: ledger.PodKey) -> str:
        """For /status: the last results of lockd's probes of this held pod, or why it probes none."""
        attempt = self._slots.get(key)
        if attempt is not None and attempt.last:
            return attempt.last
        pod = self._pod_of(key)
        return podprobes.pod_plan(pod).why_not if pod is not None else ""

    async def run(self) -> None:
        try:
            while True:
                service = self._service()
                policy = service.node_policy
                if policy.probe_readiness and service.ready:
                    self.round(service)
                elif self._slots:
                    self._forget(set(self._slots))
                await asyncio.sleep(policy.probe_period if policy.probe_readiness else OFF_RECHECK_SECONDS)
        finally:
            self._forget(set(self._slots))
            for write in self._writes:
                write.cancel()

    def round(self, service: LockService) -> None:
        """One period: an attempt for each held slot without one running, its due checks in flight."""
        held = {key: slot for key, slot in service.ledger.slots.items() if not slot.pending}
        self._forget({key for key, attempt in self._slots.items() if _gone(held.get(key), attempt)})
        for key, slot in held.items():
            attempt = self._slots.setdefault(key, _Attempt(granted_at=slot.granted_at))
            if attempt.task is not None or slot.release_at is not None:
                continue
            pod = self._pod_of(key)
            if pod is None or str((pod.get("metadata") or {}).get("uid") or "") != slot.uid:
                continue
            plan = podprobes.pod_plan(pod)
            ip = podprobes.pod_ip(pod)
            if not plan.probed or not ip:
                continue
            targets = [t for t in podprobes.due(plan, pod, wall=self._wall()) if self._has_room()]
            if targets:
                self._in_flight += len(targets)
                attempt.task = asyncio.create_task(
                    self._attempt(key, attempt, plan, targets, ip), name=f"probe {key[0]}/{key[1]}"
                )

    def _has_room(self) -> bool:
        if self._in_flight < self._max_in_flight:
            return True
        self._metrics.probes.count("skipped")
        return False

    def _forget(self, keys: set[ledger.PodKey]) -> None:
        for key in keys:
            attempt = self._slots.pop(key)
            if attempt.task is not None:
                attempt.task.cancel()

    async def _attempt(
        self,
        key: ledger.PodKey,
        attempt: _Attempt,
        plan: podprobes.Plan,
        targets: list[podprobes.Target],
        ip: str,
    ) -> None:
        try:
            results = await asyncio.gather(*(self._check(target, ip) for target in targets))
        finally:
            self._in_flight -= len(targets)
            attempt.task = None
        paired = list(zip(targets, results, strict=True))
        attempt.tally = podprobes.counted(attempt.tally, [(t, not why) for t, why in paired])
        attempt.last = "; ".join(f"{t.container}: {t.describe(ip)} {why or 'passed'}" for t, why in paired)
        for why in results:
            self._metrics.probes.count("failed" if why else "passed")
        pod = self._pod_of(key)
        if pod is not None and podprobes.passed(plan, attempt.tally) and podprobes.all_running(pod):
            logger.info("%s/%s is ready by lockd's probe (%s): its slot ends", *key, attempt.last)
            self._service().probed_ready(key, granted_at=attempt.granted_at)
            if self._record is not None:
                # A task of its own: the slot's end (now) forgets this attempt, and must not cancel the write.
                write = asyncio.create_task(self._record(key, self._wall()), name=f"probed {key[0]}/{key[1]}")
                self._writes.add(write)
                write.add_done_callback(self._writes.discard)

    async def _check(self, target: podprobes.Target, ip: str) -> str:
        """One check: "" when it passed, else why not."""
        timeout = min(target.timeout, self._max_timeout)
        try:
            async with asyncio.timeout(timeout):
                if target.kind == "tcp":
                    _, writer = await asyncio.open_connection(ip, target.port)
                    writer.close()
                    return ""
                return await self._get(target, ip)
        except TimeoutError:
            return f"timed out after {timeout:g}s"
        except aiohttp.ClientError as err:
            return f"failed: {type(err).__name__}"
        except OSError as err:
            return f"failed: {err.strerror or type(err).__name__}"
        except ValueError as err:  # a header the HTTP client will not send
            return f"not sent: {err}"[:200]

    async def _get(self, target: podprobes.Target, ip: str) -> str:
        """Bounded by `_check`'s timeout. The path is sent as the probe spells it (`encoded`), as the
        kubelet sends it."""
        host = f"[{ip}]" if ":" in ip else ip
        url = yarl.URL(
            f"{'https' if target.https else 'http'}://{host}:{target.port}{target.path}", encoded=True
        )
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*", "Connection": "close", **dict(target.headers)}
        async with self._session.get(
            url,
            headers=headers,
            allow_redirects=False,
            ssl=False,
            auto_decompress=False,
        ) as response:
            status = response.status
        if 200 <= status < 300:
            return ""
        if 300 <= status < 400:
            return f"HTTP {status}: a redirect, not followed"
        return f"HTTP {status}"


def _gone(slot: ledger.Slot | None, attempt: _Attempt) -> bool:
    """The slot this attempt probed for has ended (or was granted anew since)."""
    return slot is None or slot.granted_at != attempt.granted_at
