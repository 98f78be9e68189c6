"""The chart's RBAC is least privilege: the rules of lockd's ClusterRole and the controller's ClusterRole and
Role are exactly the tables below, each rule naming the code that makes that API call (stagger/kube.py's
RestClient: get, list, watch, create, patch, evict, request("PUT")), with no wildcard anywhere; the Lease
rule's name is the Lease the controller is told to use; each role is bound to its own ServiceAccount in
the release namespace; and, as a guard against new calls, every Resource of stagger/kube.py that lockd or
the controller code mentions has a rule."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.chart.helm import CHART, CONTROLLER, FULLNAME, NAMESPACE, Doc, kinds, named, render, values
from tests.tools import ROOT, tool

LOCKD = f"{FULLNAME}-lockd"

# (apiGroup, resource, verbs, resourceNames)
Rule = tuple[str, str, tuple[str, ...], tuple[str, ...]]

LOCKD_RULES: set[Rule] = {
    # get: lockd/clusterwatch.py PodIdentity._read (a pod that asks before the watch showed it);
    # list, watch: lockd/clusterwatch.py ClusterState.pods, an Informer (stagger/informer.py _relist, _watch)
    #   with fieldSelector spec.nodeName=<node>;
    # patch: lockd/clusterwatch.py, the merge patch recording a grant (granted-at, staggered label removed).
    ("", "pods", ("get", "list", "watch", "patch"), ()),
    # list, watch: lockd/clusterwatch.py ClusterState.nodes, an Informer with fieldSelector metadata.name=<node>
    # (the node's labels choose the node policy). Never a plain get.
    ("", "nodes", ("list", "watch"), ()),
    # list, watch: lockd/daemonsetwatch.py DaemonSetWatch.informer, an Informer of every namespace's
    # DaemonSets, run only while the node policy has waitForDaemonSets (which should run on this node).
    ("apps", "daemonsets", ("list", "watch"), ()),
    # create: stagger/events.py EventRecorder.run (lockd/app.py, unless --no-events), core/v1 only.
    ("", "events", ("create",), ()),
    # create: lockd/tokenreview.py TokenReviewer._review (whose is a pod's service-account token).
    ("authentication.k8s.io", "tokenreviews", ("create",), ()),
}

CONTROLLER_CLUSTER_RULES: set[Rule] = {
    # list, watch: webhook/groups/podwatch.py PodWatch.informer (enabled pods, cluster-wide);
    # patch: webhook/reconcilers/gates.py (gate mode: the scheduling gate's removal, a JSON patch) and
    #   webhook/leader/elector.py _set_label (the leader label on its own pod) and webhook/failopens.py
    #   FailOpens._record (started-without-slot, on a pod counted as a fail-open). The controller never gets a pod.
    ("", "pods", ("list", "watch", "patch"), ()),
    # create: webhook/reconcilers/evictions.py release -> RestClient.evict (POST pods/<name>/eviction), evict mode.
    ("", "pods/eviction", ("create",), ()),
    # create: stagger/events.py EventRecorder.run (webhook/controller.py, for webhook/groups/podwatch.py and
    #   webhook/failopens.py), core/v1.
    ("", "events", ("create",), ()),
}

CONTROLLER_ROLE_RULES: set[Rule] = {
    # create: webhook/leader/elector.py _write, the first replica to campaign creates the Lease (a create cannot
    # be limited by resourceNames: the name is in the body).
    ("coordination.k8s.io", "leases", ("create",), ()),
    # get: webhook/leader/elector.py _try_acquire_or_renew and _release; update: _write (PUT, conditional on
    # resourceVersion). Only the release's own Lease.
    ("coordination.k8s.io", "leases", ("get", "update"), (CONTROLLER,)),
}


def rules(role: Doc) -> set[Rule]:
    found: set[Rule] = set()
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.add((group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ()))))
    return found


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        pytest.param("ClusterRole", LOCKD, LOCKD_RULES, id="lockd"),
        pytest.param("ClusterRole", CONTROLLER, CONTROLLER_CLUSTER_RULES, id="controller"),
        pytest.param("Role", CONTROLLER, CONTROLLER_ROLE_RULES, id="controller-lease"),
    ],
)
def test_rules_are_exactly_the_calls_the_code_makes(kind: str, name: str, expected: set[Rule]) -> None:
    docs = render()
    role = named(docs, kind, name)
    assert rules(role) == expected
    binding = named(docs, f"{kind}Binding", name)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    if kind == "Role":
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    assert named(docs, "ServiceAccount", name)["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(("controller.enabled=false",), id="controller-disabled"),
        pytest.param(("controller.tls.certManager.enabled=true",), id="cert-manager"),
        pytest.param(("metrics.serviceMonitor.enabled=true",), id="servicemonitor"),
    ],
)
def test_no_wildcards_and_no_other_roles(sets: tuple[str, ...]) -> None:
    docs = render(*sets)
    roles = [doc for doc in docs if doc["kind"] in ("ClusterRole", "Role")]
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
            assert "nonResourceURLs" not in rule
    expected = {("ClusterRole", LOCKD)}
    if "controller.enabled=false" not in sets:
        expected |= {("ClusterRole", CONTROLLER), ("Role", CONTROLLER)}
    assert {(r["kind"], r["metadata"]["name"]) for r in roles} == expected
    bindings = {
        (kind.removesuffix("Binding"), name)
        for kind, name in kinds(docs)
        if kind in ("RoleBinding", "ClusterRoleBinding")
    }
    assert bindings == expected


def test_the_lease_rule_names_the_lease_the_controller_uses() -> None:
    from webhook.settings import parse_settings

    docs = render()
    settings = parse_settings(
        [], {**values(named(docs, "Deployment", CONTROLLER)), "POD_NAMESPACE": NAMESPACE, "POD_NAME": "c-1"}
    )
    assert (settings.leader.lease_namespace, settings.leader.lease_name) == (NAMESPACE, CONTROLLER)
    # Two releases in one namespace elect their leaders apart.
    other = parse_settings([], values(named(render_other(), "Deployment", "other-stagger-controller")))
    assert other.leader.lease_name != settings.leader.lease_name


def render_other() -> list[Doc]:
    """The chart released as "other" (tests.chart.helm renders release "demo" only)."""
    done = subprocess.run(
        [str(tool("helm")), "template", "other", str(CHART), "--namespace", NAMESPACE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


# The resources of stagger/kube.py each component's code may mention, and the rule that covers each.
COVERED = {
    "lockd": {
        "PODS": "pods",
        "NODES": "nodes",
        "DAEMONSETS": "daemonsets",
        "EVENTS": "events",
        "TOKENREVIEWS": "tokenreviews",
    },
    "webhook": {"PODS": "pods", "LEASES": "leases", "EVENTS": "events"},
}


def kube_names(package: str) -> set[str]:
    """The upper-case names (Resource constants) imported from stagger.kube or used as kube.X in a package."""
    found: set[str] = set()
    for path in sorted(Path(ROOT, package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "stagger.kube":
                found |= {alias.name for alias in node.names if alias.name.isupper()}
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "kube"
            ) and node.attr.isupper():
                found.add(node.attr)
    return found


@pytest.mark.parametrize(
    ("package", "role_rules"),
    [
        pytest.param("lockd", LOCKD_RULES, id="lockd"),
        pytest.param("webhook", CONTROLLER_CLUSTER_RULES | CONTROLLER_ROLE_RULES, id="controller"),
    ],
)
def test_every_resource_the_code_names_has_a_rule(package: str, role_rules: set[Rule]) -> None:
    names = kube_names(package) - {"SERVICE_ACCOUNT_DIR"}
    assert names <= set(COVERED[package]), f"{package} uses {names - set(COVERED[package])}: add RBAC rules"
    # stagger/events.py writes core/v1 Events for both (kube.EVENTS), which neither package names itself.
    resources = {resource for _, resource, _, _ in role_rules}
    assert {COVERED[package][name] for name in names} | {"events"} <= resources
