"""The lock service: the ledger, the node throttles and the active policy, plus the wake-ups that make the
long poll answer within milliseconds of a slot freeing.

Decisions are made by the pure parts (`ledger`, `stagger.throttles`, `stagger.policy`); this module keeps
their state between requests, counts, logs decisions, and wakes waiting long polls when anything that
could change an answer happens (a release, an expiry, a grant, a new load sample, a policy reload).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lockd import ledger
from lockd.metrics import Metrics
from stagger import policy, throttles

logger = logging.getLogger(__name__)


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
        f"highest-priority nodePolicies entry of {source} whose nodeSelector matches "
        f"(priority {chosen.priority})",
    )


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
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cores = cores
        self.metrics = metrics
        self.clock = clock
        self.wall = wall
        self._load = load
        self.ledger = ledger.Ledger(waiter_idle_timeout=waiter_idle_timeout)
        self.counters = Counters()
        self.closing = False
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
        values = {name: getattr(self.counters, name) + increments.get(name, 0) for name in increments}
        self.counters = Counters(**{**self.counters.__dict__, **values})

    def _publish(self) -> None:
        self.metrics.slots_in_use.set(len(self.ledger.slots))
        self.metrics.queue_length.set(len(self.ledger.queue))
        self.metrics.slot_limit.set(-1 if self.throttle.limit is None else self.throttle.limit)

    def _check(self, in_use: int) -> throttles.Verdict:
        return self.throttle.check(in_use=in_use)

    # --- requests -----------------------------------------------------------------------------------

    def ask(self, *, namespace: str, name: str, uid: str) -> ledger.Outcome:
        outcome = self.ledger.ask(
            key=(namespace, name),
            uid=uid,
            now=self.clock(),
            wall=self.wall(),
            hold_timeout=self.node_policy.hold_timeout,
            check=self._check,
            on_grant=self.throttle.commit,
        )
        if isinstance(outcome, ledger.Granted) and outcome.new:
            self._count(granted=1)
            self.metrics.wait_seconds.observe(outcome.slot.waited)
            logger.info(
                "granted %s/%s after %.1fs (%d of %s slots in use, policy %s)",
                namespace,
                name,
                outcome.slot.waited,
                len(self.ledger.slots),
                self.throttle.limit if self.throttle.limit is not None else "unlimited",
                self.node_policy.name,
            )
            # The next waiter in line may be allowed too (several free slots): let it re-check now.
            self.wakeup.notify()
        self._publish()
        return outcome

    async def wait_for_slot(self, *, namespace: str, name: str, uid: str, wait: float) -> ledger.Outcome:
        """Long poll: ask, and keep asking on every wake-up until granted or `wait` seconds have passed."""
        key = (namespace, name)
        deadline = self.clock() + wait
        outcome = self.ask(namespace=namespace, name=name, uid=uid)
        waiter = self.ledger.queue.get(key)
        if waiter is not None:
            waiter.polling += 1
        try:
            while isinstance(outcome, ledger.Denied) and not self.closing:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    break
                # Rate and load denials change with time, not with events: re-check when they may have.
                timeout = (
                    remaining
                    if outcome.throttle in (None, "maxConcurrent")
                    else min(remaining, max(0.05, outcome.retry_after))
                )
                await self.wakeup.wait(timeout)
                outcome = self.ask(namespace=namespace, name=name, uid=uid)
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

    def release(self, *, namespace: str, name: str) -> ledger.Slot | None:
        slot = self.ledger.release((namespace, name))
        if slot is not None:
            self._count(released=1)
            self.metrics.slots_ended.labels(why="released").inc()
            logger.info("released %s/%s after %.1fs", namespace, name, self.clock() - slot.granted_at)
            self.wakeup.notify()
            self._publish()
        return slot

    # --- time and configuration -----------------------------------------------------------------------

    def tick(self) -> None:
        """Ends expired slots and forgets idle waiters; called by a background task."""
        now = self.clock()
        expired = self.ledger.expire(now)
        for slot in expired:
            logger.warning(
                "slot of %s/%s expired after holdTimeout %.0fs without being released",
                slot.namespace,
                slot.name,
                self.node_policy.hold_timeout if not slot.anonymous else now - slot.granted_at,
            )
            self.metrics.slots_ended.labels(why="expired").inc()
        idle = self.ledger.prune_waiters(now)
        for waiter in idle:
            logger.info("%s/%s left the queue: it stopped asking", waiter.namespace, waiter.name)
        if expired or idle:
            self._count(expired=len(expired))
            self.wakeup.notify()
            self._publish()

    def apply_policy(self, active: ActivePolicy) -> None:
        """Switch node policy without dropping held slots; the rate limit's level carries over."""
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
