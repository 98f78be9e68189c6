"""The plugin's pure parts, without a cluster: `/status` documents (docs/contracts.md shapes, and broken
or missing ones) into the status report and its rows (`report`), a pod's explanation and verdict
(`explain`), where a stagger pod's `/status` is (`pods`), the table printer (`tables`, with hypothesis),
and how the emulator's pod proxy splits `scheme:name:port` (`sim.emulator.podproxy`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubectl_stagger import explain, pods, report, tables
from kubectl_stagger.report import Fetched
from sim.emulator.podproxy import split_scheme_name_port

LOCKD_DOC: dict[str, Any] = {
    "node": "n1",
    "mode": "cluster",
    "policy": {"name": "tight", "maxConcurrent": 2},
    "load": {"cpuPercent": 41.6, "ioPercent": None, "source": "stat"},
    "slots": [{"namespace": "shop", "name": "a", "grantedAt": "2024-01-01T00:00:00Z"}],
    "waiting": 7,
    "queue": [
        {
            "namespace": "shop",
            "name": "b",
            "position": 1,
            "waitingSeconds": 3.5,
            "reason": "cpu 93% >= maxLoad 80%",
        }
    ],
    "counters": {},
}
CONTROLLER_DOC: dict[str, Any] = {
    "controller": {"prefix": "p.example"},
    "ready": True,
    "policy": {},
    "groups": {
        "enabled": True,
        "granting": True,
        "leader": "c-0",
        "groups": [
            {"policy": "image-pull", "key": "nginx:1", "mode": "lock", "ready": 4, "starting": 2, "held": 9,
             "limit": 16, "pacer": "exponential 4/4/16"},
        ],
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("fetched", "row"),
    [
        pytest.param(
            Fetched(pod="lockd-x", node="n1", doc=LOCKD_DOC),
            ["n1", "lockd-x", "1/2", "7", "tight", "42%", "cpu 93% >= maxLoad 80%"],
            id="waiting",
        ),
        pytest.param(
            Fetched(pod="lockd-x", node="n1", doc={**LOCKD_DOC, "queue": [], "waiting": 0, "load": {}}),
            ["n1", "lockd-x", "1/2", "0", "tight", "-", "-"],
            id="nobody-waits",
        ),
        pytest.param(
            Fetched(pod="lockd-x", node="n1", doc={**LOCKD_DOC, "policy": {"name": "open"}}),
            ["n1", "lockd-x", "1/-", "7", "open", "42%", "cpu 93% >= maxLoad 80%"],
            id="no-limit",
        ),
        pytest.param(
            Fetched(pod="lockd-x", node="n2", error="503 connection refused"),
            ["n2", "lockd-x", "-", "-", "-", "-", "(no answer: 503 connection refused)"],
            id="unreachable",
        ),
        pytest.param(
            Fetched(pod="lockd-x", node="n3", doc={}),
            ["n3", "lockd-x", "0/-", "0", "-", "-", "-"],
            id="empty",
        ),
    ],
)
def test_a_node_row_says_slots_queue_and_the_throttle_that_says_no(fetched: Fetched, row: list[str]) -> None:
    assert report.node_rows(report.status_report(controller=None, lockds=[fetched])) == [row]


@pytest.mark.parametrize(
    ("controller", "groups", "part"),
    [
        pytest.param(
            Fetched(pod="c-0", doc=CONTROLLER_DOC),
            [["image-pull", "nginx:1", "lock", "4", "2", "9", "16", "exponential 4/4/16"]],
            {"pod": "c-0", "ready": True, "granting": True, "leader": "c-0", "prefix": "p.example"},
            id="leader",
        ),
        pytest.param(
            Fetched(pod="c-1", doc={"groups": {"enabled": False, "why": "no --token-file"}}),
            [],
            {
                "pod": "c-1",
                "ready": False,
                "granting": False,
                "leader": None,
                "prefix": None,
                "groupsOff": "no --token-file",
            },
            id="groups-off",
        ),
        pytest.param(
            Fetched(pod="c-2", error="timeout"), [], {"pod": "c-2", "error": "timeout"}, id="no-answer"
        ),
        pytest.param(None, [], None, id="no-controller"),
    ],
)
def test_the_groups_come_from_the_controller_that_grants(
    controller: Fetched | None, groups: list[list[str]], part: dict[str, Any] | None
) -> None:
    made = report.status_report(controller=controller, lockds=[])
    assert report.group_rows(made) == groups
    assert made["controller"] == part


def test_nodes_are_in_name_order() -> None:
    lockds = [Fetched(pod=f"l-{n}", node=n, error="x") for n in ("n2", "n10", "n1")]
    assert [n["node"] for n in report.status_report(controller=None, lockds=lockds)["nodes"]] == [
        "n1",
        "n10",
        "n2",
    ]


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "shop",
            "name": "b",
            "labels": {"p.example/staggered": "1", "app": "shop"},
            "annotations": {"p.example/group-key": '{"image-pull":"nginx:1"}'},
        },
        "spec": {"nodeName": "n1"},
        "status": status,
    }


READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


@pytest.mark.parametrize(
    ("pod", "lockd", "starts"),
    [
        pytest.param(_pod(), Fetched(pod="l", doc=LOCKD_DOC), "waiting in n1's lockd queue at position 1 for 3.5s: cpu 93%", id="queued"),
        pytest.param(_pod(), Fetched(pod="l", doc={**LOCKD_DOC, "queue": []}), "held for its group: image-pull[nginx:1]: 2 starting of limit 16, 9 held", id="held-by-group"),
        pytest.param(_pod(), Fetched(pod="l", error="refused"), "held for its group", id="lockd-gone-but-labelled"),
        pytest.param(_pod(**READY), None, "Ready", id="ready"),
    ],
)  # fmt: skip
def test_the_verdict_names_what_holds_the_pod(
    pod: dict[str, Any], lockd: Fetched | None, starts: str
) -> None:
    found = explain.explanation(
        pod=pod, events=[], controller=Fetched(pod="c", doc=CONTROLLER_DOC), lockd=lockd
    )
    assert found["verdict"].startswith(starts), found["verdict"]
    assert found["stagger"] == {"p.example/staggered": "1", "p.example/group-key": '{"image-pull":"nginx:1"}'}
    assert explain.group_rows(found) == [
        ["image-pull", "nginx:1", "lock", "4", "2", "9", "16", "exponential 4/4/16"]
    ]


def test_events_are_listed_oldest_first() -> None:
    events = [
        {"lastTimestamp": "2024-01-01T00:00:09Z", "type": "Normal", "reason": "StaggerGranted",
         "source": {"component": "stagger-lockd"}, "message": "granted"},
        {"lastTimestamp": "2024-01-01T00:00:01Z", "type": "Normal", "reason": "StaggerWaiting",
         "source": {"component": "stagger-lockd"}, "message": "2 of 2\nslots"},
    ]  # fmt: skip
    found = explain.explanation(pod=_pod(), events=events, controller=None, lockd=None)
    assert explain.event_rows(found) == [
        ["2024-01-01T00:00:01Z", "Normal", "StaggerWaiting", "stagger-lockd", "2 of 2 slots"],
        ["2024-01-01T00:00:09Z", "Normal", "StaggerGranted", "stagger-lockd", "granted"],
    ]


@pytest.mark.parametrize(
    ("ports", "component", "expected"),
    [
        pytest.param([{"name": "http", "containerPort": 9400}], "lockd", ("http", 9400), id="lockd"),
        pytest.param(
            [{"name": "probes", "containerPort": 8080}, {"name": "https", "containerPort": 9443}],
            "controller",
            ("https", 9443),
            id="controller-named-port",
        ),
        pytest.param([{"containerPort": 9400}], "lockd", ("http", 9400), id="unnamed"),
        pytest.param([], "lockd", None, id="no-port"),
    ],
)
def test_the_status_endpoint_is_the_charts_named_port(
    ports: list[dict[str, Any]], component: str, expected: tuple[str, int] | None
) -> None:
    assert pods.endpoint({"spec": {"containers": [{"ports": ports}]}}, component=component) == expected


def test_the_proxy_path_names_scheme_pod_and_port() -> None:
    path = pods.proxy_path(namespace="stagger", name="lockd-abc", scheme="https", port=9443, path="/status")
    assert path == "/api/v1/namespaces/stagger/pods/https:lockd-abc:9443/proxy/status"


@pytest.mark.parametrize(
    ("id_", "split"),
    [
        pytest.param("web", ("http", "web", ""), id="name"),
        pytest.param("web:8080", ("http", "web", "8080"), id="name-port"),
        pytest.param("https:web:8443", ("https", "web", "8443"), id="scheme-name-port"),
        pytest.param("ftp:web:21", None, id="bad-scheme"),
        pytest.param("a:b:c:d", None, id="too-many"),
        pytest.param(":80", None, id="no-name"),
    ],
)
def test_the_emulators_pod_proxy_splits_names_as_the_api_server(
    id_: str, split: tuple[str, str, str] | None
) -> None:
    assert split_scheme_name_port(id_) == split


# Whitespace is left out: a trailing blank is cut from a line, as kubectl does.
cells = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")), max_size=12)


@given(st.integers(min_value=1, max_value=5).flatmap(lambda n: st.tuples(
    st.lists(cells, min_size=n, max_size=n), st.lists(st.lists(cells, min_size=n, max_size=n), max_size=5))))  # fmt: skip
def test_every_column_starts_at_the_same_place_on_every_line(
    table: tuple[list[str], list[list[str]]],
) -> None:
    headers, rows = table
    lines = tables.render_table(headers, rows).splitlines()
    assert len(lines) == 1 + len(rows)
    assert all(line == line.rstrip() for line in lines)
    widths = [max(len(line[i]) for line in [headers, *rows]) for i in range(len(headers))]
    starts = [sum(widths[:i]) + 2 * i for i in range(len(headers))]
    for printed, cells_of_line in zip(lines, [headers, *rows], strict=True):
        padded = printed.ljust(sum(widths) + 2 * len(widths))
        for start, cell in zip(starts, cells_of_line, strict=True):
            assert padded[start : start + len(cell)] == cell
