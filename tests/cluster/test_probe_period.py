"""The readiness probe's period in the simulated kubelet: a container with a readinessProbe is Ready at the
first probe once its start-up work is done (probes at initialDelaySeconds after the start, then every
periodSeconds, 10 s by default), one without is Ready at once; the model's probing phase (no CPU, no
liveness kill, not Ready), the probe read from the pod, the scenario field that gives pods an exec probe
lockd never runs, and a simulated cluster's pod Ready no sooner than its first probe after the work."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockd.podprobes import plan_of
from sim.cluster import podparams
from sim.cluster.kubernetes.podstatus import view_from_model
from sim.cluster.scenario import ScenarioError, StaggerConfig, Workload, parse_scenario, workload_manifest
from sim.cluster.simcluster import SimCluster
from sim.cluster.startup import (
    DEFAULT_PROBE_PERIOD_SECONDS,
    ContainerSpec,
    ModelSettings,
    NodeModel,
    ReadinessProbe,
    advance,
    cpu_busy_percent,
    next_event_at,
    probe_ready_at,
    start_container,
    starting_count,
)
from stagger.kube import PODS
from stagger.podstate import is_pod_ready
from stagger.timestamps import parse_rfc3339
from tests.backends import Backend
from tests.cluster.helpers import cluster_settings, eventually, list_items

NO_JITTER = ModelSettings(backoff_jitter=0.0)


def probed(
    *, cpu: float, period: float = 10.0, delay: float = 0.0, liveness: float | None = None
) -> ContainerSpec:
    return ContainerSpec(
        cpu_seconds=cpu,
        liveness_seconds=liveness,
        readiness=ReadinessProbe(period_seconds=period, initial_delay_seconds=delay),
    )


def ready_times(spec: ContainerSpec, *, cores: float = 1, until: float = 500) -> list[float]:
    node = start_container(NodeModel(cores=cores, settings=NO_JITTER), key="a", spec=spec)
    _, events = advance(node, until=until)
    return [round(e.at, 9) for e in events if e.kind == "ready"]


# ------------------------------------------------------------------------------------ the pure rule


@pytest.mark.parametrize(
    ("probe", "started", "done", "expected"),
    [
        pytest.param(None, 0.0, 3.0, 3.0, id="no-probe-ready-at-once"),
        pytest.param(ReadinessProbe(), 0.0, 0.0, 0.0, id="done-at-start-first-probe-passes"),
        pytest.param(ReadinessProbe(), 0.0, 3.0, 10.0, id="default-period-10s"),
        pytest.param(ReadinessProbe(period_seconds=5), 0.0, 12.0, 15.0, id="next-probe-after-the-work"),
        pytest.param(ReadinessProbe(period_seconds=5), 0.0, 10.0, 10.0, id="done-on-a-probe"),
        pytest.param(ReadinessProbe(period_seconds=5), 100.0, 103.0, 105.0, id="probes-follow-the-start"),
        pytest.param(
            ReadinessProbe(period_seconds=5, initial_delay_seconds=12), 0.0, 1.0, 12.0, id="delay-first-probe"
        ),
        pytest.param(
            ReadinessProbe(period_seconds=5, initial_delay_seconds=12),
            0.0,
            13.0,
            17.0,
            id="delay-then-period",
        ),
        pytest.param(
            ReadinessProbe(period_seconds=5, success_threshold=3), 0.0, 3.0, 15.0, id="three-passes-in-a-row"
        ),
    ],
)
def test_ready_at_the_first_probe_after_the_work(
    probe: ReadinessProbe | None, started: float, done: float, expected: float
) -> None:
    assert probe_ready_at(probe=probe, started_at=started, work_done_at=done) == pytest.approx(expected)


@given(
    period=st.floats(min_value=0.5, max_value=60),
    delay=st.floats(min_value=0, max_value=60),
    threshold=st.integers(min_value=1, max_value=4),
    started=st.floats(min_value=0, max_value=1e4),
    work=st.floats(min_value=0, max_value=500),
)
def test_ready_is_a_probe_no_sooner_than_the_work_and_the_delay_and_within_the_periods_needed(
    period: float, delay: float, threshold: int, started: float, work: float
) -> None:
    probe = ReadinessProbe(period_seconds=period, initial_delay_seconds=delay, success_threshold=threshold)
    done = started + work
    ready = probe_ready_at(probe=probe, started_at=started, work_done_at=done)
    slack = 1e-6 * max(1.0, ready)
    assert ready >= done - slack
    assert ready >= started + delay - slack
    # On the probe grid, and no later than the `threshold` probes that start at the first one after the work.
    k = (ready - started - delay) / period
    assert math.isclose(k, round(k), abs_tol=1e-6)
    assert ready <= max(done, started + delay) + threshold * period + slack


def test_a_probe_needs_a_positive_period_and_threshold() -> None:
    with pytest.raises(ValueError, match="period_seconds"):
        ReadinessProbe(period_seconds=0)
    with pytest.raises(ValueError, match="initial_delay_seconds"):
        ReadinessProbe(initial_delay_seconds=-1)
    with pytest.raises(ValueError, match="success_threshold"):
        ReadinessProbe(success_threshold=0)


# ------------------------------------------------------------------------------------------ the model


def test_without_a_probe_ready_as_soon_as_the_work_is_done() -> None:
    assert ready_times(ContainerSpec(cpu_seconds=3, liveness_seconds=None)) == [3.0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(probed(cpu=3), [10.0], id="default-period"),
        pytest.param(probed(cpu=3, period=2), [4.0], id="short-period"),
        pytest.param(probed(cpu=0, period=7), [0.0], id="no-work-first-probe"),
        pytest.param(probed(cpu=1, period=10, delay=15), [15.0], id="initial-delay"),
        pytest.param(probed(cpu=16, period=10, delay=15), [25.0], id="initial-delay-then-period"),
    ],
)
def test_the_model_is_ready_at_the_first_probe_after_the_work(
    spec: ContainerSpec, expected: list[float]
) -> None:
    assert ready_times(spec) == expected


def test_a_container_waiting_for_its_probe_runs_unready_without_cpu_and_is_not_killed() -> None:
    # Liveness 5 s: the work (3 s) is done in time; the probe at 10 s is after the deadline, and the app,
    # started, answers its liveness probe meanwhile.
    node = start_container(
        NodeModel(cores=1, settings=NO_JITTER), key="a", spec=probed(cpu=3, period=10, liveness=5)
    )
    node, events = advance(node, until=6)
    assert events == []
    state = node.containers["a"]
    assert (state.phase, state.ready_at) == ("probing", None)
    assert state.work_done_at == pytest.approx(3.0)
    assert (starting_count(node), cpu_busy_percent(node)) == (0, 0.0)
    assert next_event_at(node) == pytest.approx(10.0)
    view = view_from_model("app", "img", state)
    assert (view.state, view.ready, view.started_at) == ("running", False, 0.0)
    node, events = advance(node, until=100)
    assert [(e.kind, round(e.at, 9)) for e in events] == [("ready", 10.0)]
    assert node.containers["a"].restarts == 0
    assert view_from_model("app", "img", node.containers["a"]).ready


def test_a_container_waiting_for_its_probe_leaves_the_cores_to_the_others() -> None:
    # One core, no penalty: a (1 cpu-s, probe every 100 s) and b (2 cpu-s) at 0.5/s each; a's work is done
    # at 2 s, b then runs alone: the 1 cpu-s left takes 1 s -> 3 s (as if a were Ready).
    node = NodeModel(cores=1, settings=ModelSettings(penalty=0.0, backoff_jitter=0.0))
    node = start_container(node, key="a", spec=probed(cpu=1, period=100))
    node = start_container(node, key="b", spec=ContainerSpec(cpu_seconds=2, liveness_seconds=None))
    _, events = advance(node, until=150)
    assert [(e.key, round(e.at, 9)) for e in events] == [("b", 3.0), ("a", 100.0)]


def test_a_restarted_container_is_probed_from_its_new_start() -> None:
    # One core, no penalty: a (1 cpu-s, liveness 1 s) and b (1 cpu-s) at 0.5/s each. a has done half its
    # work at its deadline (1 s): killed, back at 11 s (10 s back-off), its work done alone at 12 s. Its
    # probes now run at 11, 21, ...: Ready at 21 s, not at 20 s (the first attempt's probes).
    spec = probed(cpu=1, period=10, liveness=1)
    node = NodeModel(cores=1, settings=ModelSettings(penalty=0.0, backoff_jitter=0.0))
    node = start_container(node, key="a", spec=spec)
    node = start_container(node, key="b", spec=ContainerSpec(cpu_seconds=1, liveness_seconds=None))
    node, events = advance(node, until=50)
    assert [(e.key, e.kind, round(e.at, 9)) for e in events] == [
        ("a", "killed", 1.0),
        ("b", "ready", 1.5),
        ("a", "restarted", 11.0),
        ("a", "ready", 21.0),
    ]
    assert node.containers["a"].work_done_at == pytest.approx(12.0)


# --------------------------------------------------------------------------------------- the pod spec


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        pytest.param({"name": "app"}, None, id="no-probe"),
        pytest.param(
            {"readinessProbe": {"exec": {"command": ["true"]}}},
            ReadinessProbe(period_seconds=DEFAULT_PROBE_PERIOD_SECONDS),
            id="default-period-10s",
        ),
        pytest.param(
            {"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 3, "initialDelaySeconds": 7}},
            ReadinessProbe(period_seconds=3, initial_delay_seconds=7),
            id="period-and-delay",
        ),
        pytest.param(
            {"readinessProbe": {"tcpSocket": {"port": 80}, "successThreshold": 2}},
            ReadinessProbe(success_threshold=2),
            id="threshold",
        ),
        pytest.param(
            {"readinessProbe": {"periodSeconds": 0, "initialDelaySeconds": -1, "successThreshold": "x"}},
            ReadinessProbe(),
            id="invalid-fields-get-the-defaults",
        ),
        pytest.param({"startupProbe": {"periodSeconds": 1}}, None, id="startup-probe-not-modelled"),
    ],
)
def test_the_probe_is_read_from_the_container(
    container: dict[str, Any], expected: ReadinessProbe | None
) -> None:
    assert podparams.readiness_probe(container) == expected


def test_each_main_container_gets_its_own_probe() -> None:
    app = {"name": "app", "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 4}}
    pod = {"metadata": {"annotations": {podparams.CPU_SECONDS: "2"}}, "spec": {"containers": [app]}}
    spec = podparams.container_spec(pod, container=app)
    assert (spec.cpu_seconds, spec.readiness) == (2.0, ReadinessProbe(period_seconds=4))
    assert podparams.container_spec(pod).readiness is None


def test_a_scenarios_readiness_period_gives_its_pods_an_exec_probe_lockd_never_runs() -> None:
    s = parse_scenario(
        {
            "workloads": [
                {"kind": "Deployment", "name": "web", "readinessPeriodSeconds": 10},
                {"kind": "Deployment", "name": "plain"},
            ]
        }
    )
    web, plain = (workload_manifest(w, stagger=s.stagger)["spec"]["template"]["spec"] for w in s.workloads)
    [app] = web["containers"]
    assert app["readinessProbe"] == {"exec": {"command": ["true"]}, "periodSeconds": 10}
    assert podparams.readiness_probe(app) == ReadinessProbe(period_seconds=10)
    # lockd probes httpGet/tcpSocket at the pod IP, unreachable for a simulated pod: never for these.
    assert not plan_of(web).probed and "exec" in plan_of(web).why_not
    assert "readinessProbe" not in plain["containers"][0]
    assert s.workloads[1].readiness_period is None


@pytest.mark.parametrize(
    "period",
    [pytest.param(0, id="zero"), pytest.param(2.5, id="fraction"), pytest.param("10s", id="text")],
)
def test_a_bad_readiness_period_names_the_field(period: object) -> None:
    data = {"workloads": [{"kind": "Deployment", "name": "web", "readinessPeriodSeconds": period}]}
    with pytest.raises(ScenarioError, match=r"workloads\[0\]\.readinessPeriodSeconds"):
        parse_scenario(data)


# ---------------------------------------------------------------------------------- on the simulated kubelet


def _seconds(stamp: object) -> float:
    parsed = parse_rfc3339(str(stamp))
    assert parsed is not None, stamp
    return parsed


@pytest.mark.e2e
async def test_a_simulated_pod_is_ready_no_sooner_than_its_first_probe_after_the_work(
    backend: Backend,
) -> None:
    # 1 cpu-s of work, then the probe every 20 simulated seconds from the start: Ready at 20 s (1 s of wall
    # time at the time scale of 20), never at 1 s, when its work is done.
    ns = backend.namespace
    period = 20
    async with SimCluster(api=backend.api, settings=cluster_settings(nodes=1)) as cluster:
        web = Workload(kind="Deployment", name="web", namespace=ns, cpu_seconds=1, readiness_period=period)
        await cluster.apply(workload_manifest(web, stagger=StaggerConfig()))

        async def ready() -> list[dict[str, Any]]:
            pods = await list_items(cluster.client, PODS, namespace=ns, label_selector="app=web")
            return [p for p in pods if is_pod_ready(p)]

        async def one_ready() -> bool:
            return len(await ready()) == 1

        await eventually(one_ready, within=30, what="the web pod Ready")
        [pod] = await ready()
        [app] = pod["status"]["containerStatuses"]
        started = _seconds(app["state"]["running"]["startedAt"])
        [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
        # Timestamps are whole simulated seconds: 1 s of slack for the rounding.
        assert _seconds(condition["lastTransitionTime"]) - started >= period - 1
        assert app["restartCount"] == 0
