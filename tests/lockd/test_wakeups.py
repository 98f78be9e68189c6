"""Who a change wakes: the head of the queue and as many behind it as there are free slots, in queue order,
and nobody when no slot is free. Checked on `LockService` itself with long polls in progress (no HTTP):
every combination of slot limit, holders, waiters and releases in a small table, then what the woken
waiters are granted, and that a load sample or a policy that frees nothing wakes nobody."""

from __future__ import annotations

import asyncio
import itertools

from lockd import ledger
from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.pods import OtherStarting
from lockd.service import LockService
from stagger import policy, throttles


def _policy(limit: int) -> ActivePolicy:
    node_policy = policy.NodePolicy(
        name=f"max-{limit}",
        throttle=policy.ThrottleConfig(max_concurrent=policy.MaxConcurrent(value=limit)),
        hold_timeout=3600.0,
    )
    return ActivePolicy(node_policy, "test", "test")


class Spy:
    """Records which pods' long polls were woken, in order."""

    def __init__(self, service: LockService) -> None:
        self.woken: list[str] = []
        for key, (wakeup, _) in service._polls.items():
            self._watch(key, wakeup)

    def _watch(self, key: ledger.PodKey, wakeup: object) -> None:
        original = wakeup.notify  # type: ignore[attr-defined]

        def notify() -> None:
            self.woken.append(key[1])
            original()

        wakeup.notify = notify  # type: ignore[attr-defined]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _scene(
    limit: int, holders: int, waiters: int
) -> tuple[LockService, list[asyncio.Task[ledger.Outcome]]]:
    service = LockService(
        active=_policy(limit),
        cores=1,
        metrics=Metrics(),
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
    )
    for i in range(holders):
        granted = await service.ask(namespace="t", name=f"h{i}", uid="")
        assert isinstance(granted, ledger.Granted)
    polls = [
        asyncio.create_task(service.wait_for_slot(namespace="t", name=f"w{i}", uid="", wait=30.0))
        for i in range(waiters)
    ]
    await _settle()
    return service, polls


async def _finish(service: LockService, polls: list[asyncio.Task[ledger.Outcome]]) -> None:
    service.close()
    await asyncio.gather(*polls)


async def test_a_release_wakes_exactly_the_waiters_that_can_now_be_granted() -> None:
    for limit, holders, waiters in itertools.product((1, 2, 3), (0, 1, 2, 3), range(5)):
        if holders > limit:
            continue
        service, polls = await _scene(limit, holders, waiters)
        queued = waiters if holders == limit else max(0, waiters - (limit - holders))
        assert len(service.ledger.queue) == queued, (limit, holders, waiters)
        for released in range(1, holders + 1):
            spy = Spy(service)
            in_queue = [w.name for w in service.ledger.waiters(100)]
            free = limit - len(service.ledger.slots) + 1  # after this release
            service.release(namespace="t", name=f"h{released - 1}")
            # Woken at once, before any of them runs: the head and as many as there are free slots.
            expected = in_queue[:free]
            assert sorted(set(spy.woken)) == sorted(expected), (limit, holders, waiters, released)
            await _settle()
            # Exactly those were granted, in queue order, and never more holders than the limit.
            granted = [p for p in expected if ("t", p) in service.ledger.slots]
            assert granted == expected, (limit, holders, waiters, released)
            assert len(service.ledger.slots) <= limit
            assert [w.name for w in service.ledger.waiters(100)] == in_queue[len(expected) :]
        await _finish(service, polls)


async def test_a_load_sample_or_a_policy_that_frees_no_slot_wakes_nobody() -> None:
    service, polls = await _scene(limit=2, holders=2, waiters=5)
    spy = Spy(service)
    service.load_changed()
    service.apply_policy(ActivePolicy(_policy(2).node_policy, "other", "reloaded"))
    assert spy.woken == []
    # A policy that raises the limit by two wakes the two first waiters, no more.
    service.apply_policy(_policy(4))
    assert spy.woken == ["w0", "w1"]
    await _settle()
    assert sorted(key[1] for key in service.ledger.slots) == ["h0", "h1", "w0", "w1"]
    await _finish(service, polls)


