"""Server-side printing: HumanDuration, the pod STATUS column logic, Table and PartialObjectMetadata
answers chosen from the Accept header (the JSON object otherwise)."""

from __future__ import annotations

from typing import Any

import pytest

from sim.emulator.table import human_duration, pod_status_reason
from tests.emulator.conftest import Core, Http, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0, "0s", id="zero"),
        pytest.param(-1, "0s", id="clock-skew"),
        pytest.param(-5, "<invalid>", id="invalid"),
        pytest.param(119, "119s", id="seconds"),
        pytest.param(150, "2m30s", id="minutes-seconds"),
        pytest.param(600, "10m", id="minutes"),
        pytest.param(3 * 3600 + 5 * 60, "3h5m", id="hours-minutes"),
        pytest.param(30 * 3600, "30h", id="hours"),
        pytest.param(3 * 86400 + 3600, "3d1h", id="days-hours"),
        pytest.param(30 * 86400, "30d", id="days"),
        pytest.param(3 * 365 * 86400 + 86400, "3y1d", id="years-days"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def status(**fields: Any) -> dict[str, Any]:
    return {
        "metadata": {},
        "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "c"}]},
        "status": fields,
    }


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        pytest.param(status(phase="Pending"), "Pending", id="phase"),
        pytest.param(
            status(
                phase="Pending",
                conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
            ),
            "SchedulingGated",
            id="gated",
        ),
        pytest.param(
            status(phase="Pending", initContainerStatuses=[{"state": {"running": {}}}]),
            "Init:0/1",
            id="init-running",
        ),
        pytest.param(
            status(phase="Pending", initContainerStatuses=[{"state": {"terminated": {"exitCode": 1}}}]),
            "Init:ExitCode:1",
            id="init-failed",
        ),
        pytest.param(
            status(
                phase="Pending",
                initContainerStatuses=[{"state": {"terminated": {"exitCode": 0}}}],
                containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}],
            ),
            "ContainerCreating",
            id="creating",
        ),
        pytest.param(
            status(phase="Running", containerStatuses=[{"ready": True, "state": {"running": {}}}]),
            "Running",
            id="running",
        ),
        pytest.param(
            status(
                phase="Failed",
                containerStatuses=[{"state": {"terminated": {"exitCode": 2, "reason": "Error"}}}],
            ),
            "Error",
            id="error",
        ),
        pytest.param(
            {**status(phase="Running"), "metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"}},
            "Terminating",
            id="terminating",
        ),
    ],
)
def test_pod_status_column(obj: dict[str, Any], text: str) -> None:
    assert pod_status_reason(obj) == text


def test_table_and_metadata_answers(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p", labels={"a": "b"}))
    table = http.get("/api/v1/namespaces/default/pods", headers={"Accept": TABLE}).json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    row = table["rows"][0]
    assert row["cells"][:4] == ["p", "0/1", "Pending", "0"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["metadata"]["labels"] == {
        "a": "b"
    }
    assert table["metadata"]["resourceVersion"]
    full = http.get(
        "/api/v1/namespaces/default/pods/p?includeObject=Object", headers={"Accept": TABLE}
    ).json()
    assert full["rows"][0]["object"]["kind"] == "Pod"
    generic = http.get("/api/v1/namespaces/default/configmaps", headers={"Accept": TABLE}).json()
    assert [c["name"] for c in generic["columnDefinitions"]] == ["Name", "Age"]
    partial = http.get(
        "/api/v1/namespaces/default/pods",
        headers={"Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
    ).json()
    assert partial["kind"] == "PartialObjectMetadataList" and partial["items"][0]["metadata"]["name"] == "p"
    plain = http.get(
        "/api/v1/namespaces/default/pods",
        headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"},
    ).json()
    assert plain["kind"] == "PodList"
