"""Scenario files: the packaged herd scenario, field-naming errors, and the manifests built from workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.cluster.podparams import CPU_SECONDS, LIVENESS_SECONDS, RUN_SECONDS
from sim.cluster.scenario import (
    INITCLIENT_CONTAINER,
    ScenarioError,
    expected_pods,
    load_scenario,
    parse_scenario,
    with_stagger,
    workload_manifest,
)

MINIMAL: dict[str, Any] = {"workloads": [{"kind": "Deployment", "name": "web", "replicas": 2}]}


def test_the_packaged_herd_scenario() -> None:
    s = load_scenario()
    assert (s.nodes.count, s.nodes.cores) == (4, 4.0)
    [w] = s.workloads
    assert (w.kind, w.replicas, w.cpu_seconds, w.liveness_seconds) == ("Deployment", 60, 3.0, 20.0)
    assert yaml.safe_load(s.stagger.policies)["nodePolicies"][0]["throttleConfig"] == {
        "maxConcurrent": {"value": 2}
    }
    assert expected_pods(s) == 60


def test_manifests_with_and_without_stagger() -> None:
    s = parse_scenario({**MINIMAL, "stagger": {"enabled": True, "hostPort": 9411}})
    on = workload_manifest(s.workloads[0], stagger=s.stagger)
    template = on["spec"]["template"]
    assert template["metadata"]["labels"]["v1.stagger.technicianted/enable"] == "1"
    [init] = template["spec"]["initContainers"]
    assert init["name"] == INITCLIENT_CONTAINER and init["command"] == ["python", "-m", "initclient"]
    assert {"name": "STAGGER_LOCKD_URL", "value": "http://$(HOST_IP):9411"} in init["env"]
    assert template["metadata"]["annotations"] == {CPU_SECONDS: "1", LIVENESS_SECONDS: "30"}
    off = workload_manifest(s.workloads[0], stagger=with_stagger(s, False).stagger)
    assert "initContainers" not in off["spec"]["template"]["spec"]
    assert on["spec"]["selector"] == {"matchLabels": {"app": "web"}}


def test_job_manifest() -> None:
    s = parse_scenario(
        {
            "workloads": [
                {
                    "kind": "Job",
                    "name": "batch",
                    "parallelism": 3,
                    "completions": 5,
                    "runSeconds": 4,
                    "livenessSeconds": None,
                    "podFailurePolicy": {"rules": [{"action": "Ignore"}]},
                }
            ]
        }
    )
    job = workload_manifest(s.workloads[0], stagger=s.stagger)
    spec = job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (3, 5, 6)
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["template"]["metadata"]["annotations"][RUN_SECONDS] == "4"
    assert spec["template"]["metadata"]["annotations"][LIVENESS_SECONDS] == "none"
    assert spec["podFailurePolicy"] == {"rules": [{"action": "Ignore"}]}
    assert expected_pods(s) == 5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({}, "workloads: expected a non-empty list", id="no-workloads"),
        pytest.param({**MINIMAL, "nodes": {"count": 0}}, "nodes.count", id="no-nodes"),
        pytest.param({**MINIMAL, "nodes": {"cores": 0}}, "nodes.cores: must be > 0", id="no-cores"),
        pytest.param({**MINIMAL, "nodes": {"memory": "lots"}}, "nodes.memory", id="memory"),
        pytest.param({**MINIMAL, "timeScale": "fast"}, "scenario.timeScale: expected a number", id="scale"),
        pytest.param({**MINIMAL, "colour": "red"}, "scenario: unknown field(s) colour", id="unknown"),
        pytest.param({"workloads": [{"kind": "Pod", "name": "x"}]}, "workloads[0].kind", id="kind"),
        pytest.param({"workloads": [{"kind": "Job"}]}, "workloads[0].name", id="nameless"),
        pytest.param(
            {"workloads": [{"kind": "Job", "name": "x", "requests": {"cpu": "many"}}]},
            "workloads[0].requests.cpu",
            id="quantity",
        ),
        pytest.param(
            {"workloads": [MINIMAL["workloads"][0], MINIMAL["workloads"][0]]},
            "workloads[1].name: duplicate",
            id="duplicate",
        ),
        pytest.param({**MINIMAL, "stagger": {"enabled": "yes"}}, "stagger.enabled", id="stagger-bool"),
        pytest.param({**MINIMAL, "stagger": {"hostPort": 70000}}, "stagger.hostPort", id="port"),
        pytest.param({**MINIMAL, "model": {"backoffJitter": 3}}, "model: backoff_jitter", id="jitter"),
    ],
)
def test_bad_scenarios_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert message in str(info.value)


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workloads: [")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: not valid YAML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad.write_text(yaml.safe_dump({"workloads": [{"kind": "Nope", "name": "x"}]}))
    with pytest.raises(ScenarioError, match=r"bad.yaml: workloads\[0\].kind"):
        load_scenario(bad)
