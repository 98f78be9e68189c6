"""The load throttles with pod-pacemaker's meaning (github.com/woehrl01/pod-pacemaker, pkg/throttler/
loadavg.go, cpuload.go, ioload.go, priority.go): each keeps `currentLoad`, lets a pod through while
`currentLoad < maxLoad`, adds `incrementBy` to it on each acquire, and has it replaced by a monitor with a
fresh reading (loadAvg: `load.Avg().Load1`, divided by the logical CPUs when perCore). Here the same
arithmetic is `stagger.nodechecks`': the readings come in `LoadSample`s, a reading taken at a new time is a
fresh one, and `commit()` is the acquire."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Literal

import hypothesis.strategies as st
import pytest
from hypothesis import given

from stagger import nodechecks, policy, throttles


@dataclass(frozen=True)
class Read:
    """A fresh reading of the node: every number given is new (the times move on); `load1_fresh=False`
    is a sample whose load average was not read anew (lockd reads /proc/loadavg every 5 s only)."""

    cpu: float | None = None
    io: float | None = None
    load1: float | None = None
    load1_fresh: bool = True


GRANT = "grant"  # the throttle allows one more now, and it is granted (pod-pacemaker's acquire)
HELD = "held"  # the throttle says no
REFUND = "refund"  # the last grant did not happen after all (its group said no)
Step = Read | Literal["grant", "held", "refund"]


class Node:
    """The load source a throttle reads, stepped by the test."""

    def __init__(self) -> None:
        self.time = 0.0
        self.sample = throttles.LoadSample(cpu_percent=None, io_percent=None, source="test")

    def __call__(self) -> throttles.LoadSample:
        return self.sample

    def read(self, reading: Read) -> None:
        self.time += 1.0
        load1_at = self.time if reading.load1_fresh else self.sample.load1_taken_at
        self.sample = throttles.LoadSample(
            cpu_percent=reading.cpu,
            io_percent=reading.io,
            load1=reading.load1,
            source="test",
            taken_at=self.time,
            load1_taken_at=load1_at,
        )


def make(config: policy.ThrottleConfig, *, cores: int = 4) -> tuple[nodechecks.NodeChecks, Node]:
    node = Node()
    return nodechecks.NodeChecks(
        node_policy=policy.NodePolicy(name="test", throttle=config), cores=cores, clock=lambda: 0.0, load=node
    ), node


def run(throttle: nodechecks.NodeChecks, node: Node, steps: list[Step]) -> throttles.Verdict:
    """Plays the steps, checking each; returns the last verdict."""
    verdict = throttles.ALLOWED
    for number, step in enumerate(steps):
        if isinstance(step, Read):
            node.read(step)
            continue
        if step == REFUND:
            throttle.refund(counted=throttle.counted())
            continue
        verdict = throttle.decide(in_use=0)
        assert verdict.allowed is (step == GRANT), f"step {number}: {verdict.reason or 'allowed'}"
        if step == GRANT:
            throttle.commit()
    return verdict


def load_avg(max_load: float, *, per_core: bool = False, increment_by: float = 0.0) -> policy.ThrottleConfig:
    return policy.ThrottleConfig(
        load_avg=policy.LoadAvg(max_load=max_load, per_core=per_core, increment_by=increment_by)
    )


@pytest.mark.parametrize(
    ("config", "cores", "steps", "reason"),
    [
        # Condition: func(i int) (bool, error) { return currentLoad < maxLoadAvgF, err }
        pytest.param(load_avg(3), 4, [Read(load1=2.99), GRANT, GRANT], "", id="loadavg-below-max-passes"),
        pytest.param(
            load_avg(3),
            4,
            [Read(load1=3.0), HELD],
            "load average 3.00 is not below loadAvg.maxLoad 3",
            id="loadavg-at-max-holds-strict-less-than",
        ),
        pytest.param(
            load_avg(3),
            4,
            [Read(load1=7.5), HELD],
            "load average 7.50 is not below loadAvg.maxLoad 3",
            id="above",
        ),
        # incrementBy 0 (the default, "" in pod-pacemaker): a plain threshold, any number of grants.
        pytest.param(load_avg(3), 4, [Read(load1=2.0), *[GRANT] * 20], "", id="no-increment-no-limit"),
        # GetLoadAvg(perCpu): load.Load1 / float64(cpuCount)
        pytest.param(
            load_avg(2, per_core=True), 4, [Read(load1=7.96), GRANT], "", id="per-core-divides-by-the-cores"
        ),
        pytest.param(
            load_avg(2, per_core=True),
            4,
            [Read(load1=8.0), HELD],
            "load average per core 2.00 (8.00 over 4 cores) is not below loadAvg.maxLoad 2",
            id="per-core-at-max-holds",
        ),
        pytest.param(
            load_avg(2), 4, [Read(load1=7.96), HELD], None, id="without-per-core-the-same-load-holds"
        ),
        # OnAquire: func() { currentLoad += incrementBy }: 1.6, 2.1, 2.6 pass; 3.1 does not.
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=1.6), GRANT, GRANT, GRANT, HELD],
            "load average 3.10 (1.60 sampled + 1.50 assumed for 3 grants since) is not below loadAvg.maxLoad 3",
            id="increments-accumulate-per-grant",
        ),
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=2.0), GRANT, GRANT, HELD],
            "load average 3.00 (2.00 sampled + 1.00 assumed for 2 grants since) is not below loadAvg.maxLoad 3",
            id="increments-reaching-max-exactly-hold",
        ),
        # The increment is added to the divided figure: per core, it is per core too.
        pytest.param(
            load_avg(1.5, per_core=True, increment_by=0.25),
            4,
            [Read(load1=4.0), GRANT, GRANT, HELD],
            "load average per core 1.50 (1.00 sampled: 4.00 over 4 cores + 0.50 assumed for 2 grants since) "
            "is not below loadAvg.maxLoad 1.5",
            id="per-core-increments-after-the-division",
        ),
        # The monitor: currentLoad = GetLoadAvg(perCpu); updated(): a fresh reading replaces the sum.
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=1.6), GRANT, GRANT, GRANT, HELD, Read(load1=1.6), GRANT, GRANT, GRANT, HELD],
            None,
            id="a-fresh-reading-starts-over",
        ),
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=1.6), GRANT, GRANT, GRANT, Read(load1=1.6, load1_fresh=False), HELD],
            None,
            id="a-sample-without-a-fresh-load-average-does-not",
        ),
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=1.6), GRANT, GRANT, GRANT, HELD, Read(load1=2.9), GRANT, HELD],
            "load average 3.40 (2.90 sampled + 0.50 assumed for 1 grant since) is not below loadAvg.maxLoad 3",
            id="the-fresh-reading-is-what-counts-next",
        ),
        # Not pod-pacemaker's: it reads 0 when load.Avg() fails and its increments alone then hold pods;
        # stagger's rule is that a number nobody can read never holds a pod.
        pytest.param(
            load_avg(3, increment_by=0.5), 4, [Read(load1=None), *[GRANT] * 20], "", id="unknown-never-holds"
        ),
        # cpuload.go and ioload.go: the same code path, in percent.
        pytest.param(
            policy.ThrottleConfig(cpu_max_load=80, cpu_increment_by=10),
            4,
            [Read(cpu=63.0, io=0.0), GRANT, GRANT, HELD],
            "cpu 83% (63% sampled + 20% assumed for 2 grants since) >= maxLoad 80% (test)",
            id="cpu-increments",
        ),
        pytest.param(
            policy.ThrottleConfig(cpu_max_load=80),
            4,
            [Read(cpu=80.0), HELD],
            "cpu 80% >= maxLoad 80% (test)",
            id="cpu-at-max-holds-strict-less-than",
        ),
        pytest.param(
            policy.ThrottleConfig(io_max_load=20, io_increment_by=7.5),
            4,
            [Read(cpu=0.0, io=4.0), GRANT, GRANT, GRANT, HELD],
            "io 26% (4% sampled + 22% assumed for 3 grants since) >= maxLoad 20% (test)",
            id="io-increments",
        ),
        # Each throttle has its own currentLoad and monitor: a fresh cpu reading leaves loadAvg's count.
        pytest.param(
            policy.ThrottleConfig(
                cpu_max_load=90, cpu_increment_by=30, load_avg=policy.LoadAvg(max_load=3, increment_by=1)
            ),
            4,
            [
                Read(cpu=10.0, load1=1.5),
                GRANT,
                GRANT,
                HELD,  # loadAvg 3.5 and cpu 70%: loadAvg first, as in pod-pacemaker's order
                Read(cpu=10.0, load1=1.5, load1_fresh=False),
                HELD,
            ],
            "load average 3.50 (1.50 sampled + 2.00 assumed for 2 grants since) is not below loadAvg.maxLoad 3",
            id="each-number-has-its-own-count",
        ),
        # A grant that did not happen (its group said no) takes its increment back.
        pytest.param(
            load_avg(3, increment_by=0.5),
            4,
            [Read(load1=1.6), GRANT, GRANT, GRANT, REFUND, GRANT, HELD],
            None,
            id="a-refund-takes-the-increment-back",
        ),
    ],
)
def test_load_throttles_as_pod_pacemaker(
    config: policy.ThrottleConfig, cores: int, steps: list[Step], reason: str | None
) -> None:
    throttle, node = make(config, cores=cores)
    verdict = run(throttle, node, steps)
    if reason is not None:
        assert verdict.reason == reason
    if not verdict.allowed:
        assert verdict.throttle in ("loadAvg", "cpu", "io")
        assert verdict.retry_after == throttles.LOAD_RETRY_SECONDS


def test_a_refund_after_a_fresh_reading_takes_nothing_from_the_new_count() -> None:
    throttle, node = make(load_avg(3, increment_by=0.5))
    node.read(Read(load1=1.6))
    throttle.commit()
    counted = throttle.counted()
    node.read(Read(load1=1.6))  # the reservation's increment ended with this reading
    throttle.commit()
    throttle.commit()
    throttle.refund(counted=counted)
    assert [r.grants for r in throttle.load_readings()] == [2]
    throttle.refund()  # without a receipt: the current count
    throttle.refund()
    throttle.refund()
    assert [r.grants for r in throttle.load_readings()] == [0]


def test_a_policy_reload_keeps_the_grants_since_the_reading() -> None:
    old, node = make(load_avg(3, increment_by=0.5))
    node.read(Read(load1=1.6))
    for _ in range(3):
        old.commit()
    new = nodechecks.NodeChecks(
        node_policy=policy.NodePolicy(name="test", throttle=load_avg(3, increment_by=0.25)),
        cores=4,
        clock=lambda: 0.0,
        load=node,
    )
    new.carry_over(old)
    (reading,) = new.load_readings()
    assert (reading.grants, reading.assumed) == (3, 0.75)  # the new policy's increment for the same grants


def test_resets_assumed_says_when_a_sample_ends_assumed_load() -> None:
    throttle, node = make(load_avg(3, increment_by=0.5))
    node.read(Read(load1=1.6))
    assert not throttle.resets_assumed(node.sample)
    throttle.commit()
    stale = replace(node.sample)
    assert not throttle.resets_assumed(stale), "the same reading"
    node.read(Read(load1=1.6, load1_fresh=False))
    assert not throttle.resets_assumed(node.sample), "no fresh load average"
    node.read(Read(load1=1.6))
    assert throttle.resets_assumed(node.sample)
    plain, plain_node = make(load_avg(3))
    plain_node.read(Read(load1=1.6))
    plain.commit()
    plain_node.read(Read(load1=1.6))
    assert not plain.resets_assumed(plain_node.sample), "nothing assumed without incrementBy"


def test_load_readings_show_each_load_throttle() -> None:
    config = policy.ThrottleConfig(
        cpu_max_load=80,
        cpu_increment_by=10,
        io_max_load=20,
        load_avg=policy.LoadAvg(max_load=0.8, per_core=True, increment_by=0.1),
    )
    throttle, node = make(config, cores=8)
    node.read(Read(cpu=30.0, io=None, load1=3.2))
    throttle.commit()
    throttle.commit()
    readings = {r.throttle: r for r in throttle.load_readings()}
    assert readings["loadAvg"] == throttles.LoadReading(
        throttle="loadAvg", max_load=0.8, sampled=0.4, grants=2, assumed=pytest.approx(0.2)
    )
    assert readings["cpu"] == throttles.LoadReading(
        throttle="cpu", max_load=80, sampled=30.0, grants=2, assumed=20.0
    )
    assert readings["io"] == throttles.LoadReading(
        throttle="io", max_load=20, sampled=None, grants=2, assumed=0.0
    )


hundredths = st.integers(min_value=0, max_value=1000).map(lambda n: n / 100)


@given(
    kind=st.sampled_from(["loadAvg", "cpu", "io"]),
    max_load=hundredths.filter(lambda v: v > 0),
    increment_by=st.integers(min_value=1, max_value=300).map(lambda n: n / 100),
    per_core=st.booleans(),
    cores=st.integers(min_value=1, max_value=64),
    readings=st.lists(st.tuples(hundredths, st.integers(min_value=0, max_value=30)), min_size=1, max_size=6),
)
def test_between_two_readings_a_load_throttle_allows_at_most_what_its_increments_leave_room_for(
    kind: str,
    max_load: float,
    increment_by: float,
    per_core: bool,
    cores: int,
    readings: list[tuple[float, int]],
) -> None:
    """With sampled < maxLoad, grants pass while sampled + k x incrementBy < maxLoad: at most
    ceil((maxLoad - sampled) / incrementBy) of them until the next reading, and at least the first."""
    if kind == "loadAvg":
        config = load_avg(max_load, per_core=per_core, increment_by=increment_by)
    elif kind == "cpu":
        config = policy.ThrottleConfig(cpu_max_load=max_load, cpu_increment_by=increment_by)
    else:
        config = policy.ThrottleConfig(io_max_load=max_load, io_increment_by=increment_by)
    throttle, node = make(config, cores=cores)
    for value, asks in readings:
        node.read(Read(cpu=value, io=value, load1=value))
        sampled = value / cores if kind == "loadAvg" and per_core else value
        granted = 0
        for _ in range(asks):
            if throttle.decide(in_use=0).allowed:
                throttle.commit()
                granted += 1
        room = Fraction(max_load) - Fraction(sampled)
        bound = max(0, math.ceil(room / Fraction(increment_by)))
        assert granted <= bound
        if asks and room > 0:
            assert granted >= 1
        if asks > bound:
            assert not throttle.decide(in_use=0).allowed
