"""The lock service: the ledger, the node throttles and the active policy, plus the wake-ups that make the
long poll answer within milliseconds of a slot freeing.

Decisions are made by the pure parts (`ledger`, `stagger.throttles`, `stagger.policy`, `lockd.pods`);
this module keeps their state between requests, counts, logs decisions, and wakes waiting long polls when
anything that could change an answer happens (a release, an expiry, a grant, a new load sample, a policy
reload, a pod change). In cluster mode a `Finisher` completes each grant (group pacer, pod patch) while
the slot is reserved, and a `NodeState` adds what the pods on the node say (countAllStarting,
waitForDaemonSets).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from lockd import ledger
from lockd.metrics import Metrics
from lockd.pods import HeldSlot, Stage
from stagger import policy, throttles

logger = logging.getLogger(__name__)

# How soon to look again at the DaemonSet gate when nothing else wakes us (pod events usually do).
DAEMONSET_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class Counters:
    granted: int = 0
    denied: int = 0
    released: int = 0
    expired: int = 0


@dataclass(frozen=True)
class ActivePolicy:
    node_policy: policy.NodePolicy
    source: str  # the file path, or "built-in"
    why: str


def choose_node_policy(
    *, policy_file: policy.PolicyFile | None, source: str, node_labels: Mapping[str, str]
) -> ActivePolicy:
    """Pure: which node policy applies to a node with these labels, and a sentence saying why."""
    if policy_file is None:
        return ActivePolicy(policy.DEFAULT_NODE_POLICY, "built-in", "no policy file given: built-in default")
    if not policy_file.node_policies:
        return ActivePolicy(
            policy.DEFAULT_NODE_POLICY, "built-in", f"{source} has no nodePolicies: built-in default"
        )
    chosen = policy.select_node_policy(policy_file.node_policies, node_labels)
    if chosen is None:
        return ActivePolicy(
            policy.DEFAULT_NODE_POLICY,
            "built-in",
            f"no nodePolicies entry of {source} matches the node labels: built-in default",
        )
    return ActivePolicy(
        chosen,
        source,
        f"highest-priority nodePolicies entry of {source} whose nodeSelector matches (priority {chosen.priority})",
    )


def daemonset_verdict(waiting: list[str]) -> throttles.Verdict:
    if not waiting:
        return throttles.ALLOWED
    shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
    return throttles.Verdict(
        allowed=False,
        reason=f"waiting for DaemonSet pods on this node to be Ready: {shown} (waitForDaemonSets)",
        throttle="daemonSets",
        retry_after=DAEMONSET_RETRY_SECONDS,
    )


class NodeState(Protocol):
    """What the pods on the node say beyond the slots lockd holds (cluster mode)."""

    def starting_elsewhere(self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]) -> int: ...

    def daemonsets_waiting(self) -> list[str]: ...


class Finisher(Protocol):
    """Completes a reserved grant (asks the group pacer, records the grant on the pod) or says why not."""

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict: ...


class Announcer(Protocol):
    def waiting(self, waiter: ledger.Waiter) -> None: ...

    def granted(self, slot: ledger.Slot, *, node_policy: policy.NodePolicy) -> None: ...


class NoNodeState:
    def starting_elsewhere(self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]) -> int:
        return 0

    def daemonsets_waiting(self) -> list[str]:
        return []


class Silent:
    def waiting(self, waiter: ledger.Waiter) -> None:
        return None

    def granted(self, slot: ledger.Slot, *, node_policy: policy.NodePolicy) -> None:
        return None


EndReason = Literal["released", "ready", "finished", "deleted"]


class Wakeup:
    """Edge-triggered broadcast: every waiter blocked in `wait` returns after the next `notify`."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seconds: float) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout=max(0.0, seconds))


