"""The chart's alerts and dashboard (`metrics.prometheusRule`, `metrics.dashboard`): the rendered rules pass
`promtool check rules` and fire as meant under `promtool test rules` (each alert on a series that should
raise it, and not on its neighbours); every metric the alerts and the dashboard query is one a running lockd
and a running controller export on /metrics (or Prometheus' own `up`)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART, NAMESPACE, render
from tests.processes import free_port, get, running_lockd
from tests.tools import go_tool
from tests.webhook.process import Certs, running_webhook, tls_args

LOCKD_JOB = 'job="demo-stagger-lockd-metrics", namespace="stagger"'
CONTROLLER_JOB = 'job="demo-stagger-controller-metrics", namespace="stagger"'


def rule_groups(*sets: str) -> list[dict[str, Any]]:
    [rule] = [
        doc for doc in render("metrics.prometheusRule.enabled=true", *sets) if doc["kind"] == "PrometheusRule"
    ]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def dashboard() -> dict[str, Any]:
    [config_map] = [
        doc
        for doc in render("metrics.dashboard.enabled=true")
        if doc["kind"] == "ConfigMap" and "stagger.json" in doc.get("data", {})
    ]
    board: dict[str, Any] = json.loads(config_map["data"]["stagger.json"])
    return board


@pytest.fixture(scope="module")
def promtool(request: pytest.FixtureRequest) -> Path:
    """promtool, built from its Go module by `make tools`."""
    return go_tool("promtool", request)


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups()}))
    return path


def test_none_by_default() -> None:
    kinds = {doc["kind"] for doc in render()}
    assert "PrometheusRule" not in kinds
    assert not [
        doc for doc in render() if doc["kind"] == "ConfigMap" and "stagger.json" in doc.get("data", {})
    ]


def test_the_rules_and_the_dashboard_go_where_asked() -> None:
    [rule] = [
        doc
        for doc in render(
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.namespace=monitoring",
            "metrics.prometheusRule.labels.release=prom",
        )
        if doc["kind"] == "PrometheusRule"
    ]
    assert rule["metadata"]["namespace"] == "monitoring" and rule["metadata"]["labels"]["release"] == "prom"
    [board] = [
        doc
        for doc in render("metrics.dashboard.enabled=true")
        if doc["kind"] == "ConfigMap" and "stagger.json" in doc.get("data", {})
    ]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["namespace"] == NAMESPACE
    assert json.loads(board["data"]["stagger.json"]) == json.loads(
        (CHART / "dashboards" / "stagger.json").read_text()
    )


def test_promtool_check_rules(promtool: Path, rules_file: Path) -> None:
    done = subprocess.run(
        [str(promtool), "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def _alert(name: str, at: str, *expected: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": list(expected)}


def _fired(labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description}}


LOCKD = {"job": "demo-stagger-lockd-metrics", "namespace": "stagger"}
CONTROLLER = {"job": "demo-stagger-controller-metrics", "namespace": "stagger"}


def unit_tests() -> list[dict[str, Any]]:
    """Each alert raised by the series meant to raise it, and silent where it should be."""
    return [
        {
            "interval": "1m",
            "input_series": [
                {"series": f'up{{{LOCKD_JOB}, node="n1", pod="lockd-a"}}', "values": "0x10"},
                {"series": f'up{{{LOCKD_JOB}, node="n2", pod="lockd-b"}}', "values": "1x10"},
                {
                    "series": f'stagger_lockd_requests_total{{{LOCKD_JOB}, node="n1", result="queue_full"}}',
                    "values": "0+2x10",
                },
                {
                    "series": f'stagger_lockd_requests_total{{{LOCKD_JOB}, node="n2", result="granted"}}',
                    "values": "0+5x10",
                },
                {
                    "series": f'stagger_lockd_dependency_up{{{LOCKD_JOB}, node="n1", dependency="tcp db:5432"}}',
                    "values": "1 0x9",
                },
                {
                    "series": f'stagger_lockd_dependency_up{{{LOCKD_JOB}, node="n2", dependency="tcp db:5432"}}',
                    "values": "1x10",
                },
            ],
            "alert_rule_test": [
                _alert("StaggerLockdDown", "4m"),
                _alert(
                    "StaggerLockdDown",
                    "6m",
                    _fired(
                        {**LOCKD, "node": "n1", "pod": "lockd-a", "severity": "warning"},
                        "lockd on node n1 does not answer",
                        "lockd on n1 (lockd-a) has not answered a scrape for 5 minutes: enabled pods on that node "
                        "start without a slot after the policy's unreachableWait.",
                    ),
                ),
                _alert("StaggerLockdDependencyDown", "5m"),
                _alert(
                    "StaggerLockdDependencyDown",
                    "7m",
                    _fired(
                        {"node": "n1", "dependency": "tcp db:5432", "severity": "warning"},
                        "A dependency of node n1's policy does not answer",
                        "lockd on n1 has granted no start-up slot for 5 minutes because tcp db:5432 does not "
                        "answer: its pods wait until their maxWait, then start without a slot.",
                    ),
                ),
                _alert(
                    "StaggerLockdQueueFull",
                    "10m",
                    _fired(
                        {"node": "n1", "severity": "warning"},
                        "lockd's queue on node n1 is full",
                        "20 asks on n1 got 429 in 10 minutes: more pods wait there than maxQueue allows.",
                    ),
                ),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": f'stagger_controller_fail_opens_total{{{CONTROLLER_JOB}, pod="c-1", cause="lockdUnreachable"}}',
                    "values": "0 0 3x14",
                },
                {
                    "series": f'stagger_controller_fail_opens_total{{{CONTROLLER_JOB}, pod="c-1", cause="maxWait"}}',
                    "values": "0x16",
                },
                {
                    "series": f'stagger_controller_grants_total{{{CONTROLLER_JOB}, pod="c-1", basis="maxBlocked"}}',
                    "values": "0x16",
                },
                {"series": f'stagger_controller_leader{{{CONTROLLER_JOB}, pod="c-1"}}', "values": "1 1 0x14"},
                {"series": f'stagger_controller_leader{{{CONTROLLER_JOB}, pod="c-2"}}', "values": "0x16"},
            ],
            "alert_rule_test": [
                _alert(
                    "StaggerPodsStartedWithoutSlot",
                    "15m",
                    _fired(
                        {"cause": "lockdUnreachable", "severity": "warning"},
                        "Pods start without their start-up slot (lockdUnreachable)",
                        "3 enabled pods started unstaggered in 15 minutes, cause lockdUnreachable; each has a "
                        "StaggerStartedWithoutSlot Event.",
                    ),
                ),
                _alert("StaggerPodsHeldPastTheirBound", "15m"),
                _alert("StaggerNoControllerLeader", "3m"),
                _alert(
                    "StaggerNoControllerLeader",
                    "5m",
                    _fired(
                        {"severity": "critical"},
                        "No stagger controller replica leads",
                        "No replica has led for 2 minutes (or none is scraped): groups are not paced, and lockd "
                        "applies groupFailurePolicy.",
                    ),
                ),
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": f'stagger_controller_admissions_total{{{CONTROLLER_JOB}, pod="c-1", result="mutated"}}',
                    "values": "0+60x20",
                },
                {
                    "series": f'stagger_controller_admissions_total{{{CONTROLLER_JOB}, pod="c-1", result="error"}}',
                    "values": "0+60x20",
                },
                {
                    "series": f'stagger_controller_admission_seconds_bucket{{{CONTROLLER_JOB}, pod="c-1", le="0.1"}}',
                    "values": "0x20",
                },
                {
                    "series": f'stagger_controller_admission_seconds_bucket{{{CONTROLLER_JOB}, pod="c-1", le="1"}}',
                    "values": "0+60x20",
                },
                {
                    "series": f'stagger_controller_admission_seconds_bucket{{{CONTROLLER_JOB}, pod="c-1", le="+Inf"}}',
                    "values": "0+60x20",
                },
                {
                    "series": f'stagger_controller_grants_total{{{CONTROLLER_JOB}, pod="c-1", basis="maxBlocked"}}',
                    "values": "0x5 1x15",
                },
                {"series": f'stagger_controller_leader{{{CONTROLLER_JOB}, pod="c-1"}}', "values": "1x20"},
            ],
            "alert_rule_test": [
                _alert(
                    "StaggerWebhookErrors",
                    "16m",
                    _fired(
                        {"severity": "warning"},
                        "The admission webhook fails",
                        "50% of admissions failed in the last 5 minutes: those pods are admitted unchanged (not "
                        "staggered).",
                    ),
                ),
                _alert(
                    "StaggerWebhookSlow",
                    "16m",
                    _fired(
                        {"severity": "warning"},
                        "The admission webhook is slow",
                        "The 99th percentile of admission took 991ms (alert above 0.5s; the API server gives up "
                        "after controller.webhook.timeoutSeconds).",
                    ),
                ),
                _alert(
                    "StaggerPodsHeldPastTheirBound",
                    "16m",
                    _fired(
                        {"severity": "warning"},
                        "Held pods were released at their maxBlockedDuration",
                        "1 pods waited for their group longer than their policy's maxBlockedDuration in 15 minutes "
                        "and were let go unpaced.",
                    ),
                ),
                _alert("StaggerNoControllerLeader", "16m"),
            ],
        },
    ]


def test_promtool_test_rules(promtool: Path, rules_file: Path, tmp_path: Path) -> None:
    tests = tmp_path / "tests.yaml"
    tests.write_text(
        yaml.safe_dump({"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": unit_tests()})
    )
    done = subprocess.run(
        [str(promtool), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = {rule["alert"] for group in rule_groups() for rule in group["rules"]}
    tested = {
        case["alertname"] for test in unit_tests() for case in test["alert_rule_test"] if case["exp_alerts"]
    }
    assert alerts == tested


# --- every metric queried is exported ---------------------------------------------------------------------------

_PROMQL_WORDS = frozenset(
    {
        "sum",
        "max",
        "min",
        "by",
        "without",
        "rate",
        "increase",
        "histogram_quantile",
        "or",
        "and",
        "unless",
        "vector",
    }
)


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: identifiers outside label matchers that are not functions,
    aggregations or keywords (our expressions always give a metric a matcher or a range)."""
    outside = re.sub(r"\{[^}]*\}", "{}", expr)
    outside = re.sub(r"\$__rate_interval|\[[^\]]*\]", "[]", outside)
    outside = re.sub(r"\bby \([^)]*\)", "", outside)
    names = {match.group(1) for match in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\{|\[)", outside)}
    # Grafana's label_values(metric, label) names a bare metric.
    names |= {
        match.group(1) for match in re.finditer(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,", outside)
    }
    return {name for name in names if name not in _PROMQL_WORDS}


def queried() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for group in rule_groups():
        for rule in group["rules"]:
            found[f"alert {rule['alert']}"] = metric_names(rule["expr"])
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            found.setdefault(f"panel {panel['title']}", set()).update(metric_names(target["expr"]))
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found[f"variable {variable['name']}"] = metric_names(variable["definition"])
    return found


def exported(page: str) -> set[str]:
    """Every sample name a /metrics page can have: its samples, and for each declared family the names its
    type gives it (a counter or a histogram with no sample yet is still exported)."""
    names: set[str] = set()
    for line in page.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            base = family.removesuffix("_total")
            names |= {family, f"{base}_total"} if kind == "counter" else {family}
            if kind == "histogram":
                names |= {f"{family}_bucket", f"{family}_count", f"{family}_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


@pytest.fixture
def lockd_page() -> Iterator[str]:
    port = free_port()
    with running_lockd(port=port):
        status, page = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        yield page


@pytest.fixture
def controller_page(tmp_path: Path) -> Iterator[str]:
    certs = Certs.write(tmp_path / "tls")
    with running_webhook(*tls_args(certs)) as hook:
        status, page = get(f"{hook.probe_url}/metrics")
        assert status == 200
        yield page


@pytest.mark.slow
def test_every_metric_queried_is_exported(lockd_page: str, controller_page: str) -> None:
    available = exported(lockd_page) | exported(controller_page) | {"up"}
    missing = {where: sorted(names - available) for where, names in queried().items() if names - available}
    assert not missing, missing
    # The check reads names: a query that names nothing would pass it unread.
    assert all(queried().values()), [where for where, names in queried().items() if not names]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param('up{job="x"} == 0', {"up"}, id="comparison"),
        pytest.param('sum by (le) (rate(a_bucket{job="x"}[5m]))', {"a_bucket"}, id="by-clause"),
        pytest.param('(max(b{x="y"}) or vector(0)) < 1', {"b"}, id="or-vector"),
        pytest.param("label_values(d, namespace)", {"d"}, id="label-values"),
        pytest.param(
            'histogram_quantile(0.5, sum by (le) (rate(c_bucket{x="$v"}[$__rate_interval])))',
            {"c_bucket"},
            id="grafana",
        ),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
