"""The fault plan and the randomized herd of `python -m sim chaos` (pure): a seed decides the same faults,
outages and herd every time; rates are honoured; nothing is injected in the quiet start nor after the span
(the settle window has no faults); `cut` and `gone`
only for watches, 410 only for a resumed one; every herd has every workload kind and its groups' modes
come from the four modes; bad settings are refused with the field named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.chaos.faults import FaultPlan, FaultSettings
from sim.chaos.herd import MODES, random_herd


def _decisions(plan: FaultPlan, n: int, *, watch: bool = False, resumed: bool = False) -> list[str]:
    return [
        "-"
        if (f := plan.decide(method="GET", watch=watch, resumed=resumed, now=10.0 + i * 0.01)) is None
        else f.kind
        for i in range(n)
    ]


@given(seed=st.integers(min_value=0, max_value=2**32))
@settings(max_examples=25, deadline=None)
def test_a_seed_decides_the_same_faults(seed: int) -> None:
    one = FaultPlan(settings=FaultSettings(), seed=seed, span_seconds=120)
    two = FaultPlan(settings=FaultSettings(), seed=seed, span_seconds=120)
    assert one.outages == two.outages
    assert _decisions(one, 200) == _decisions(two, 200)
    for outage in one.outages:
        assert FaultSettings().quiet_start_seconds <= outage.start and outage.end <= 120 + 1e-9


def test_rates_are_honoured_and_outages_reset_everything() -> None:
    plan = FaultPlan(
        settings=FaultSettings(error=0.1, throttle=0.1, reset=0.0, slow=0.0, outages=0),
        seed=3,
        span_seconds=60,
    )
    kinds = _decisions(plan, 4000)
    assert 0.08 < kinds.count("error") / 4000 < 0.12
    assert 0.08 < kinds.count("throttle") / 4000 < 0.12
    assert plan.counts["error"] == kinds.count("error")
    down = FaultPlan(settings=FaultSettings(outages=1, outage_seconds=5), seed=3, span_seconds=60)
    (outage,) = down.outages
    fault = down.decide(method="POST", watch=False, resumed=False, now=outage.start + 1)
    assert fault is not None and fault.kind == "outage"


def test_nothing_in_the_quiet_start_and_watch_faults_only_for_watches() -> None:
    plan = FaultPlan(
        settings=FaultSettings(error=1.0, throttle=0, reset=0, slow=0, gone=1.0, cut=1.0, outages=0),
        seed=1,
        span_seconds=60,
    )
    assert plan.decide(method="GET", watch=False, resumed=False, now=1.0) is None
    assert {plan.decide(method="GET", watch=False, resumed=False, now=5.0 + i).kind for i in range(5)} == {
        "error"
    }  # type: ignore[union-attr]
    gone = plan.decide(method="GET", watch=True, resumed=True, now=10.0)
    assert gone is not None and gone.kind == "gone" and gone.status == 410
    fresh = plan.decide(method="GET", watch=True, resumed=False, now=10.0)
    assert fresh is not None and fresh.kind == "cut"


def test_nothing_after_the_span() -> None:
    """`--minutes` of faults, then the settle window without any: a reset there cost an evict-mode group
    a minute (seeds 81 and 87 of `python -m sim chaos --minutes 0.5`, stalls begun after the faults)."""
    plan = FaultPlan(
        settings=FaultSettings(error=1.0, throttle=0, reset=0, slow=0, gone=1.0, cut=1.0, outages=0),
        seed=1,
        span_seconds=30,
    )
    fault = plan.decide(method="POST", watch=False, resumed=False, now=29.9)
    assert fault is not None and fault.kind == "error"
    for now in (30.0, 45.0, 150.0):
        assert plan.decide(method="POST", watch=False, resumed=False, now=now) is None
        assert plan.decide(method="GET", watch=True, resumed=True, now=now) is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"error": 1.5}, "error", id="rate-over-1"),
        pytest.param({"slow": -0.1}, "slow", id="negative-rate"),
        pytest.param({"error": 0.6, "throttle": 0.6}, "error + throttle", id="rates-over-1-in-all"),
        pytest.param({"outage_seconds": -1}, "outage_seconds", id="negative-outage"),
    ],
)
def test_bad_settings_name_the_field(changes: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("+", r"\+")):
        FaultSettings(**changes)  # type: ignore[arg-type]


@given(seed=st.integers(min_value=0, max_value=10_000), size=st.sampled_from(["small", "full"]))
@settings(max_examples=40, deadline=None)
def test_every_herd_has_every_kind_and_valid_groups(seed: int, size: str) -> None:
    herd = random_herd(seed, size=size)  # type: ignore[arg-type]
    assert herd == random_herd(seed, size=size)  # type: ignore[arg-type]
    assert {w.kind for w in herd.workloads} == {"Deployment", "StatefulSet", "Job", "Pod"}
    assert {g.mode for g in herd.groups} <= set(MODES)
    assert all(w.group in {g.name for g in herd.groups} | {None} for w in herd.workloads)
    # The policy file it makes parses, with one staggering policy per group.
    from stagger.policy import parse_policy_text

    parsed = parse_policy_text(herd.scenario().stagger.policies)
    assert [p.name for p in parsed.staggering_policies] == [g.name for g in herd.groups]