async def test_with_free_slots_a_change_wakes_as_many_as_there_are_free_slots() -> None:
    # The waiters are held by something other than the slot limit (here: a DaemonSet gate that lifts).
    service, polls = await _scene(limit=3, holders=1, waiters=0)
    gate_open = False

    class Gate:
        def starting_elsewhere(
            self, node_policy: policy.NodePolicy, holders: set[ledger.PodKey]
        ) -> list[OtherStarting]:
            return []

        def daemonsets_waiting(self) -> list[str]:
            return [] if gate_open else ["kube-system/cni"]

    service.node_state = Gate()
    gated = ActivePolicy(
        policy.NodePolicy(
            name="gated",
            throttle=policy.ThrottleConfig(max_concurrent=policy.MaxConcurrent(value=3)),
            wait_for_daemonsets=True,
            hold_timeout=3600.0,
        ),
        "test",
        "test",
    )
    service.apply_policy(gated)
    polls = [
        asyncio.create_task(service.wait_for_slot(namespace="t", name=f"w{i}", uid="", wait=30.0))
        for i in range(4)
    ]
    await _settle()
    assert len(service.ledger.queue) == 4
    spy = Spy(service)
    service.load_changed()
    # Two slots are free: the two first waiters are woken (they ask, the gate still says no).
    assert spy.woken == ["w0", "w1"]
    await _settle()
    assert len(service.ledger.queue) == 4
    gate_open = True
    spy.woken.clear()
    service.pod_changed(("kube-system", "cni"), "ready")
    assert spy.woken == ["w0", "w1"]
    await _settle()
    assert sorted(key[1] for key in service.ledger.slots) == ["h0", "w0", "w1"]
    await _finish(service, polls)


async def test_releases_at_once_wake_one_waiter_per_freed_slot() -> None:
    for limit, waiters, released in itertools.product((1, 2, 3), range(5), (1, 2, 3)):
        if released > limit:
            continue
        service, polls = await _scene(limit, limit, waiters)
        spy = Spy(service)
        for i in range(released):
            service.release(namespace="t", name=f"h{i}")
        # Before any woken poll runs: one per freed slot, the head first, nobody twice for nothing.
        assert sorted(set(spy.woken)) == [f"w{i}" for i in range(min(released, waiters))]
        await _settle()
        assert len(service.ledger.slots) == min(limit, limit - released + waiters)
        await _finish(service, polls)


async def test_a_long_poll_that_ran_its_whole_wait_says_ask_again_at_once() -> None:
    """The long poll was the wait: its 423 carries Retry-After 0, so the init client opens the next one
    instead of sleeping on the throttle's hint while slots free (a plain ask keeps the hint)."""
    service, _ = await _scene(limit=1, holders=1, waiters=0)
    plain = await service.wait_for_slot(namespace="t", name="p", uid="", wait=0, alive=lambda: True)
    assert isinstance(plain, ledger.Denied) and plain.retry_after > 0
    polled = await service.wait_for_slot(namespace="t", name="p", uid="", wait=0.05, alive=lambda: True)
    assert isinstance(polled, ledger.Denied) and polled.retry_after == 0
    assert (polled.reason, polled.position) == (plain.reason, plain.position)


class _GroupSaysNo:
    """The group pacer saying no, as lockd's finisher hears it with the controller's wait stream up: the pod
    steps aside for --group-recheck (60 s)."""

    async def finish(self, slot: ledger.Slot, *, wall: float) -> throttles.Verdict:
        await asyncio.sleep(0)
        return throttles.Verdict(
            allowed=False, reason="group full", throttle=ledger.GROUP_THROTTLE, retry_after=60.0
        )


async def test_a_long_poll_answered_at_shutdown_says_ask_again_at_once() -> None:
    """lockd stopping (a rolling upgrade) answers its long polls at once; each 423 carries Retry-After 0,
    so the init client asks the replacement lockd as soon as it listens, not after the hint of the lockd
    that is gone (a group's step-aside: 60 s, past a shorter max-wait; tests/nodes/test_upgrade.py)."""
    service = LockService(
        active=_policy(2),
        cores=1,
        metrics=Metrics(),
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
        finisher=_GroupSaysNo(),
    )
    plain = await service.ask(namespace="t", name="p", uid="")
    assert isinstance(plain, ledger.Denied) and plain.retry_after == 60.0
    poll = asyncio.create_task(
        service.wait_for_slot(namespace="t", name="p", uid="", wait=30.0, alive=lambda: True)
    )
    await _settle()
    assert not poll.done()
    service.close()
    answered = await asyncio.wait_for(poll, timeout=5)
    assert isinstance(answered, ledger.Denied) and answered.retry_after == 0
    assert answered.reason == "group full"
