"""The optional ServiceMonitors (metrics.serviceMonitor): none by default; when enabled one for lockd and one
for the controller (lockd's alone without the controller), each selecting a headless Service of its own
whose named port leads to a real named container port of the pods it selects, and that container port is
where the process serves /metrics (lockd's one listener, the controller's probe listener, as the settings
the chart passes say); the namespace, labels, interval and scrapeTimeout options."""

from __future__ import annotations

import pytest

from tests.chart.helm import CONTROLLER, FULLNAME, NAMESPACE, RELEASE, Doc, container, render, values

ON = "metrics.serviceMonitor.enabled=true"


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def metrics_port(workload: Doc) -> int:
    """The port the process serves /metrics on, from the settings the chart gives it."""
    if workload["kind"] == "DaemonSet":
        from lockd.settings import parse_settings as lockd_settings

        port: int = lockd_settings([], {**values(workload), "STAGGER_POLICIES": "p.yaml"}).server.port
        return port
    from webhook.settings import parse_settings as controller_settings

    probe: int = controller_settings([], values(workload)).server.probe_port
    return probe


def test_off_by_default() -> None:
    docs = render()
    assert not of_kind(docs, "ServiceMonitor")
    assert not [doc for doc in docs if doc["metadata"]["name"].endswith("-metrics")]


@pytest.mark.parametrize(
    ("sets", "components"),
    [
        pytest.param((ON,), {"lockd", "controller"}, id="both"),
        pytest.param(
            (ON, "controller.probePort=8081", "lockd.port=9500"), {"lockd", "controller"}, id="ports"
        ),
        pytest.param((ON, "controller.enabled=false"), {"lockd"}, id="lockd-only"),
    ],
)
def test_each_endpoint_reaches_a_named_port_serving_metrics(
    sets: tuple[str, ...], components: set[str]
) -> None:
    docs = render(*sets)
    monitors = of_kind(docs, "ServiceMonitor")
    assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == components
    workloads = [doc for doc in docs if doc["kind"] in ("DaemonSet", "Deployment")]
    for monitor in monitors:
        spec = monitor["spec"]
        assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        services = [
            s
            for s in of_kind(docs, "Service")
            if s["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
            and selects(spec["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert [s["metadata"]["name"] for s in services] == [f"{monitor['metadata']['name']}-metrics"]
        [service] = services
        assert service["spec"]["clusterIP"] == "None"
        [endpoint] = spec["endpoints"]
        assert (endpoint["path"], endpoint["scheme"], endpoint["interval"]) == ("/metrics", "http", "30s")
        [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
        [workload] = [
            w
            for w in workloads
            if selects(service["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        [target] = [p for p in container(workload)["ports"] if p["name"] == port["targetPort"]]
        assert target["containerPort"] == port["port"] == metrics_port(workload)


def test_namespace_labels_interval_and_timeout() -> None:
    docs = render(
        ON,
        "metrics.serviceMonitor.namespace=monitoring",
        "metrics.serviceMonitor.labels.release=prom",
        "metrics.serviceMonitor.interval=15s",
        "metrics.serviceMonitor.scrapeTimeout=10s",
    )
    monitors = of_kind(docs, "ServiceMonitor")
    assert len(monitors) == 2
    for monitor in monitors:
        assert monitor["metadata"]["namespace"] == "monitoring"
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
        # The Services stay in the release namespace, and the monitor looks there.
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        [endpoint] = monitor["spec"]["endpoints"]
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
    metrics_services = [s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert {s["metadata"]["name"] for s in metrics_services} == {
        f"{FULLNAME}-lockd-metrics",
        f"{CONTROLLER}-metrics",
    }
    assert {s["metadata"]["namespace"] for s in metrics_services} == {NAMESPACE}