class LockService:
    def __init__(
        self,
        *,
        active: ActivePolicy,
        cores: int,
        metrics: Metrics,
        waiter_idle_timeout: float,
        load: Callable[[], throttles.LoadSample],
        node_state: NodeState | None = None,
        finisher: Finisher | None = None,
        announcer: Announcer | None = None,
        ready: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cores = cores
        self.metrics = metrics
        self.clock = clock
        self.wall = wall
        self._load = load
        self.node_state: NodeState = node_state or NoNodeState()
        self.finisher = finisher
        self.announcer: Announcer = announcer or Silent()
        self.ledger = ledger.Ledger(waiter_idle_timeout=waiter_idle_timeout)
        self.counters = Counters()
        self.closing = False
        # Cluster mode: no grant before the pods on the node have been listed and held slots rebuilt.
        self.ready = ready
        self.wakeup = Wakeup()
        self._anonymous_ids = itertools.count(1)
        self.active = active
        self.throttle = self._make_throttle(active.node_policy)
        self._publish()

    def _make_throttle(self, node_policy: policy.NodePolicy) -> throttles.NodeThrottle:
        return throttles.NodeThrottle(
            config=node_policy.throttle, cores=self.cores, clock=self.clock, load=self._load
        )

    @property
    def node_policy(self) -> policy.NodePolicy:
        return self.active.node_policy

    def _count(self, **increments: int) -> None:
        self.counters = replace(
            self.counters, **{name: getattr(self.counters, name) + n for name, n in increments.items()}
        )

    def _publish(self) -> None:
        self.metrics.slots_in_use.set(len(self.ledger.slots))
        self.metrics.queue_length.set(len(self.ledger.queue))
        self.metrics.slot_limit.set(-1 if self.throttle.limit is None else self.throttle.limit)

    def _check(self, in_use: int) -> throttles.Verdict:
        node_policy = self.node_policy
        if node_policy.wait_for_daemonsets:
            gate = daemonset_verdict(self.node_state.daemonsets_waiting())
            if not gate.allowed:
                return gate
        extra = 0
        if node_policy.count_all_starting:
            extra = self.node_state.starting_elsewhere(node_policy, set(self.ledger.slots))
        verdict = self.throttle.check(in_use=in_use + extra)
        if extra and verdict.throttle == "maxConcurrent":
            verdict = replace(
                verdict,
                reason=(
                    f"{in_use + extra} of {self.throttle.limit} slots in use: {in_use} granted + {extra} other "
                    "pods starting (maxConcurrent, countAllStarting)"
                ),
            )
        return verdict

    # --- requests -----------------------------------------------------------------------------------

    def _granted(self, slot: ledger.Slot) -> ledger.Granted:
        self._count(granted=1)
        self.metrics.wait_seconds.observe(slot.waited)
        logger.info(
            "granted %s/%s after %.1fs (%d of %s slots in use, policy %s)",
            slot.namespace,
            slot.name,
            slot.waited,
            len(self.ledger.slots),
            self.throttle.limit if self.throttle.limit is not None else "unlimited",
            self.node_policy.name,
        )
        self.announcer.granted(slot, node_policy=self.node_policy)
        # The next waiter in line may be allowed too (several free slots): let it re-check now.
        self.wakeup.notify()
        return ledger.Granted(slot=slot, new=True)

    async def ask(self, *, namespace: str, name: str, uid: str) -> ledger.Outcome:
        key = (namespace, name)
        result = self.ledger.ask(
            key=key,
            uid=uid,
            now=self.clock(),
            wall=self.wall(),
            hold_timeout=self.node_policy.hold_timeout,
            check=self._check,
            on_grant=self.throttle.commit,
            reserve=self.finisher is not None,
        )
        if isinstance(result, ledger.Reserved):
            result = await self._finish(result.slot)
        elif isinstance(result, ledger.Granted) and result.new:
            result = self._granted(result.slot)
        if isinstance(result, ledger.Denied):
            waiter = self.ledger.queue.get(key)
            if waiter is not None and not waiter.announced:
                waiter.announced = True
                self.announcer.waiting(waiter)
        self._publish()
        return result

    async def _finish(self, slot: ledger.Slot) -> ledger.Outcome:
        assert self.finisher is not None
        key = (slot.namespace, slot.name)
        wall = self.wall()
        verdict = await self.finisher.finish(slot, wall=wall)
        now = self.clock()
        if verdict.allowed:
            confirmed = self.ledger.confirm(key, now=now, wall=wall)
            if confirmed is not None:
                return self._granted(confirmed)
            verdict = throttles.Verdict(
                allowed=False, reason="the pod changed while its grant was being recorded", retry_after=1.0
            )
        self.ledger.cancel(
            key,
            now=now,
            blocked_until=now + verdict.retry_after,
            reason=verdict.reason,
            throttle=verdict.throttle,
        )
        # The reserved slot is free again: the next waiter may take it.
        self.wakeup.notify()
        return ledger.Denied(
            reason=verdict.reason,
            position=self.ledger.position(key) or 1,
            retry_after=verdict.retry_after,
            throttle=verdict.throttle,
        )

    async def wait_for_slot(self, *, namespace: str, name: str, uid: str, wait: float) -> ledger.Outcome:
        """Long poll: ask, and keep asking on every wake-up until granted or `wait` seconds have passed."""
        key = (namespace, name)
        deadline = self.clock() + wait
        outcome = await self.ask(namespace=namespace, name=name, uid=uid)
        waiter = self.ledger.queue.get(key)
        if waiter is not None:
            waiter.polling += 1
        try:
            while isinstance(outcome, ledger.Denied) and not self.closing:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    break
                # Slot denials change with events; rate, load, gate and group denials with time.
                timeout = (
                    remaining
                    if outcome.throttle in (None, "maxConcurrent")
                    else min(remaining, max(0.05, outcome.retry_after))
                )
                await self.wakeup.wait(timeout)
                outcome = await self.ask(namespace=namespace, name=name, uid=uid)
        finally:
            if waiter is not None:
                waiter.polling -= 1
                waiter.last_seen = self.clock()
        if isinstance(outcome, ledger.Denied):
            self._count(denied=1)
        return outcome

    def take_anonymous(self, *, duration: float) -> ledger.Outcome:
        key = ("", f"anonymous-{next(self._anonymous_ids)}")
        outcome = self.ledger.take_anonymous(
            key=key,
            now=self.clock(),
            wall=self.wall(),
            duration=duration,
            check=self._check,
            on_grant=self.throttle.commit,
        )
        if isinstance(outcome, ledger.Granted):
            self._count(granted=1)
            logger.info("granted an anonymous slot for %.0fs (pod-startup-lock client)", duration)
        else:
            self._count(denied=1)
        self._publish()
        return outcome

    def release(self, *, namespace: str, name: str, why: EndReason = "released") -> ledger.Slot | None:
        slot = self.ledger.slots.get((namespace, name))
        if slot is None or slot.pending:
            return None
        self.ledger.release((namespace, name))
        self._count(released=1)
        self.metrics.slots_ended.labels(why=why).inc()
        logger.info(
            "slot of %s/%s ended (%s) after %.1fs", namespace, name, why, self.clock() - slot.granted_at
        )
        self.wakeup.notify()
        self._publish()
        return slot

    # --- pods (cluster mode) ------------------------------------------------------------------------

    def pod_changed(self, key: ledger.PodKey, stage: Stage) -> None:
        """A pod on the node changed: its slot ends when it is Ready (not before minHold), finished or gone."""
        if stage == "starting":
            # A pod still starting changes answers only through countAllStarting or waitForDaemonSets;
            # otherwise waking every long poll for each status update of each pod would be wasted work.
            if self.node_policy.count_all_starting or self.node_policy.wait_for_daemonsets:
                self.wakeup.notify()
            return
        slot = self.ledger.slots.get(key)
        if slot is not None and not slot.pending:
            hold_until = slot.granted_at + self.node_policy.min_hold
            if stage == "ready" and self.clock() < hold_until:
                slot.release_at = hold_until
            else:
                self.release(namespace=key[0], name=key[1], why=stage)
        if stage in ("finished", "deleted") and self.ledger.leave_queue(key) is not None:
            logger.info("%s/%s left the queue: pod %s", key[0], key[1], stage)
        self.wakeup.notify()
        self._publish()

    def restore(self, held: list[HeldSlot]) -> None:
        """After a restart: slots recorded on pods (`granted-at`) count again, with their original age."""
        now, wall = self.clock(), self.wall()
        for item in held:
            key = (item.namespace, item.name)
            if key in self.ledger.slots:
                continue
            granted_at = now - max(0.0, wall - item.granted_wall)
            self.ledger.slots[key] = ledger.Slot(
                namespace=item.namespace,
                name=item.name,
                uid=item.uid,
                granted_at=granted_at,
                granted_wall=item.granted_wall,
                expires_at=granted_at + self.node_policy.hold_timeout,
            )
        if held:
            logger.info("rebuilt %d held slots from the pods on this node", len(held))
        self._publish()

    # --- time and configuration -----------------------------------------------------------------------

    def tick(self) -> None:
        """Ends due and expired slots and forgets idle waiters; called by a background task."""
        now = self.clock()
        due = self.ledger.due_releases(now)
        for slot in due:
            self.metrics.slots_ended.labels(why="ready").inc()
            logger.info("slot of %s/%s ended (ready, after minHold)", slot.namespace, slot.name)
        expired = self.ledger.expire(now)
        for slot in expired:
            logger.warning(
                "slot of %s/%s expired after %.0fs without being released (holdTimeout)",
                slot.namespace,
                slot.name,
                now - slot.granted_at,
            )
            self.metrics.slots_ended.labels(why="expired").inc()
        idle = self.ledger.prune_waiters(now)
        for waiter in idle:
            logger.info("%s/%s left the queue: it stopped asking", waiter.namespace, waiter.name)
        if due or expired or idle:
            self._count(released=len(due), expired=len(expired))
            self.wakeup.notify()
            self._publish()

    def apply_policy(self, active: ActivePolicy) -> None:
        """Switch node policy without dropping held slots; the rate limit's level carries over."""
        if active == self.active:
            # Node objects change often (status, heartbeats); only a different policy is worth a switch.
            return
        previous = self.active
        throttle = self._make_throttle(active.node_policy)
        throttle.carry_over(self.throttle)
        self.active, self.throttle = active, throttle
        if previous.node_policy != active.node_policy:
            logger.info("node policy now %s (%s)", active.node_policy.name, active.why)
        self.wakeup.notify()
        self._publish()

    def load_changed(self) -> None:
        self.wakeup.notify()

    def close(self) -> None:
        """Shutting down: answer every long poll now instead of keeping the pod's grace period busy."""
        self.closing = True
        self.wakeup.notify()
