"""The shell of leader election, `LeaderElector`: reads the Lease, applies `decide`, and writes with an
update conditional on the resourceVersion it read (a 409 means someone else wrote first: it reads again).
It renews every `retry_period`; when it has not renewed for `renew_deadline` it stops leading, which is
before any other replica can see the lease expire (`renew_deadline < lease_duration`). While leading it
labels its own pod `<prefix>/leader: "1"` (a Service selects that label, so lockd reaches the leader).
When cancelled, it stops leading, releases the Lease (client-go's ReleaseOnCancel) and removes the label.

Unlike client-go's `Run`, which returns when leadership is lost (and most programs then exit),
`LeaderElector.run` goes back to campaigning: a replica that lost the lease can lead again later."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stagger.kube import LEASES, PODS, ApiError, RestClient
from stagger.names import Names
from stagger.waiting import stop_tasks
from webhook.leader.lease import Action, LeaseRecord, Observed, Timings, decide, leader_label, release_record

__all__ = ["Hook", "LeaderElector", "LeaderState", "NewLeaderHook"]


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderState:
    """What the app publishes (`stagger_controller_leader`, `/status`)."""

    identity: str
    is_leader: bool
    leader: str | None  # the holder as last seen (None: nobody, or not read yet)
    transitions: int  # the Lease's leaseTransitions as last read or written
    leader_changes: int  # how many times this replica saw the holder change
    last_error: str | None  # the last failed API call (Lease or pod label); None once one succeeds

    def as_json(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "isLeader": self.is_leader,
            "leader": self.leader,
            "transitions": self.transitions,
            "leaderChanges": self.leader_changes,
            "lastError": self.last_error,
        }


Hook = Callable[[], object]


NewLeaderHook = Callable[[str | None], object]


class _Lost(Exception):
    """Another replica holds the lease, or (while leading) the Lease was deleted; the message says which."""


class LeaderElector:
    """One replica's candidacy for the Lease `namespace/name`. Run it with `await run()` (until
    cancelled); read `is_leader`, `leader` and `state`; await `changed()` or `wait_for(...)`.

    Hooks are plain callables, called from the election task: `on_started_leading()` right after the
    lease is acquired, `on_stopped_leading()` as soon as leading stops (renew deadline passed, another
    holder seen, or shutdown), before the lease is released, and `on_new_leader(identity | None)` when
    the holder seen changes. They must not block; start tasks for longer work. An exception in a hook is
    logged and ignored.
    """

    def __init__(
        self,
        *,
        client: RestClient,
        namespace: str,
        name: str,
        identity: str,
        timings: Timings = Timings(),  # noqa: B008 (frozen, never changed)
        names: Names = Names(),  # noqa: B008 (frozen, never changed)
        pod_name: str | None = None,
        pod_namespace: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_started_leading: Hook | None = None,
        on_stopped_leading: Hook | None = None,
        on_new_leader: NewLeaderHook | None = None,
        release_on_cancel: bool = True,
    ) -> None:
        if not identity:
            raise ValueError("identity: must not be empty")
        if (pod_name is None) != (pod_namespace is None):
            raise ValueError("pod_name and pod_namespace: give both or neither")
        self._client = client
        self._namespace = namespace
        self._name = name
        self._identity = identity
        self._timings = timings
        self._label = leader_label(names)
        self._pod = (pod_namespace, pod_name) if pod_name is not None and pod_namespace is not None else None
        self._clock = clock
        self._wall = wall_clock
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._release_on_cancel = release_on_cancel
        # What was last read or written: the Lease object (for its resourceVersion) and its record.
        self._lease: dict[str, Any] | None = None
        self._observed: Observed | None = None
        self._unanswered = False  # a write of ours may have landed without our knowing (no answer)
        self._leading = False
        self._deadline = -math.inf  # while leading: when leading stops unless renewed
        self._leader: str | None = None
        self._transitions = 0
        self._leader_changes = 0
        self._errors: dict[str, str] = {}  # the last failure of each kind of call, until one succeeds
        self._changed = asyncio.Event()
        self._running = False

    # --- reading -------------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the lease and is within its renew deadline (checked on every
        read, so it turns false at the deadline even if the election task is late)."""
        return self._leading and self._clock() < self._deadline

    @property
    def leader(self) -> str | None:
        """The holder identity as last seen (this replica's own while it leads), or None."""
        return self._leader

    @property
    def state(self) -> LeaderState:
        return LeaderState(
            identity=self._identity,
            is_leader=self.is_leader,
            leader=self._leader,
            transitions=self._transitions,
            leader_changes=self._leader_changes,
            last_error="; ".join(self._errors.values()) or None,
        )

    async def changed(self) -> None:
        """Returns at the next change of `is_leader` or `leader`."""
        await self._changed.wait()

    async def wait_for(self, predicate: Callable[[LeaderState], bool]) -> LeaderState:
        """Returns the state once `predicate(state)` holds (at once if it already does)."""
        while True:
            changed = self._changed
            state = self.state
            if predicate(state):
                return state
            await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # --- running -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead, step down, campaign again, until cancelled; then stop leading, release the
        lease if this replica holds it and remove the pod label (bounded by the renew deadline)."""
        if self._running:
            raise RuntimeError("LeaderElector.run is already running")
        self._running = True
        labeller = asyncio.create_task(self._keep_label()) if self._pod is not None else None
        try:
            while True:
                await self._campaign()
                await self._lead()
        finally:
            self._running = False
            await self._shut_down(labeller)

    async def _campaign(self) -> None:
        """Tries every retry period until this replica holds the lease."""
        logger.info("leader election: %s is a candidate for lease %s", self._identity, self._describe())
        while True:
            try:
                async with asyncio.timeout(self._timings.renew_deadline):
                    sent = await self._try_acquire_or_renew(leading=False)
            except _Lost:
                pass
            except Exception as err:  # an API or network failure: try again later
                self._failed("lease", err)
            else:
                if self._clock() < sent + self._timings.renew_deadline:
                    self._start_leading(sent)
                    return
            await asyncio.sleep(self._timings.retry_period)

    async def _lead(self) -> None:
        """Renews every retry period; returns when leading stops."""
        while True:
            await asyncio.sleep(max(0.0, min(self._timings.retry_period, self._deadline - self._clock())))
            remaining = self._deadline - self._clock()
            if remaining <= 0:
                self._stop_leading(f"not renewed for {self._timings.renew_deadline:g}s (renew deadline)")
                return
            try:
                async with asyncio.timeout(remaining):
                    sent = await self._try_acquire_or_renew(leading=True)
            except _Lost as lost:
                self._stop_leading(str(lost))
                return
            except Exception as err:  # retried until the renew deadline, checked above
                self._failed("lease", err)
                continue
            self._deadline = max(self._deadline, sent + self._timings.renew_deadline)

    async def _try_acquire_or_renew(self, *, leading: bool) -> float:
        """One try: read, decide, write. Returns the time the successful write was sent (the renew
        deadline counts from there); raises _Lost while another replica holds the lease (or, `leading`,
        when the Lease is gone: another replica may be creating it, so stop first and campaign), or the
        API error. A 409 (someone wrote between our read and our write) is tried again at once, once."""
        for attempt in range(2):
            try:
                lease: dict[str, Any] | None = await self._client.get(
                    LEASES, name=self._name, namespace=self._namespace
                )
            except ApiError as err:
                if err.status != 404:
                    raise
                lease = None
            decision = decide(
                None if lease is None else LeaseRecord.from_lease(lease),
                self._observed,
                identity=self._identity,
                timings=self._timings,
                now=self._clock(),
                wall=self._wall(),
            )
            self._lease, self._observed = lease, decision.observed
            self._errors.pop("lease", None)  # read
            if decision.observed is not None:
                self._saw(decision.observed.record)
            if decision.record is None:
                raise _Lost(f"lease taken over by {self._leader}")
            if leading and decision.action is Action.CREATE:
                raise _Lost("lease deleted")
            sent = self._clock()
            self._unanswered = True
            try:
                written = await self._write(lease, decision.record)
            except ApiError as err:
                self._unanswered = False
                if err.status != 409 or attempt:
                    raise
                logger.debug("leader election: %s on lease %s, reading it again", err, self._describe())
                continue
            self._lease, self._unanswered = written, False
            record = LeaseRecord.from_lease(written)
            self._observed = Observed(record, self._clock())
            self._saw(record)
            return sent
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, lease: Mapping[str, Any] | None, record: LeaseRecord) -> dict[str, Any]:
        """Create the Lease, or update it conditionally on the resourceVersion read (the whole spec is
        replaced, as client-go's LeaseLock.Update does)."""
        if lease is None:
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": record.to_spec(),
            }
            return await self._client.create(LEASES, body, namespace=self._namespace)
        body = {
            **lease,
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "spec": record.to_spec(),
        }
        return await self._client.request(
            "PUT", LEASES.path(namespace=self._namespace, name=self._name), body=body
        )

    def _saw(self, record: LeaseRecord) -> None:
        self._transitions = record.transitions
        leader = record.holder or None
        if leader == self._leader:
            return
        logger.info("leader election: lease %s is held by %s", self._describe(), leader or "nobody")
        self._leader = leader
        self._leader_changes += 1
        self._notify()
        if self._on_new_leader is not None:
            self._call("on_new_leader", self._on_new_leader, leader)

    def _start_leading(self, sent: float) -> None:
        self._leading = True
        self._deadline = sent + self._timings.renew_deadline
        logger.info("leader election: %s leads (lease %s)", self._identity, self._describe())
        self._notify()
        if self._on_started is not None:
            self._call("on_started_leading", self._on_started)

    def _stop_leading(self, why: str, *, level: int = logging.WARNING) -> None:
        if not self._leading:
            return
        self._leading = False
        self._deadline = -math.inf
        logger.log(level, "leader election: %s stopped leading: %s", self._identity, why)
        self._notify()
        if self._on_stopped is not None:
            self._call("on_stopped_leading", self._on_stopped)

    def _call(self, what: str, hook: Callable[..., object], *args: object) -> None:
        try:
            hook(*args)
        except Exception:
            logger.exception("leader election: %s hook failed", what)

    def _failed(self, what: str, err: BaseException) -> None:
        if isinstance(err, TimeoutError):
            text = f"{what}: timed out"
        elif isinstance(err, ApiError):
            text = f"{what}: {err}"
        else:
            text = f"{what}: {type(err).__name__}: {err}"
        # One warning per distinct error, not one every retry period.
        log = logger.debug if text == self._errors.get(what) else logger.warning
        log("leader election (%s): %s", self._describe(), text)
        self._errors[what] = text

    def _describe(self) -> str:
        return f"{self._namespace}/{self._name}"

    # --- the pod label -------------------------------------------------------------------------------

    async def _keep_label(self) -> None:
        """Keeps `<prefix>/leader: "1"` on this replica's pod exactly while it leads. It starts by
        removing a label a previous run of this pod may have left. Failures are retried every retry
        period."""
        applied: bool | None = None
        while True:
            changed = self._changed
            wanted = self.is_leader
            if wanted == applied:
                await changed.wait()
                continue
            try:
                async with asyncio.timeout(self._timings.renew_deadline):
                    await self._set_label(wanted)
            except Exception as err:  # never fatal: tried again
                self._failed("pod label", err)
                applied = None
                await asyncio.sleep(self._timings.retry_period)
                continue
            self._errors.pop("pod label", None)
            applied = wanted

    async def _set_label(self, on: bool) -> None:
        assert self._pod is not None
        namespace, name = self._pod
        await self._client.patch(
            PODS,
            name=name,
            namespace=namespace,
            patch={"metadata": {"labels": {self._label: "1" if on else None}}},
        )
        logger.info(
            "leader election: %s=%s on pod %s/%s", self._label, "1" if on else "(none)", namespace, name
        )

    # --- shutting down -------------------------------------------------------------------------------

    async def _shut_down(self, labeller: asyncio.Task[None] | None) -> None:
        self._stop_leading("shutting down", level=logging.INFO)
        if labeller is not None:
            await stop_tasks([labeller])
        try:
            async with asyncio.timeout(self._timings.renew_deadline):
                if self._release_on_cancel:
                    await self._release()
                if self._pod is not None:
                    await self._set_label(False)
        except Exception as err:  # shutting down: the lease expires on its own
            self._failed("shutdown", err)

    async def _release(self) -> None:
        """Gives the lease up if it says this replica holds it, with an update conditional on the
        resourceVersion just read (a lease someone else took meanwhile is left alone). Like client-go's
        release (kubernetes/client-go, tools/leaderelection/leaderelection.go, which also reads the lock
        first since ReleaseOnCancel races with a renewal whose answer was lost): see `release_record`."""
        ours = self._observed is not None and self._observed.record.holder == self._identity
        if not ours and not self._unanswered:
            return  # never held it, or saw another holder since: nothing to read
        lease = await self._client.get(LEASES, name=self._name, namespace=self._namespace)
        current = LeaseRecord.from_lease(lease)
        if current.holder != self._identity:
            return
        try:
            written = await self._write(lease, release_record(current, wall=self._wall()))
        except ApiError as err:
            if err.status == 409:
                logger.info("leader election: lease %s changed meanwhile; not released", self._describe())
                return
            raise
        self._lease = written
        self._observed = Observed(LeaseRecord.from_lease(written), self._clock())
        self._saw(self._observed.record)
        logger.info("leader election: %s released lease %s", self._identity, self._describe())
