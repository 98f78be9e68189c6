"""Which probes lockd runs for a pod while it holds a start-up slot, and when the pod has passed
(lockd/podprobes.py): `plan_of` turns each container's readinessProbe (else its startupProbe) into a
`Target`, sidecars included and ordinary init containers not, with the kubelet's defaults and its port
lookup, and gives up on the whole pod (`why_not`) for an exec or grpc probe, another host, or a port that is
no port of its container; `pod_plan` reads the plan a lean pod keeps and computes it from a full one, to
the same answer; `due` waits for the container to run and for its initialDelaySeconds; `all_running`;
`counted` and `passed` count consecutive passes up to each successThreshold; `Target.describe`."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockd import podprobes
from lockd.clusterwatch import lean_pod
from lockd.podprobes import NO_PROBE, Plan, Target, plan_of
from stagger.timestamps import parse_rfc3339

STARTED_AT = "2026-11-24T05:00:00Z"
STARTED = parse_rfc3339(STARTED_AT) or 0.0


def app(**fields: Any) -> dict[str, Any]:
    """A container named app, with the given fields (probes, ports)."""
    return {"name": "app", "image": "example/web:1", **fields}


def http(**action: Any) -> dict[str, Any]:
    return {"httpGet": {"port": 8080, **action}}


def tcp(**action: Any) -> dict[str, Any]:
    return {"tcpSocket": {"port": 5432, **action}}


# ---------------------------------------------------------------------------------------------- plan_of


@pytest.mark.parametrize(
    ("probe", "target"),
    [
        pytest.param(http(), Target(container="app", kind="http", port=8080), id="http-defaults"),
        pytest.param(
            http(path="readyz"),
            Target(container="app", kind="http", port=8080, path="/readyz"),
            id="path-without-slash",
        ),
        pytest.param(
            http(path="/healthz?full=1"),
            Target(container="app", kind="http", port=8080, path="/healthz?full=1"),
            id="path-kept",
        ),
        pytest.param(
            http(scheme="HTTPS"), Target(container="app", kind="http", port=8080, https=True), id="https"
        ),
        pytest.param(http(scheme="HTTP"), Target(container="app", kind="http", port=8080), id="http-scheme"),
        pytest.param(
            http(httpHeaders=[{"name": "Host", "value": "web.local"}, {"name": "X-Empty"}, {"value": "no"}]),
            Target(
                container="app",
                kind="http",
                port=8080,
                headers=(("Host", "web.local"), ("X-Empty", "")),
            ),
            id="headers",
        ),
        pytest.param(
            {**http(), "timeoutSeconds": 3, "successThreshold": 2, "initialDelaySeconds": 5},
            Target(
                container="app", kind="http", port=8080, timeout=3.0, success_threshold=2, initial_delay=5.0
            ),
            id="timings",
        ),
        pytest.param(
            {**http(), "timeoutSeconds": 0, "successThreshold": 0, "initialDelaySeconds": -1},
            Target(container="app", kind="http", port=8080),
            id="timings-below-least",
        ),
        pytest.param(
            {**http(), "timeoutSeconds": "3", "successThreshold": True},
            Target(container="app", kind="http", port=8080),
            id="timings-not-numbers",
        ),
        pytest.param(tcp(), Target(container="app", kind="tcp", port=5432), id="tcp"),
        pytest.param(
            {**tcp(), "timeoutSeconds": 2, "initialDelaySeconds": 1.5},
            Target(container="app", kind="tcp", port=5432, timeout=2.0, initial_delay=1.5),
            id="tcp-timings",
        ),
        pytest.param(
            tcp(port="db"), Target(container="app", kind="tcp", port=5433), id="named-port-from-container"
        ),
        pytest.param(http(port="web"), Target(container="app", kind="http", port=8081), id="named-http-port"),
        pytest.param(tcp(port="6000"), Target(container="app", kind="tcp", port=6000), id="numeric-string"),
        pytest.param(tcp(port=1), Target(container="app", kind="tcp", port=1), id="lowest-port"),
        pytest.param(tcp(port=65535), Target(container="app", kind="tcp", port=65535), id="highest-port"),
        pytest.param(http(host=""), Target(container="app", kind="http", port=8080), id="empty-host"),
    ],
)
def test_a_probe_becomes_its_target(probe: dict[str, Any], target: Target) -> None:
    ports = [{"name": "db", "containerPort": 5433}, {"name": "web", "containerPort": 8081}]
    plan = plan_of({"containers": [app(readinessProbe=probe, ports=ports)]})
    assert plan == Plan(targets=(target,))
    assert plan.probed


@pytest.mark.parametrize(
    ("container", "why_not"),
    [
        pytest.param(
            app(readinessProbe=tcp(port="db")),
            "container app's probe port 'db' is no port of the container",
            id="named-port-missing",
        ),
        pytest.param(
            app(readinessProbe=tcp(port="db"), ports=[{"name": "web", "containerPort": 80}]),
            "container app's probe port 'db' is no port of the container",
            id="named-port-not-among-ports",
        ),
        pytest.param(
            app(readinessProbe=tcp(port="db"), ports=[{"name": "db", "containerPort": 0}]),
            "container app's probe port 'db' is no port of the container",
            id="named-port-zero",
        ),
        pytest.param(
            app(readinessProbe=tcp(port=0)),
            "container app's probe port '0' is no port of the container",
            id="0",
        ),
        pytest.param(
            app(readinessProbe=tcp(port=70000)),
            "container app's probe port '70000' is no port of the container",
            id="70000",
        ),
        pytest.param(
            app(readinessProbe=http(port=True)),
            "container app's probe port 'True' is no port of the container",
            id="bool",
        ),
        pytest.param(
            app(readinessProbe=http(port=8080.0)),
            "container app's probe port '8080.0' is no port of the container",
            id="float",
        ),
        pytest.param(
            app(readinessProbe={"tcpSocket": {}}),
            "container app's probe port 'None' is no port of the container",
            id="no-port",
        ),
        pytest.param(
            app(readinessProbe=http(port="p" * 100)),
            f"container app's probe port {'p' * 64!r} is no port of the container",
            id="long-name-cut",
        ),
        pytest.param(
            app(readinessProbe=http(host="example.com")),
            "container app's probe names the host 'example.com': lockd probes only the pod's own IP",
            id="http-host",
        ),
        pytest.param(
            app(readinessProbe=tcp(host="192.0.2.9")),
            "container app's probe names the host '192.0.2.9': lockd probes only the pod's own IP",
            id="tcp-host",
        ),
    ],
)
def test_a_pod_lockd_cannot_probe_says_why(container: dict[str, Any], why_not: str) -> None:
    plan = plan_of({"containers": [container]})
    assert plan == Plan(why_not=why_not)
    assert not plan.probed


@pytest.mark.parametrize(
    ("container", "kind"),
    [
        pytest.param(app(readinessProbe={"exec": {"command": ["true"]}}), "exec", id="exec"),
        pytest.param(app(readinessProbe={"grpc": {"port": 9000}}), "grpc", id="grpc"),
        pytest.param(app(startupProbe={"exec": {"command": ["true"]}}), "exec", id="startup-exec"),
        pytest.param(app(startupProbe={"grpc": {"port": 9000}}), "grpc", id="startup-grpc"),
    ],
)
def test_an_exec_or_grpc_probe_is_left_to_the_kubelet(container: dict[str, Any], kind: str) -> None:
    plan = plan_of({"containers": [container]})
    assert not plan.probed and plan.targets == ()
    # /status shows which container, and which kind of probe, keeps lockd from probing the pod.
    assert plan.why_not.startswith("container app ") and f" {kind} probe" in plan.why_not


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"exec": {"command": ["cat", "/tmp/ready"]}}, id="exec"),
        pytest.param({"grpc": {"port": 9000}}, id="grpc"),
        pytest.param(http(host="metadata.internal"), id="host"),
        pytest.param(tcp(port="nope"), id="bad-port"),
    ],
)
@pytest.mark.parametrize("first", [pytest.param(True, id="first"), pytest.param(False, id="last")])
def test_one_container_lockd_cannot_probe_leaves_the_whole_pod_to_the_kubelet(
    other: dict[str, Any], first: bool
) -> None:
    # lockd cannot judge the other container, so the httpGet of app must not let the pod pass on its own.
    containers = [app(readinessProbe=http()), {"name": "side", "readinessProbe": other}]
    plan = plan_of({"containers": containers[::-1] if first else containers})
    assert not plan.probed and plan.targets == ()
    assert "container side" in plan.why_not


@pytest.mark.parametrize(
    ("container", "target"),
    [
        pytest.param(
            app(readinessProbe=http(path="/ready"), startupProbe=tcp()),
            Target(container="app", kind="http", port=8080, path="/ready"),
            id="readiness-over-startup",
        ),
        pytest.param(
            app(readinessProbe=tcp(), startupProbe={"exec": {"command": ["true"]}}),
            Target(container="app", kind="tcp", port=5432),
            id="readiness-over-startup-exec",
        ),
        pytest.param(
            app(startupProbe=http(path="/started")),
            Target(container="app", kind="http", port=8080, path="/started"),
            id="startup-without-readiness",
        ),
        pytest.param(
            app(readinessProbe=None, startupProbe=tcp()),
            Target(container="app", kind="tcp", port=5432),
            id="readiness-null",
        ),
    ],
)
def test_the_readiness_probe_is_preferred_to_the_startup_probe(
    container: dict[str, Any], target: Target
) -> None:
    assert plan_of({"containers": [container]}) == Plan(targets=(target,))


def test_sidecars_are_probed_and_ordinary_init_containers_are_not() -> None:
    spec: dict[str, Any] = {
        "initContainers": [
            {"name": "migrate", "readinessProbe": http(path="/never")},  # runs to completion first
            {"name": "onfailure", "restartPolicy": "OnFailure", "readinessProbe": tcp(port=1)},
            {"name": "proxy", "restartPolicy": "Always", "readinessProbe": tcp(port=15021)},
            {"name": "logger", "restartPolicy": "Always"},  # ready once it runs
        ],
        "containers": [app(readinessProbe=http(path="/ready"))],
    }
    assert plan_of(spec) == Plan(
        targets=(
            Target(container="app", kind="http", port=8080, path="/ready"),
            Target(container="proxy", kind="tcp", port=15021),
        )
    )
    # An ordinary init container's exec probe does not stop lockd probing the pod either.
    spec["initContainers"][0]["readinessProbe"] = {"exec": {"command": ["true"]}}
    assert plan_of(spec).probed


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="empty-spec"),
        pytest.param({"containers": None}, id="containers-null"),
        pytest.param({"containers": [app()]}, id="no-probe"),
        pytest.param({"containers": [app(readinessProbe=None, livenessProbe=http())]}, id="liveness-only"),
        pytest.param({"containers": [app(readinessProbe={}), "not-a-container"]}, id="empty-probe"),
        pytest.param({"initContainers": [{"name": "i", "readinessProbe": http()}]}, id="init-only"),
    ],
)
def test_a_pod_without_probes_shares_no_probe(spec: dict[str, Any]) -> None:
    assert plan_of(spec) is NO_PROBE
    assert not NO_PROBE.probed


@pytest.mark.parametrize(
    "port",
    [
        pytest.param("²", id="superscript-two"),
        pytest.param("٣", id="arabic-indic-three"),
        pytest.param("1" * 5000, id="past-int-digit-limit"),
        pytest.param("080800", id="six-digits"),
    ],
)
def test_a_port_of_digits_that_are_no_port_number_is_no_port(port: str) -> None:
    plan = plan_of({"containers": [app(readinessProbe=tcp(port=port))]})
    assert plan == Plan(why_not=f"container app's probe port {port[:64]!r} is no port of the container")


# ---------------------------------------------------------------------------------------------- pod_plan


def full_pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u-1"},
        "spec": {"nodeName": "n1", "containers": list(containers)},
        "status": {"phase": "Pending", "podIP": "198.18.1.7"},
    }


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(full_pod(app(readinessProbe=http(path="/ready"))), id="http"),
        pytest.param(
            full_pod(app(readinessProbe=tcp()), {"name": "b", "startupProbe": http(port=9)}), id="two"
        ),
        pytest.param(full_pod(app(readinessProbe={"exec": {"command": ["true"]}})), id="exec"),
        pytest.param(full_pod(app()), id="no-probe"),
        pytest.param({"metadata": {"name": "bare"}}, id="no-spec"),
        pytest.param({"metadata": {"name": "bare"}, "spec": None}, id="spec-null"),
    ],
)
def test_the_plan_kept_on_the_lean_copy_is_the_plan_of_the_full_pod(pod: dict[str, Any]) -> None:
    sent = copy.deepcopy(pod)
    lean = lean_pod(pod)
    assert podprobes.pod_plan(lean) == podprobes.pod_plan(pod) == plan_of(pod.get("spec") or {})
    assert pod == sent
    if isinstance(pod.get("spec"), dict):
        # The lean copy has no containers left to compute it from: the plan is the one it keeps.
        assert "containers" not in lean["spec"]
        assert lean["spec"][podprobes.PLAN_KEPT] == podprobes.pod_plan(pod)


def test_the_kept_plan_is_read_rather_than_computed() -> None:
    kept = Plan(targets=(Target(container="kept", kind="tcp", port=1),))
    pod = full_pod(app(readinessProbe=http()))
    pod["spec"][podprobes.PLAN_KEPT] = kept
    assert podprobes.pod_plan(pod) is kept
    # Anything else under that key (a pod cannot send a Plan) is not taken for one.
    pod["spec"][podprobes.PLAN_KEPT] = {"targets": [], "why_not": ""}
    assert podprobes.pod_plan(pod) == Plan(targets=(Target(container="app", kind="http", port=8080),))


def test_most_pods_share_one_plan() -> None:
    assert podprobes.pod_plan(lean_pod(full_pod(app()))) is NO_PROBE
    assert podprobes.pod_plan(lean_pod(full_pod({"name": "other"}))) is NO_PROBE


# ---------------------------------------------------------------------------------------------- due


def pod_with(*statuses: dict[str, Any], key: str = "containerStatuses") -> dict[str, Any]:
    return {"metadata": {"name": "web-1"}, "status": {"podIP": "198.18.1.7", key: list(statuses)}}


def status(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ready": False, "state": state}


RUNNING = {"running": {"startedAt": STARTED_AT}}
WAITING = {"waiting": {"reason": "ContainerCreating"}}
TERMINATED = {"terminated": {"exitCode": 0}}
DELAYED = Target(container="app", kind="http", port=8080, initial_delay=10.0)


@pytest.mark.parametrize(
    ("pod", "wall", "is_due"),
    [
        pytest.param(pod_with(status("app", WAITING)), STARTED + 60, False, id="waiting"),
        pytest.param(pod_with(status("app", TERMINATED)), STARTED + 60, False, id="terminated"),
        pytest.param(pod_with(status("app", {})), STARTED + 60, False, id="no-state"),
        pytest.param(pod_with(status("other", RUNNING)), STARTED + 60, False, id="no-status-of-its-own"),
        pytest.param(pod_with(), STARTED + 60, False, id="no-statuses"),
        pytest.param({"metadata": {}}, STARTED + 60, False, id="no-status"),
        pytest.param(pod_with(status("app", RUNNING)), STARTED + 9.9, False, id="within-initial-delay"),
        pytest.param(pod_with(status("app", RUNNING)), STARTED + 10, True, id="initial-delay-over"),
        pytest.param(pod_with(status("app", RUNNING)), STARTED + 600, True, id="long-past"),
        pytest.param(pod_with(status("app", {"running": {}})), STARTED, True, id="running-no-startedAt"),
        pytest.param(
            pod_with(status("app", {"running": {"startedAt": "soon"}})),
            STARTED,
            True,
            id="running-bad-startedAt",
        ),
        pytest.param(
            pod_with(status("app", RUNNING), key="initContainerStatuses"),
            STARTED + 10,
            True,
            id="sidecar-status",
        ),
    ],
)
def test_a_target_is_due_once_its_container_runs_past_its_initial_delay(
    pod: dict[str, Any], wall: float, is_due: bool
) -> None:
    plan = Plan(targets=(DELAYED,))
    assert podprobes.due(plan, pod, wall=wall) == ((DELAYED,) if is_due else ())


def test_due_picks_each_target_by_its_own_container() -> None:
    quick = Target(container="proxy", kind="tcp", port=15021)
    plan = Plan(targets=(DELAYED, quick))
    pod = pod_with(status("app", RUNNING))
    pod["status"]["initContainerStatuses"] = [status("proxy", RUNNING)]
    assert podprobes.due(plan, pod, wall=STARTED + 1) == (quick,)
    assert podprobes.due(plan, pod, wall=STARTED + 11) == (DELAYED, quick)
    assert podprobes.due(NO_PROBE, pod, wall=STARTED + 11) == ()


# ---------------------------------------------------------------------------------------------- all_running


@pytest.mark.parametrize(
    ("pod", "running"),
    [
        pytest.param(pod_with(status("app", RUNNING)), True, id="one-running"),
        pytest.param(pod_with(status("app", RUNNING), status("b", {"running": {}})), True, id="all-running"),
        pytest.param(pod_with(status("app", RUNNING), status("b", WAITING)), False, id="one-waiting"),
        pytest.param(pod_with(status("app", RUNNING), status("b", TERMINATED)), False, id="one-terminated"),
        pytest.param(pod_with(), False, id="no-statuses"),
        pytest.param({"metadata": {}, "status": {"containerStatuses": None}}, False, id="statuses-null"),
        pytest.param({"metadata": {}}, False, id="no-status"),
        pytest.param(
            pod_with(status("proxy", RUNNING), key="initContainerStatuses"), False, id="only-sidecar-statuses"
        ),
    ],
)
def test_all_running_needs_every_container_status_running(pod: dict[str, Any], running: bool) -> None:
    assert podprobes.all_running(pod) is running


# ---------------------------------------------------------------------------------------------- counted, passed


def tally_after(results: list[list[tuple[Target, bool]]]) -> dict[str, int]:
    tally: dict[str, int] = {}
    for attempt in results:
        tally = podprobes.counted(tally, attempt)
    return tally


@given(results=st.lists(st.booleans(), max_size=30), threshold=st.integers(min_value=1, max_value=5))
def test_one_target_passes_exactly_after_threshold_passes_in_a_row(
    results: list[bool], threshold: int
) -> None:
    target = Target(container="app", kind="http", port=8080, success_threshold=threshold)
    tally = tally_after([[(target, result)] for result in results])
    last = results[-threshold:]
    assert podprobes.passed(Plan(targets=(target,)), tally) is (len(last) == threshold and all(last))
    # The tally is the number of passes since the last failure.
    streak = results[::-1].index(False) if False in results else len(results)
    assert tally.get("app", 0) == streak


@given(
    tally=st.dictionaries(st.sampled_from(["app", "b", "other"]), st.integers(min_value=0, max_value=100)),
    with_targets=st.booleans(),
)
def test_a_plan_with_why_not_never_passes(tally: dict[str, int], with_targets: bool) -> None:
    targets = (Target(container="app", kind="tcp", port=1),) if with_targets else ()
    assert not podprobes.passed(Plan(targets=targets, why_not="container b has a exec probe"), tally)
    assert not podprobes.passed(NO_PROBE, tally)


@given(
    attempts=st.lists(st.tuples(st.booleans() | st.none(), st.booleans() | st.none()), max_size=20),
    thresholds=st.tuples(st.integers(min_value=1, max_value=3), st.integers(min_value=1, max_value=3)),
)
def test_two_targets_pass_only_when_both_reached_their_thresholds(
    attempts: list[tuple[bool | None, bool | None]], thresholds: tuple[int, int]
) -> None:
    # None: the target was not due in that attempt, so it has no result and its count stands.
    targets = tuple(
        Target(container=name, kind="tcp", port=1, success_threshold=k)
        for name, k in zip(("app", "b"), thresholds, strict=True)
    )
    tally = tally_after(
        [
            [(target, result) for target, result in zip(targets, attempt, strict=True) if result is not None]
            for attempt in attempts
        ]
    )
    reached = []
    for index, target in enumerate(targets):
        seen = [attempt[index] for attempt in attempts if attempt[index] is not None]
        last = seen[-target.success_threshold :]
        reached.append(len(last) == target.success_threshold and all(last))
    assert podprobes.passed(Plan(targets=targets), tally) is all(reached)


def test_counted_leaves_the_tally_given_alone() -> None:
    target = Target(container="app", kind="tcp", port=1)
    tally = {"app": 2, "b": 1}
    assert podprobes.counted(tally, [(target, True)]) == {"app": 3, "b": 1}
    assert podprobes.counted(tally, [(target, False)]) == {"app": 0, "b": 1}
    assert tally == {"app": 2, "b": 1}


# ---------------------------------------------------------------------------------------------- describe


@pytest.mark.parametrize(
    ("target", "ip", "described"),
    [
        pytest.param(
            Target(container="app", kind="http", port=8080, path="/readyz"),
            "198.18.1.5",
            "GET http://198.18.1.5:8080/readyz",
            id="http-ipv4",
        ),
        pytest.param(
            Target(container="app", kind="http", port=8443, https=True),
            "198.18.1.5",
            "GET https://198.18.1.5:8443/",
            id="https-ipv4",
        ),
        pytest.param(
            Target(container="app", kind="tcp", port=5432), "198.18.1.5", "TCP 198.18.1.5:5432", id="tcp-ipv4"
        ),
        pytest.param(
            Target(container="app", kind="http", port=8080, path="/readyz"),
            "2001:2::7",
            "GET http://[2001:2::7]:8080/readyz",
            id="http-ipv6",
        ),
        pytest.param(
            Target(container="app", kind="tcp", port=5432),
            "2001:2::7",
            "TCP [2001:2::7]:5432",
            id="tcp-ipv6",
        ),
    ],
)
def test_describe(target: Target, ip: str, described: str) -> None:
    assert target.describe(ip) == described
