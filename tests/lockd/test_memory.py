"""The memory throttle, stagger's own: `throttleConfig.memory: {maxLoad, incrementBy}` in stagger's policy
file (not in pod-pacemaker's CRD, which has no such throttle) parses, renders back and bounds its numbers;
lockd reads memory pressure from `<proc-root>/pressure/memory` ("some avg10"; none without PSI) or the load
file's `memoryPercent`; the check holds a grant while the pressure plus the load assumed for the grants
since the sample is at or above maxLoad, and comes last in the node's order; and a real lockd answers 423
naming it, shows it in /status and /metrics, and lets the long-polling pod go when the pressure drops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lockd import load
from lockd.appstate import LOAD
from stagger import nodechecks, policy, throttles
from stagger.policy.render import policy_document
from tests.waiting import eventually

MEMORY_POLICY = "nodePolicies:\n- name: test\n  throttleConfig:\n    memory: {maxLoad: 40, incrementBy: 10}\n"


def node_policy(**throttle: object) -> policy.NodePolicy:
    return policy.NodePolicy(name="test", throttle=policy.ThrottleConfig(**throttle))  # type: ignore[arg-type]


def test_the_policy_file_reads_memory_and_renders_it_back() -> None:
    parsed = policy.parse_policy_text(MEMORY_POLICY, source="<test>")
    config = parsed.node_policies[0].throttle
    assert (config.memory_max_load, config.memory_increment_by) == (40, 10)
    rendered = yaml.safe_dump(policy_document(parsed), sort_keys=False)
    assert policy.parse_policy_text(rendered, source="<render>") == parsed


@pytest.mark.parametrize(
    ("memory", "problem"),
    [
        pytest.param("{maxLoad: 0}", "maxLoad", id="max-load-zero"),
        pytest.param("{maxLoad: 101}", "maxLoad", id="max-load-over-100"),
        pytest.param("{incrementBy: 5}", "maxLoad", id="max-load-required"),
        pytest.param("{maxLoad: 40, incrementBy: -1}", "incrementBy", id="negative-increment"),
    ],
)
def test_bad_memory_numbers_are_errors_naming_the_key(memory: str, problem: str) -> None:
    text = f"nodePolicies:\n- name: test\n  throttleConfig:\n    memory: {memory}\n"
    with pytest.raises(policy.PolicyError, match=problem):
        policy.parse_policy_text(text, source="<test>")


def test_pod_pacemakers_crd_has_no_memory_throttle() -> None:
    document = (
        "apiVersion: woehrl.net/v1alpha\nkind: PacemakerConfig\nmetadata: {name: node}\n"
        "spec:\n  throttleConfig:\n    memory: {maxLoad: '40'}\n"
    )
    with pytest.raises(policy.PolicyError, match="memory"):
        policy.parse_policy_text(document, source="<test>")


def test_memory_pressure_comes_from_psi_under_the_proc_root(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("cpu  100 0 0 900 0 0 0 0 0 0\n")
    reader = load.SystemLoad(proc_root=tmp_path)
    assert reader.read().memory_percent is None, "no PSI: no reading, which holds no pod"
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "memory").write_text(
        "some avg10=31.25 avg60=3.00 avg300=1.00 total=1\nfull avg10=2.00 avg60=1.00 avg300=0.50 total=1\n"
    )
    assert reader.read().memory_percent == 31.25


@pytest.mark.parametrize(
    ("text", "memory"),
    [
        pytest.param('{"cpuPercent": 1, "memoryPercent": 55}', 55.0, id="given"),
        pytest.param('{"cpuPercent": 1}', None, id="older-writers-leave-it-out"),
        pytest.param('{"cpuPercent": 1, "memoryPercent": "high"}', None, id="not-a-number-is-no-reading"),
    ],
)
def test_the_load_file_gives_memory_percent(tmp_path: Path, text: str, memory: float | None) -> None:
    path = tmp_path / "load.json"
    path.write_text(text)
    assert load.FileLoad(path=path).read().memory_percent == memory


def sample(memory: float | None, *, at: float = 1.0, cpu: float = 0.0) -> throttles.LoadSample:
    return throttles.LoadSample(
        cpu_percent=cpu, io_percent=0.0, memory_percent=memory, source="test", taken_at=at
    )


@pytest.mark.parametrize(
    ("memory", "grants", "reason"),
    [
        pytest.param(39.0, 0, "", id="below"),
        pytest.param(40.0, 0, "memory 40% >= maxLoad 40% (test)", id="at"),
        pytest.param(
            25.0,
            2,
            "memory 45% (25% sampled + 20% assumed for 2 grants since) >= maxLoad 40% (test)",
            id="assumed",
        ),
        pytest.param(None, 5, "", id="no-reading-never-holds"),
    ],
)
def test_the_memory_check(memory: float | None, grants: int, reason: str) -> None:
    current = sample(memory)
    checks = nodechecks.NodeChecks(
        node_policy=node_policy(memory_max_load=40, memory_increment_by=10),
        cores=4,
        clock=lambda: 0.0,
        load=lambda: current,
    )
    for _ in range(grants):
        checks.commit()
    verdict = checks.decide(in_use=0)
    assert verdict.reason == reason
    if reason:
        assert (verdict.throttle, verdict.retry_after) == ("memory", throttles.LOAD_RETRY_SECONDS)
    (reading,) = checks.load_readings()
    assert reading == throttles.LoadReading(
        throttle="memory", max_load=40, sampled=memory, grants=grants, assumed=grants * 10
    )


def test_memory_comes_after_the_other_throttles_and_clears_by_time() -> None:
    current = sample(90.0, cpu=95.0)
    checks = nodechecks.NodeChecks(
        node_policy=node_policy(cpu_max_load=80, memory_max_load=40),
        cores=4,
        clock=lambda: 0.0,
        load=lambda: current,
    )
    assert [check.name for check in checks.checks] == ["cpu", "memory"]
    assert checks.decide(in_use=0).throttle == "cpu"
    assert not nodechecks.clears_by_event("memory")


async def test_a_lockd_holds_on_memory_pressure_until_it_drops(start_lockd) -> None:
    lockd = await start_lockd("nodePolicies:\n- name: test\n  throttleConfig:\n    memory: {maxLoad: 30}\n")
    lockd.load_path.write_text(json.dumps({"cpuPercent": 5.0, "memoryPercent": 35.0}))

    async def sampled() -> bool:
        return lockd.app[LOAD].sample.memory_percent == 35.0

    await eventually(sampled, what="a sample with the memory pressure")
    held = await lockd.lock("a")
    assert held.status == 423
    assert (await held.json())["reason"] == f"memory 35% >= maxLoad 30% (file:{lockd.load_path})"
    status = await lockd.status()
    assert status["load"]["memoryPercent"] == 35.0
    assert status["load"]["throttles"] == [
        {"throttle": "memory", "maxLoad": 30.0, "sampled": 35.0, "grantsSinceSample": 0, "assumed": 0.0}
    ]
    assert status["policy"]["memoryMaxLoad"] == 30
    text = await (await lockd.client.get("/status", params={"format": "text"})).text()
    assert "  memory < 30: 35% sampled\n" in text
    metrics = await (await lockd.client.get("/metrics")).text()
    assert "stagger_lockd_memory_pressure_ratio 0.35\n" in metrics
    # The pressure drops: the waiting pod's long poll is answered with its slot.
    lockd.load_path.write_text(json.dumps({"cpuPercent": 5.0, "memoryPercent": 5.0}))
    granted = await lockd.lock("a", wait="10")
    assert granted.status == 200
