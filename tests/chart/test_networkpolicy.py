"""`networkPolicy.enabled`: a NetworkPolicy for lockd and one for the controller that admit connections only on
the ports each serves and let each reach only DNS, the API server (the ports and addresses given) and the
controller's port; none without the value. The controller's TLS port (the group API and admission) admits
lockd's pods, the controller's own (a replica forwarding an admission to the leader) and the API server's
addresses (networkPolicy.apiServer.cidrs), not every pod; without those addresses it stays open (the API
server is not a pod: admission would be cut off). (Enforcement is the network plugin's: the test bed's plugin does not
enforce NetworkPolicy, so what is tested here is what the chart asks for.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chart.helm import CONTROLLER, FULLNAME, RELEASE, Doc, RenderError, render

Rule = dict[str, Any]


def policies(docs: list[Doc]) -> dict[str, Doc]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "NetworkPolicy"}


def ingress_ports(policy: Doc) -> set[int]:
    return {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}


def egress_ports(policy: Doc) -> set[tuple[int, str]]:
    return {(p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}


def test_none_by_default() -> None:
    assert policies(render()) == {}


def test_each_part_accepts_only_its_ports_and_reaches_only_dns_the_api_and_the_controller() -> None:
    found = policies(
        render(
            "networkPolicy.enabled=true",
            "lockd.port=9500",
            "lockd.probePort=9501",
            "controller.probePort=9091",
        )
    )
    lockd, controller = found[f"{FULLNAME}-lockd"], found[CONTROLLER]
    assert lockd["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "lockd"
    assert controller["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    for policy in (lockd, controller):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert egress_ports(policy) == {(53, "UDP"), (53, "TCP"), (443, "TCP"), (6443, "TCP"), (9443, "TCP")}
        to_controller = [
            r for r in policy["spec"]["egress"] if any(p["port"] == 9443 for p in r.get("ports", []))
        ]
        assert (
            to_controller[0]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
            == "controller"
        )
    assert ingress_ports(lockd) == {9500, 9501}
    assert ingress_ports(controller) == {9443, 9091}
    # lockd alone reaches the pods, on any port: it runs held pods' readiness probes.
    to_pods = {"to": [{"namespaceSelector": {}}]}
    assert to_pods in lockd["spec"]["egress"] and to_pods not in controller["spec"]["egress"]


def test_lockd_reaches_no_pod_when_told_not_to() -> None:
    found = policies(render("networkPolicy.enabled=true", "networkPolicy.lockdProbesPods=false"))
    assert all("ports" in rule for rule in found[f"{FULLNAME}-lockd"]["spec"]["egress"])


def test_the_api_server_addresses_and_extra_rules() -> None:
    extra = [{"to": [{"ipBlock": {"cidr": "198.19.0.0/16"}}], "ports": [{"port": 8443, "protocol": "TCP"}]}]
    found = policies(
        render(
            "networkPolicy.enabled=true",
            jsons=(
                'networkPolicy.apiServer.cidrs=["198.18.0.1/32"]',
                "networkPolicy.apiServer.ports=[6443]",
                f"networkPolicy.extraEgress={json.dumps(extra)}",
            ),
        )
    )
    for policy in found.values():
        rules: list[Rule] = policy["spec"]["egress"]
        api = [r for r in rules if [p["port"] for p in r.get("ports", [])] == [6443]]
        assert api[0]["to"] == [{"ipBlock": {"cidr": "198.18.0.1/32"}}]
        assert extra[0] in rules


def test_without_the_charts_controller_only_lockd_has_one() -> None:
    found = policies(render("networkPolicy.enabled=true", "controller.enabled=false"))
    assert list(found) == [f"{FULLNAME}-lockd"]
    assert (9443, "TCP") not in egress_ports(found[f"{FULLNAME}-lockd"])


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param('networkPolicy.apiServer.ports=["https"]', id="named-port"),
        pytest.param('networkPolicy.apiServer.cidrs=["apiserver"]', id="not-a-cidr"),
        pytest.param("networkPolicy.apiServer.ports=[]", id="no-port"),
    ],
)
def test_bad_values_are_refused(bad: str) -> None:
    with pytest.raises(RenderError, match="/networkPolicy/apiServer"):
        render("networkPolicy.enabled=true", jsons=(bad,))


def controller_ingress(*sets: str, jsons: tuple[str, ...] = ()) -> dict[int, list[Rule] | None]:
    """The controller policy's ingress: each port with the sources it admits (None: any)."""
    found = policies(render("networkPolicy.enabled=true", *sets, jsons=jsons))
    return {
        port["port"]: rule.get("from")
        for rule in found[CONTROLLER]["spec"]["ingress"]
        for port in rule["ports"]
    }


def test_the_controller_s_tls_port_admits_lockd_the_replicas_and_the_api_server_only() -> None:
    ingress = controller_ingress(jsons=('networkPolicy.apiServer.cidrs=["198.18.0.1/32","fd00::1/128"]',))
    assert ingress[9090] is None  # probes and scrapes, from the nodes
    sources = ingress[9443]
    assert sources is not None
    selectors = [source["podSelector"]["matchLabels"] for source in sources if "podSelector" in source]
    assert selectors == [
        {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "lockd"},
        {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "controller"},
    ]
    # Pods of the release's namespace only (no namespaceSelector), and the API server's addresses.
    assert all(set(source) <= {"podSelector", "ipBlock"} for source in sources)
    blocks = [source["ipBlock"] for source in sources if "ipBlock" in source]
    assert blocks == [{"cidr": "198.18.0.1/32"}, {"cidr": "fd00::1/128"}]


def test_the_controller_s_tls_port_stays_open_without_the_api_server_s_addresses() -> None:
    assert controller_ingress() == {9443: None, 9090: None}
