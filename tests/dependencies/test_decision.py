"""Node policy dependencies in the decision, without a network: the pure verdict (which dependency fails,
and why, from the cached results), the /status entries, the lock service that holds every grant while one
fails (every ask, anonymous slots too) and wakes its long polls when it answers, the cache's bookkeeping
(results of dependencies the policy no longer has dropped, a log line and a wake-up only when one comes up
or goes down, the metrics), and the fail-open bounds: a pod that stops asking, or starts without its
slot, while a dependency is down is counted by the counters that already existed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from lockd import ledger
from lockd.dependencies import (
    NOT_CHECKED,
    DependencyChecks,
    Result,
    dependency_status,
    dependency_verdict,
    failing,
    name_of,
)
from lockd.metrics import Metrics
from lockd.nodepolicy import ActivePolicy
from lockd.service import LockService
from stagger import policy, throttles
from tests.metrics import by_label

WEB = policy.Dependency(kind="http", target="http://127.0.0.1:8080/healthz")
DB = policy.Dependency(kind="tcp", target="127.0.0.1:5432", timeout=0.5)


def _down(error: str, at: float = 1.0) -> Result:
    return Result(error=error, checked_at=at, checked_wall=1_700_000_000.0 + at)


def _up(at: float = 1.0) -> Result:
    return Result(error="", checked_at=at, checked_wall=1_700_000_000.0 + at)


# --- the pure verdict ---------------------------------------------------------------------------------


def test_a_dependency_is_named_by_its_url_or_as_tcp_host_port() -> None:
    assert name_of(WEB) == "http://127.0.0.1:8080/healthz"
    assert name_of(DB) == "tcp 127.0.0.1:5432"
    # A user and password in the URL are never shown (reasons go to every pod that asks).
    secret = policy.Dependency(kind="http", target="https://probe:s3cret@127.0.0.1:8443/ready?x=1")
    assert name_of(secret) == "https://127.0.0.1:8443/ready?x=1"
    assert dependency_status((secret,), {}, now=0.0)[0]["target"] == "https://127.0.0.1:8443/ready?x=1"


def test_without_dependencies_or_with_all_answering_nothing_is_held() -> None:
    assert dependency_verdict((), {}, retry_after=5.0) == throttles.ALLOWED
    assert dependency_verdict((WEB, DB), {WEB: _up(), DB: _up()}, retry_after=5.0) == throttles.ALLOWED


def test_the_first_failing_dependency_is_named_with_its_error() -> None:
    verdict = dependency_verdict((WEB, DB), {WEB: _down("HTTP 503"), DB: _up()}, retry_after=5.0)
    assert verdict == throttles.Verdict(
        allowed=False,
        reason="waiting for dependency http://127.0.0.1:8080/healthz: HTTP 503",
        throttle="dependency",
        retry_after=5.0,
    )
    both = dependency_verdict((WEB, DB), {WEB: _up(), DB: _down("connection refused")}, retry_after=2.0)
    assert both.reason == "waiting for dependency tcp 127.0.0.1:5432: connection refused"
    assert both.retry_after == 2.0


def test_before_its_first_result_a_dependency_is_not_checked_yet_and_holds() -> None:
    assert failing((WEB, DB), {WEB: _up()}) == [(DB, NOT_CHECKED)]
    verdict = dependency_verdict((WEB, DB), {}, retry_after=5.0)
    assert not verdict.allowed
    assert verdict.reason == (
        "waiting for dependency http://127.0.0.1:8080/healthz: not checked yet (and 1 more failing)"
    )


def test_status_shows_each_dependency_with_its_last_result_and_when() -> None:
    shown = dependency_status((WEB, DB), {WEB: _down("HTTP 503", at=10.0)}, now=12.5)
    assert shown == [
        {
            "name": "http://127.0.0.1:8080/healthz",
            "kind": "http",
            "target": "http://127.0.0.1:8080/healthz",
            "checkedTarget": "http://127.0.0.1:8080/healthz",
            "timeoutSeconds": 2.0,
            "intervalSeconds": 5.0,
            "failIntervalSeconds": 5.0,
            "up": False,
            "error": "HTTP 503",
            "checkedAt": "2023-11-14T22:13:30.000Z",
            "checkedSecondsAgo": 2.5,
        },
        {
            "name": "tcp 127.0.0.1:5432",
            "kind": "tcp",
            "target": "127.0.0.1:5432",
            "checkedTarget": "127.0.0.1:5432",
            "timeoutSeconds": 0.5,
            "intervalSeconds": 5.0,
            "failIntervalSeconds": 5.0,
            "up": None,
            "error": NOT_CHECKED,
            "checkedAt": None,
            "checkedSecondsAgo": None,
        },
    ]


# --- the lock service -------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _active(*dependencies: policy.Dependency, limit: int | None = None) -> ActivePolicy:
    throttle = policy.ThrottleConfig(
        max_concurrent=None if limit is None else policy.MaxConcurrent(value=limit)
    )
    node_policy = policy.NodePolicy(
        name="deps", throttle=throttle, hold_timeout=3600.0, dependencies=dependencies
    )
    return ActivePolicy(node_policy, "test", "test")


def _service(
    checks: DependencyChecks, *dependencies: policy.Dependency, clock: Clock | None = None
) -> LockService:
    checks.want(dependencies)
    return LockService(
        active=_active(*dependencies),
        cores=1,
        metrics=checks.metrics,
        waiter_idle_timeout=30.0,
        load=lambda: throttles.NO_LOAD,
        dependencies=checks.get,
        dependency_retry=checks.interval,
        **({"clock": clock} if clock is not None else {}),
    )


def _never() -> None:
    raise AssertionError("no wake-up expected")


async def test_while_a_dependency_fails_every_ask_waits_and_names_it() -> None:
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    service = _service(checks, WEB)
    first = await service.ask(namespace="t", name="a", uid="")
    assert isinstance(first, ledger.Denied)
    assert first.reason == "waiting for dependency http://127.0.0.1:8080/healthz: not checked yet"
    assert first.throttle == "dependency"
    checks.record(WEB, _down("HTTP 503"), on_change=lambda: None)
    # The head and the pods behind it are all told the dependency's reason, not only "asked first".
    for name in ("a", "b", "c"):
        outcome = await service.ask(namespace="t", name=name, uid="")
        assert isinstance(outcome, ledger.Denied)
        assert outcome.reason == "waiting for dependency http://127.0.0.1:8080/healthz: HTTP 503"
        assert outcome.retry_after == 5.0
    # An anonymous slot (pod-startup-lock's GET /) is held the same way.
    assert isinstance(service.take_anonymous(duration=10.0), ledger.Denied)
    assert service.current_reason(service.ledger.queue[("t", "a")]) == (
        "waiting for dependency http://127.0.0.1:8080/healthz: HTTP 503"
    )
    checks.record(WEB, _up(), on_change=service.wake_next)
    granted = await service.ask(namespace="t", name="a", uid="")
    assert isinstance(granted, ledger.Granted)


async def test_a_dependency_coming_up_wakes_the_waiting_long_poll() -> None:
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    service = _service(checks, WEB, DB)
    checks.record(WEB, _down("HTTP 503"), on_change=service.wake_next)
    checks.record(DB, _up(), on_change=service.wake_next)
    poll = asyncio.create_task(service.wait_for_slot(namespace="t", name="a", uid="", wait=60.0))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not poll.done()
    # Another failed check of a dependency that is already down changes nothing and wakes nobody.
    checks.record(WEB, _down("connection refused", at=6.0), on_change=_never)
    checks.record(WEB, _up(at=11.0), on_change=service.wake_next)
    # Answered by the wake-up, long before the 60 s poll (or any retry hint) runs out.
    outcome = await asyncio.wait_for(poll, timeout=5.0)
    assert isinstance(outcome, ledger.Granted)


async def test_a_policy_with_other_dependencies_holds_until_they_are_checked() -> None:
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    service = _service(checks, WEB)
    checks.record(WEB, _up(), on_change=service.wake_next)
    assert isinstance(await service.ask(namespace="t", name="a", uid=""), ledger.Granted)
    service.apply_policy(_active(DB))
    checks.want(service.node_policy.dependencies)
    outcome = await service.ask(namespace="t", name="b", uid="")
    assert isinstance(outcome, ledger.Denied)
    assert outcome.reason == "waiting for dependency tcp 127.0.0.1:5432: not checked yet"
    # The held slot stays; the result of the dependency the policy dropped is forgotten.
    assert ("t", "a") in service.ledger.slots
    assert WEB not in checks.results


# --- fail-open: the existing bounds and counters ---------------------------------------------------------


async def test_a_pod_that_stops_asking_while_a_dependency_is_down_is_counted_as_given_up() -> None:
    """The init client lets its pod go after maxWait (lockd answers 423, so unreachableWait does not
    apply): lockd sees the waiter stop asking and counts it in `waits_given_up{why="stoppedAsking"}`."""
    clock = Clock()
    checks = DependencyChecks(interval=5.0, metrics=Metrics(), clock=clock)
    service = _service(checks, DB, clock=clock)
    checks.record(DB, _down("connection refused"), on_change=service.wake_next)
    outcome = await service.ask(namespace="t", name="a", uid="")
    assert isinstance(outcome, ledger.Denied)
    clock.now += 31.0
    service.tick()
    assert not service.ledger.queue
    text = service.metrics.render().decode()
    assert by_label(text, "stagger_lockd_waits_given_up_total", "why") == {"stoppedAsking": 1.0}


async def test_a_pod_ready_without_its_slot_while_a_dependency_is_down_is_counted() -> None:
    """Cluster mode: the pod of a waiter that gave up becomes Ready: `startedWithoutSlot`."""
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    service = _service(checks, DB)
    checks.record(DB, _down("connection refused"), on_change=service.wake_next)
    assert isinstance(await service.ask(namespace="t", name="a", uid="u1"), ledger.Denied)
    service.pod_changed(("t", "a"), "ready")
    text = service.metrics.render().decode()
    assert by_label(text, "stagger_lockd_waits_given_up_total", "why") == {"startedWithoutSlot": 1.0}


# --- the cache ----------------------------------------------------------------------------------------


def test_the_log_and_the_wake_up_come_when_a_dependency_goes_down_or_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    checks.want((WEB,))
    changes: list[str] = []
    caplog.set_level(logging.INFO, logger="lockd.dependencies")
    for error in ("", "HTTP 503", "HTTP 503", "connection refused", "", ""):
        checks.record(WEB, _down(error) if error else _up(), on_change=lambda: changes.append("x"))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "dependency http://127.0.0.1:8080/healthz answers",
        "dependency http://127.0.0.1:8080/healthz fails: HTTP 503; lockd grants nothing until it answers",
        "dependency http://127.0.0.1:8080/healthz answers again: grants resume",
    ]
    assert len(changes) == 3


def test_metrics_show_each_dependency_up_or_down_and_count_failed_checks() -> None:
    metrics = Metrics()
    checks = DependencyChecks(interval=5.0, metrics=metrics)
    checks.want((WEB, DB))
    checks.record(WEB, _down("HTTP 503"), on_change=lambda: None)
    checks.record(WEB, _down("HTTP 503"), on_change=lambda: None)
    checks.record(DB, _up(), on_change=lambda: None)
    text = metrics.render().decode()
    up = by_label(text, "stagger_lockd_dependency_up", "dependency")
    assert up == {"http://127.0.0.1:8080/healthz": 0.0, "tcp 127.0.0.1:5432": 1.0}
    failures = by_label(text, "stagger_lockd_dependency_check_failures_total", "dependency")
    assert failures == {"http://127.0.0.1:8080/healthz": 2.0}
    # A dependency the node policy no longer has has no up/down sample (its failures stay counted).
    checks.want((DB,))
    text = metrics.render().decode()
    assert by_label(text, "stagger_lockd_dependency_up", "dependency") == {"tcp 127.0.0.1:5432": 1.0}
    assert "http://127.0.0.1:8080/healthz" in by_label(
        text, "stagger_lockd_dependency_check_failures_total", "dependency"
    )


def test_a_result_for_a_dependency_no_longer_wanted_is_not_kept() -> None:
    checks = DependencyChecks(interval=5.0, metrics=Metrics())
    checks.want((DB,))
    checks.record(WEB, _up(), on_change=_never)
    assert checks.results == {}
