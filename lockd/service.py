"""The lock service: the queue and the slots (the ledger), the node's checks for the active policy, and
the wake-ups that make the long poll answer within milliseconds of a slot freeing.

Decisions are made by the pure parts: the node's checks in their order (`stagger.nodechecks`), the queue
(`ledger`), the policy (`stagger.policy`). This module keeps their state between requests, gathers what
the gates read (`lockd.serviceparts.read_gates`), counts, logs decisions, and wakes waiting long polls
when anything that could change an answer happens (a release, an expiry, a grant, a new load sample, a
policy reload, a pod change, a dependency coming up). In cluster mode a `Finisher` completes each grant
(group pacer, pod patch) while the slot is reserved, and a `NodeState` says what the pods on the node
say (countAllStarting, waitForDaemonSets).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from lockd import ledger
from lockd.dependencies import Result as DependencyResult
from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.pods import HeldSlot, Stage
from lockd.serviceparts import Announcer, Finisher, NodeState, NoNodeState, Silent, pods_matter, read_gates
from lockd.settings import Settings
from lockd.wakeup import Wakeup
from stagger import nodechecks, policy, throttles

logger = logging.getLogger(__name__)


@dataclass
class Counters:
    """Mutable: bumped in place on every answer (a frozen copy per request was measurable)."""

    granted: int = 0
    denied: int = 0
    released: int = 0
    expired: int = 0


EndReason = Literal["released", "ready", "probedReady", "finished", "deleted"]


def token_hash(token: str) -> str:
    # aiohttp hands header bytes that are not UTF-8 over as lone surrogates (surrogateescape); a plain
    # encode() raised on them, and a DELETE with such a release token answered 500 with a traceback. The
    # bytes as sent are hashed instead: they never match a token lockd gave (those are hex), so it is a 403.
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A release token: 128 random bits. Only its hash is kept."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Refused:
    """A DELETE that may not end the slot or the wait: `status` is the HTTP answer, `reason` why."""

    status: int
    reason: str


@dataclass(frozen=True)
class LeftQueue:
    waiter: ledger.Waiter


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
        dependencies: Callable[[], Mapping[policy.Dependency, DependencyResult]] = dict,
        dependency_retry: float = 5.0,
        ready: bool = True,
        max_queue: int = 1000,
        persist: Callable[[list[ledger.Slot]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cores = cores
        self.metrics = metrics
        self.clock = clock
        self.wall = wall
        self._load = load
        # The node policy's dependencies as last checked (`lockd.dependencies`, in the background), and how
        # soon a caller they hold should ask again (the check interval).
        self._dependencies = dependencies
        self.dependency_retry = dependency_retry
        self.node_state: NodeState = node_state or NoNodeState()
        self.finisher = finisher
        self.announcer: Announcer = announcer or Silent()
        self.ledger = ledger.Ledger(waiter_idle_timeout=waiter_idle_timeout)
        self.counters = Counters()
        self.closing = False
        # Cluster mode: no grant before the pods on the node have been listed and held slots rebuilt.
        self.ready = ready
        self.max_queue = max_queue
        # Standalone `--state-file`: called with every slot after each change of the slots.
        self.persist = persist
        # One wake-up per pod that is long-polling now; only the waiters a change could admit are woken.
        self._polls: dict[ledger.PodKey, tuple[Wakeup, int]] = {}
        # The number in the next anonymous slot's name; taken only by a grant.
        self._anonymous_number = 1
        self.active = active
        self.checks = self._make_checks(active.node_policy)
        metrics.watch(
            slots_in_use=lambda: len(self.ledger.slots),
            queue_length=lambda: len(self.ledger.queue),
            slot_limit=lambda: self.checks.limit,
        )

    def _make_checks(self, node_policy: policy.NodePolicy) -> nodechecks.NodeChecks:
        return nodechecks.NodeChecks(
            node_policy=node_policy, cores=self.cores, clock=self.clock, load=self._load
        )

    @property
    def node_policy(self) -> policy.NodePolicy:
        return self.active.node_policy

    @property
    def queue_limit(self) -> int:
        """The bound on waiters: the node policy's maxQueue, else `--max-queue`."""
        configured = self.node_policy.max_queue
        return self.max_queue if configured is None else configured

    def admissible(self) -> int:
        """How many waiters a change could let in now: the free slots under maxConcurrent, else one (the
        head: with no slot limit only a time-bound throttle holds the queue, and it holds the head first)."""
        limit = self.checks.limit
        return 1 if limit is None else max(0, limit - len(self.ledger.slots))

    def wake_next(self) -> None:
        """Something changed (a release, an expiry, a grant, a load sample, a policy, a pod): wake the head
        of the queue and as many behind it as there are free slots, in queue order, and nobody when no
        slot is free (no waiter could be granted; the head of a time-bound throttle asks again on its
        own). Woken waiters are granted in queue order; each grant wakes again, so slots freed while they
        ask are filled too. A waiter between two polls keeps its place: it asks when it comes back."""
        count = self.admissible()
        if count <= 0:
            return
        for key in self.ledger.heads(self.clock(), count):
            polling = self._polls.get(key)
            if polling is not None:
                polling[0].notify()

    def wake_waiters(self, keys: list[ledger.PodKey]) -> None:
        """The controller says these pods' groups have room: end their step-aside and let them ask now."""
        woken = self.ledger.wake(keys, now=self.clock())
        for key in woken:
            polling = self._polls.get(key)
            if polling is not None:
                polling[0].notify()
        if woken:
            logger.debug("woken by the controller: %s", ", ".join(f"{ns}/{name}" for ns, name in woken))
            self.wake_next()

    def _slots_changed(self) -> None:
        if self.persist is not None:
            self.persist(list(self.ledger.slots.values()))

    def _decide(self) -> throttles.Verdict:
        """The node's checks on one more slot now (`stagger.nodechecks`), with what the gates read."""
        gates = read_gates(
            self.node_policy,
            node_state=self.node_state,
            dependencies=self._dependencies,
            dependency_retry=self.dependency_retry,
            holders=self.ledger.slots,
        )
        return self.checks.decide(in_use=len(self.ledger.slots), gates=gates)

    # --- requests -----------------------------------------------------------------------------------

    def _granted(self, slot: ledger.Slot) -> ledger.Granted:
        self.counters.granted += 1
        self.metrics.wait_seconds.observe(slot.waited)
        logger.info(
            "granted %s/%s after %.1fs (%d of %s slots in use, policy %s)",
            slot.namespace,
            slot.name,
            slot.waited,
            len(self.ledger.slots),
            self.checks.limit if self.checks.limit is not None else "unlimited",
            self.node_policy.name,
        )
        if slot.announced:
            # A pod granted at its first ask waited for nothing: no Event (one API write a pod fewer).
            self.announcer.granted(slot, node_policy=self.node_policy)
        token = new_token()
        slot.token_hash = token_hash(token)
        self._slots_changed()
        # The next waiter in line may be allowed too (several free slots): let it re-check now.
        self.wake_next()
        return ledger.Granted(slot=slot, new=True, token=token)

    async def ask(
        self, *, namespace: str, name: str, uid: str, hold: float | None = None, via: str = ""
    ) -> ledger.Outcome:
        """One ask for the pod's slot; a new slot is held at most `hold` seconds (never past the node
        policy's holdTimeout) and marked with the listener it was asked on (`via`)."""
        key = (namespace, name)
        hold_timeout = self.node_policy.hold_timeout
        result = self.ledger.ask(
            key=key,
            uid=uid,
            now=self.clock(),
            wall=self.wall(),
            hold_timeout=hold_timeout if hold is None else min(hold, hold_timeout),
            verdict=self._decide(),
            reserve=self.finisher is not None,
            max_queue=self.queue_limit,
            via=via,
        )
        if isinstance(result, ledger.Reserved):
            self.checks.commit()
            # Shielded: a caller that hangs up must not leave a reservation that is never confirmed or
            # cancelled (a pending slot never expires); the grant is finished, and the pod's next ask
            # is answered from it.
            # (Read now, right after the reservation's commit: which load readings it counted against.)
            result = await asyncio.shield(self._finish(result.slot, counted=self.checks.counted()))
        elif isinstance(result, ledger.Granted) and result.new:
            self.checks.commit()
            result = self._granted(result.slot)
        if isinstance(result, ledger.Denied):
            waiter = self.ledger.queue.get(key)
            if waiter is not None and not waiter.announced:
                waiter.announced = True
                self.announcer.waiting(waiter)
        return result

    async def _finish(self, slot: ledger.Slot, *, counted: nodechecks.Counted) -> ledger.Outcome:
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
        # The reservation took a rate-limit token and counted as load assumed until the next reading; no
        # pod starts, so both come back.
        self.checks.refund(counted=counted)
        self.ledger.cancel(
            key,
            now=now,
            blocked_until=now + verdict.retry_after,
            reason=verdict.reason,
            throttle=verdict.throttle,
        )
        # The reserved slot is free again: the next waiter may take it.
        self.wake_next()
        return ledger.Denied(
            reason=verdict.reason,
            position=self.ledger.position(key) or 1,
            retry_after=verdict.retry_after,
            throttle=verdict.throttle,
        )

    async def wait_for_slot(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        wait: float,
        alive: Callable[[], bool] = lambda: True,
        hold: float | None = None,
        via: str = "",
    ) -> ledger.Outcome:
        """Long poll: ask, and ask again when woken, until granted or `wait` seconds have passed (`hold`
        and `via` as `ask`'s).

        A waiter whose caller went away (`alive()` false, or the request cancelled when the connection
        closed) leaves the queue at once: it must neither take a slot nobody will use nor block the head."""
        if wait <= 0:
            # A plain ask (no long poll): nothing to wake, nothing to register.
            outcome = await self.ask(namespace=namespace, name=name, uid=uid, hold=hold, via=via)
            if isinstance(outcome, ledger.Denied):
                self.counters.denied += 1
            return outcome
        key = (namespace, name)
        deadline = self.clock() + wait
        polling = self._polls.get(key)
        wakeup, refs = polling if polling is not None else (Wakeup(), 0)
        self._polls[key] = (wakeup, refs + 1)
        waiter: ledger.Waiter | None = None
        gone = False
        try:
            outcome = await self.ask(namespace=namespace, name=name, uid=uid, hold=hold, via=via)
            if isinstance(outcome, ledger.Denied):
                waiter = self.ledger.start_polling(key)
            while isinstance(outcome, ledger.Denied) and not self.closing:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    break
                # A denial that clears by an event wakes this waiter; one that clears by time is asked
                # again after its hint.
                timeout = (
                    remaining
                    if nodechecks.clears_by_event(outcome.throttle)
                    else min(remaining, max(0.05, outcome.retry_after))
                )
                await wakeup.wait(timeout)
                if not alive():
                    gone = True
                    break
                outcome = await self.ask(namespace=namespace, name=name, uid=uid, hold=hold, via=via)
        except asyncio.CancelledError:
            gone = True
            raise
        finally:
            wakeup, refs = self._polls[key]
            if refs <= 1:
                del self._polls[key]
            else:
                self._polls[key] = (wakeup, refs - 1)
            if waiter is not None:
                self.ledger.stop_polling(waiter, self.clock())
                if gone and refs <= 1 and self.ledger.queue.get(key) is waiter:
                    self.ledger.leave_queue(key)
                    logger.info("%s/%s left the queue: its connection closed", namespace, name)
                    self.wake_next()
        if isinstance(outcome, ledger.Denied):
            self.counters.denied += 1
            if not gone and (self.closing or self.clock() >= deadline):
                # The long poll was the wait: the caller should open the next one at once, not sleep for
                # the throttle's hint while a slot frees (lockd times a time-bound throttle itself). So too
                # when lockd stops (a rolling upgrade): the next ask is its replacement's, which decides
                # afresh, and a hint of this one's (a pod stepping aside for its group: up to
                # --group-recheck, 60 s) would keep the init client asleep past the new lockd's start, and
                # past a max-wait shorter than that (tests/nodes/test_upgrade.py).
                outcome = ledger.Denied(
                    reason=outcome.reason,
                    position=outcome.position,
                    retry_after=0.0,
                    throttle=outcome.throttle,
                )
        return outcome

    def take_anonymous(self, *, duration: float, prefix: str = "anonymous-", via: str = "") -> ledger.Outcome:
        """A new slot with no pod to it for `duration` seconds, named `prefix` and a number no slot has: every
        anonymous grant takes a slot of its own, as pod-startup-lock's lock does (it never knows its callers,
        so there is no holder asking again to answer from the slot it holds)."""
        key = self._fresh_anonymous_key(prefix)
        outcome = self.ledger.take_anonymous(
            key=key,
            now=self.clock(),
            wall=self.wall(),
            duration=duration,
            verdict=self._decide(),
            via=via,
        )
        if isinstance(outcome, ledger.Granted):
            self._anonymous_number += 1
            self.checks.commit()
            self.counters.granted += 1
            self._slots_changed()
            logger.info("granted anonymous slot %s for %.0fs (pod-startup-lock client)", key[1], duration)
        else:
            self.counters.denied += 1
        return outcome

    def _fresh_anonymous_key(self, prefix: str) -> ledger.PodKey:
        """The next anonymous name under `prefix` that no slot holds: a slot restored from the state file may
        hold one from before a restart (the ledger refuses a name that is taken)."""
        while (key := ("", f"{prefix}{self._anonymous_number}")) in self.ledger.slots:
            self._anonymous_number += 1
        return key

    def release(self, *, namespace: str, name: str, why: EndReason = "released") -> ledger.Slot | None:
        slot = self.ledger.slots.get((namespace, name))
        if slot is None or slot.pending:
            return None
        self.ledger.release((namespace, name))
        self.counters.released += 1
        self.metrics.slots_ended.labels(why=why).inc()
        logger.info(
            "slot of %s/%s ended (%s) after %.1fs", namespace, name, why, self.clock() - slot.granted_at
        )
        self._slots_changed()
        self.wake_next()
        return slot

    def give_back(
        self, *, namespace: str, name: str, token: str, uid: str, verified: bool = False
    ) -> ledger.Slot | LeftQueue | Refused:
        """`DELETE /v1/lock`: the holder gives its slot back (with its release token, or `verified` as that
        pod by other means), or a waiter leaves the queue (with its uid, if it gave one)."""
        key = (namespace, name)
        slot = self.ledger.slots.get(key)
        if slot is not None and not slot.pending:
            if not verified and not (token and hmac.compare_digest(token_hash(token), slot.token_hash)):
                reason = (
                    "the release token is missing or wrong" if slot.token_hash else "this slot has no token"
                )
                return Refused(
                    403,
                    f"{reason}: only the caller that was granted {namespace}/{name}'s slot "
                    "may release it (header X-Stagger-Release-Token)",
                )
            released = self.release(namespace=namespace, name=name)
            assert released is not None
            return released
        waiter = self.ledger.queue.get(key)
        if waiter is not None:
            if waiter.uid and uid != waiter.uid and not verified:
                return Refused(403, f"uid does not match the waiter {namespace}/{name}")
            self.ledger.leave_queue(key)
            logger.info("%s/%s left the queue: it asked to (DELETE)", namespace, name)
            polling = self._polls.get(key)
            if polling is not None:
                polling[0].notify()
            self.wake_next()
            return LeftQueue(waiter)
        return Refused(404, f"{namespace}/{name} holds no slot and is not waiting on this node")

    def current_reason(self, waiter: ledger.Waiter) -> str:
        """Why this waiter waits, as of now (its last answer may be stale): for `/status`."""
        now = self.clock()
        if waiter.key in self.ledger.slots:
            return "finishing the grant"
        if waiter.blocked_until > now:
            return waiter.reason
        ahead = self.ledger.ahead_of(waiter, now)
        if ahead:
            return f"{ledger.pods(ahead)} asked first (first come, first served)"
        verdict = self._decide()
        return verdict.reason if not verdict.allowed else "next in line: a slot is free"

    # --- pods (cluster mode) ------------------------------------------------------------------------

    def pod_changed(self, key: ledger.PodKey, stage: Stage) -> None:
        """A pod on the node changed: its slot ends when it is Ready (not before minHold), finished or gone."""
        if stage == "starting":
            # A pod still starting changes answers only through the gates that read the pods; otherwise
            # waking every long poll for each status update of each pod would be wasted work.
            if pods_matter(self.node_policy):
                self.wake_next()
            return
        slot = self.ledger.slots.get(key)
        if slot is not None and not slot.pending:
            if stage == "ready":
                self._end_at_ready(key, slot, why="ready")
            else:
                self.release(namespace=key[0], name=key[1], why=stage)
        if stage in ("finished", "deleted") and self.ledger.leave_queue(key) is not None:
            logger.info("%s/%s left the queue: pod %s", key[0], key[1], stage)
            self.metrics.waits_given_up.labels(why="podGone").inc()
        elif stage == "ready" and self._not_polling(key) and self.ledger.leave_queue(key) is not None:
            # Ready while still waiting: its init client gave up (fail-open) and the pod started anyway.
            # (A waiter long-polling right now is asking, whatever an older view of its pod says.)
            logger.warning("%s/%s left the queue: Ready without a slot (its init client gave up)", *key)
            self.metrics.waits_given_up.labels(why="startedWithoutSlot").inc()
        self.wake_next()

    def probed_ready(self, key: ledger.PodKey, *, granted_at: float) -> None:
        """lockd's own run of the pod's probes passed (lockd/prober.py): the slot granted at `granted_at`
        ends as at Ready (not before minHold); a slot since ended, or granted anew, is left alone."""
        slot = self.ledger.slots.get(key)
        if slot is None or slot.pending or slot.granted_at != granted_at or slot.release_at is not None:
            return
        self._end_at_ready(key, slot, why="probedReady")

    def _end_at_ready(self, key: ledger.PodKey, slot: ledger.Slot, *, why: EndReason) -> None:
        """The pod is ready: its slot ends now, or at minHold after the grant if that is later (`tick`).
        The first reason given keeps the slot's `release_why`; a later one only confirms the moment."""
        hold_until = slot.granted_at + self.node_policy.min_hold
        if self.clock() >= hold_until:
            self.release(namespace=key[0], name=key[1], why=why)
        elif slot.release_at is None:
            slot.release_at, slot.release_why = hold_until, why

    def _not_polling(self, key: ledger.PodKey) -> bool:
        waiter = self.ledger.queue.get(key)
        return waiter is not None and waiter.polling == 0

    def restore(self, held: list[HeldSlot]) -> None:
        """After a restart: slots recorded on pods (`granted-at`) count again, with their original age."""
        now, wall = self.clock(), self.wall()
        for item in held:
            granted_at = now - max(0.0, wall - item.granted_wall)
            self.ledger.restore(
                ledger.Slot(
                    namespace=item.namespace,
                    name=item.name,
                    uid=item.uid,
                    granted_at=granted_at,
                    granted_wall=item.granted_wall,
                    expires_at=granted_at + self.node_policy.hold_timeout,
                )
            )
        if held:
            logger.info("rebuilt %d held slots from the pods on this node", len(held))

    # --- time and configuration -----------------------------------------------------------------------

    def tick(self) -> None:
        """Ends due and expired slots and forgets idle waiters; called by a background task."""
        now = self.clock()
        due = self.ledger.due_releases(now)
        for slot in due:
            self.metrics.slots_ended.labels(why=slot.release_why).inc()
            logger.info(
                "slot of %s/%s ended (%s, after minHold)", slot.namespace, slot.name, slot.release_why
            )
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
            self.metrics.waits_given_up.labels(why="stoppedAsking").inc()
        if due or expired:
            self._slots_changed()
        if due or expired or idle:
            self.counters.released += len(due)
            self.counters.expired += len(expired)
            self.wake_next()

    def apply_policy(self, active: ActivePolicy) -> None:
        """Switch node policy without dropping held slots; the rate limit's level carries over."""
        if active == self.active:
            # Node objects change often (status, heartbeats); only a different policy is worth a switch.
            return
        previous = self.active
        checks = self._make_checks(active.node_policy)
        checks.carry_over(self.checks)
        self.active, self.checks = active, checks
        if previous.node_policy != active.node_policy:
            logger.info("node policy now %s (%s)", active.node_policy.name, active.why)
        self.wake_next()

    def load_changed(self) -> None:
        self.wake_next()

    def close(self) -> None:
        """Shutting down: answer every long poll now instead of keeping the pod's grace period busy, each
        saying ask again at once (`wait_for_slot`): the replacement lockd decides."""
        self.closing = True
        for wakeup, _ in self._polls.values():
            wakeup.notify()


def build_service(
    settings: Settings,
    *,
    active: ActivePolicy,
    cores: int,
    metrics: Metrics,
    load: Callable[[], throttles.LoadSample],
    persist: Callable[[list[ledger.Slot]], None] | None = None,
    node_state: NodeState | None = None,
    finisher: Finisher | None = None,
    announcer: Announcer | None = None,
    dependencies: Callable[[], Mapping[policy.Dependency, DependencyResult]] = dict,
) -> LockService:
    """The service for these settings, with its parts: the state file's `persist` standalone; in cluster
    mode the node's pods (`node_state`), the grant finisher and the Event announcer, which need the API
    server's session and so are made when the app starts (`lockd.clustermode`). A cluster-mode service
    grants nothing before the node's pods are listed and their slots rebuilt (`ready`)."""
    return LockService(
        active=active,
        cores=cores,
        metrics=metrics,
        waiter_idle_timeout=settings.queue.waiter_idle_timeout,
        load=load,
        ready=settings.standalone,
        max_queue=settings.queue.max_queue,
        persist=persist,
        node_state=node_state,
        finisher=finisher,
        announcer=announcer,
        dependencies=dependencies,
        dependency_retry=settings.node.dependency_interval,
    )
