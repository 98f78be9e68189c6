"""stagger.daemonplacement: whether a DaemonSet's pod should run on a Node, as the DaemonSet controller decides it
(nodeName, nodeSelector, required node affinity, taints against the template's tolerations and the ones
the controller adds). Tables per rule, then properties, one of them against the simulated cluster's own
DaemonSet controller (sim/cluster/kubernetes/workloads/daemonset.py), written apart from this one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.cluster.kubernetes.placement import node_info
from sim.cluster.kubernetes.workloads.daemonset import daemon_should_run
from stagger.daemonplacement import (
    placement_problem,
    requirement_matches,
    should_run,
    term_matches,
    tolerates,
)


def node(
    name: str = "n1", labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"taints": taints} if taints is not None else {}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def daemonset(**template_spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": "d-1"},
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:1"}], **template_spec}}},
    }


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return (
        {"key": key, "operator": operator, "values": list(values)}
        if values
        else {"key": key, "operator": operator}
    )


def taint(key: str, effect: str, value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


# --- tolerations -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "the_taint", "expected"),
    [
        pytest.param(
            {"key": "k", "operator": "Exists"}, taint("k", "NoSchedule", "v"), True, id="exists-any-value"
        ),
        pytest.param(
            {"key": "k", "operator": "Equal", "value": "v"}, taint("k", "NoSchedule", "v"), True, id="equal"
        ),
        pytest.param(
            {"key": "k", "value": "v"}, taint("k", "NoSchedule", "v"), True, id="no-operator-means-equal"
        ),
        pytest.param(
            {"key": "k", "value": "w"}, taint("k", "NoSchedule", "v"), False, id="equal-other-value"
        ),
        pytest.param(
            {"key": "k", "operator": "Equal"}, taint("k", "NoSchedule"), True, id="equal-both-empty"
        ),
        pytest.param({"key": "j", "operator": "Exists"}, taint("k", "NoSchedule"), False, id="other-key"),
        pytest.param(
            {"operator": "Exists"}, taint("k", "NoExecute", "v"), True, id="empty-key-exists-tolerates-all"
        ),
        pytest.param(
            {"key": "k", "operator": "Exists", "effect": "NoExecute"},
            taint("k", "NoSchedule"),
            False,
            id="other-effect",
        ),
        pytest.param(
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            taint("k", "NoSchedule"),
            True,
            id="same-effect",
        ),
        pytest.param(
            {"key": "k", "operator": "Gt", "value": "1"}, taint("k", "NoSchedule", "5"), False, id="alpha-gt"
        ),
        pytest.param(
            {"key": "k", "operator": "Junk"}, taint("k", "NoSchedule"), False, id="unknown-operator"
        ),
    ],
)
def test_tolerates(toleration: dict[str, Any], the_taint: dict[str, str], expected: bool) -> None:
    assert tolerates(toleration, the_taint) is expected


# --- node selector requirements ----------------------------------------------------------------------------

LABELS = {"zone": "a", "gen": "5", "empty": ""}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        pytest.param(expr("zone", "In", "a", "b"), True, id="in"),
        pytest.param(expr("zone", "In", "b"), False, id="in-other-value"),
        pytest.param(expr("rack", "In", "a"), False, id="in-absent"),
        pytest.param(expr("empty", "In", ""), True, id="in-empty-value"),
        pytest.param(expr("zone", "NotIn", "b"), True, id="notin"),
        pytest.param(expr("zone", "NotIn", "a"), False, id="notin-value"),
        pytest.param(expr("rack", "NotIn", "a"), True, id="notin-absent"),
        pytest.param(expr("zone", "Exists"), True, id="exists"),
        pytest.param(expr("empty", "Exists"), True, id="exists-empty-value"),
        pytest.param(expr("rack", "Exists"), False, id="exists-absent"),
        pytest.param(expr("rack", "DoesNotExist"), True, id="does-not-exist"),
        pytest.param(expr("zone", "DoesNotExist"), False, id="does-not-exist-present"),
        pytest.param(expr("gen", "Gt", "4"), True, id="gt"),
        pytest.param(expr("gen", "Gt", "5"), False, id="gt-equal"),
        pytest.param(expr("gen", "Lt", "6"), True, id="lt"),
        pytest.param(expr("gen", "Lt", "+6"), True, id="lt-signed"),
        pytest.param(expr("gen", "Gt", "-1"), True, id="gt-negative"),
        pytest.param(expr("zone", "Gt", "1"), False, id="gt-label-not-a-number"),
        pytest.param(expr("rack", "Lt", "1"), False, id="lt-absent"),
        # Invalid requirements: the term they are in matches nothing.
        pytest.param(expr("zone", "In"), None, id="in-without-values"),
        pytest.param(expr("zone", "NotIn"), None, id="notin-without-values"),
        pytest.param(expr("zone", "Exists", "a"), None, id="exists-with-values"),
        pytest.param(expr("zone", "DoesNotExist", "a"), None, id="does-not-exist-with-values"),
        pytest.param(expr("gen", "Gt", "1", "2"), None, id="gt-two-values"),
        pytest.param(expr("gen", "Gt", "one"), None, id="gt-not-a-number"),
        pytest.param(expr("gen", "Gt", " 1"), None, id="gt-space-not-a-number-in-go"),
        pytest.param(expr("gen", "Gt", "1_0"), None, id="gt-underscore-not-a-number-in-go"),
        pytest.param(expr("gen", "Lt", str(2**63)), None, id="lt-beyond-int64"),
        pytest.param(expr("zone", "Like", "a"), None, id="unknown-operator"),
    ],
)
def test_requirement_matches(requirement: dict[str, Any], expected: bool | None) -> None:
    assert requirement_matches(requirement, LABELS) is expected


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        pytest.param(
            {"matchExpressions": [expr("zone", "In", "a"), expr("gen", "Gt", "4")]}, True, id="anded"
        ),
        pytest.param(
            {"matchExpressions": [expr("zone", "In", "a"), expr("gen", "Gt", "5")]},
            False,
            id="anded-one-fails",
        ),
        pytest.param({"matchFields": [expr("metadata.name", "In", "n1")]}, True, id="field-in"),
        pytest.param({"matchFields": [expr("metadata.name", "In", "n2")]}, False, id="field-in-other-node"),
        pytest.param({"matchFields": [expr("metadata.name", "NotIn", "n2")]}, True, id="field-notin"),
        pytest.param(
            {"matchFields": [expr("metadata.name", "In", "n1", "n2")]}, False, id="field-two-values-invalid"
        ),
        pytest.param({"matchFields": [expr("metadata.name", "Exists")]}, False, id="field-exists-invalid"),
        pytest.param(
            {"matchFields": [expr("spec.unschedulable", "NotIn", "true")]},
            True,
            id="unknown-field-reads-empty",
        ),
        pytest.param(
            {
                "matchExpressions": [expr("zone", "In", "a")],
                "matchFields": [expr("metadata.name", "In", "n2")],
            },
            False,
            id="labels-and-fields-anded",
        ),
        pytest.param({}, False, id="empty-term-matches-nothing"),
        pytest.param({"matchExpressions": [], "matchFields": []}, False, id="empty-lists-match-nothing"),
        pytest.param(
            {"matchExpressions": [expr("zone", "In"), expr("gen", "Gt", "1")]}, False, id="invalid-term"
        ),
    ],
)
def test_term_matches(term: dict[str, Any], expected: bool) -> None:
    assert term_matches(term, labels=LABELS, name="n1") is expected


# --- should run ------------------------------------------------------------------------------------------

PLAIN = node("n1", {"zone": "a", "gen": "5"})
CONTROLLER_TAINTS = [
    "node.kubernetes.io/not-ready:NoExecute",
    "node.kubernetes.io/unreachable:NoExecute",
    "node.kubernetes.io/disk-pressure:NoSchedule",
    "node.kubernetes.io/memory-pressure:NoSchedule",
    "node.kubernetes.io/pid-pressure:NoSchedule",
    "node.kubernetes.io/unschedulable:NoSchedule",
]


def tainted(*taints: str) -> dict[str, Any]:
    return node("n1", {"zone": "a"}, [taint(*t.rsplit(":", 1)) for t in taints])


@pytest.mark.parametrize(
    ("the_daemonset", "the_node", "expected"),
    [
        pytest.param(daemonset(), PLAIN, True, id="no-constraints"),
        pytest.param(daemonset(nodeSelector={"zone": "a"}), PLAIN, True, id="node-selector"),
        pytest.param(daemonset(nodeSelector={"zone": "b"}), PLAIN, False, id="node-selector-other-value"),
        pytest.param(daemonset(nodeSelector={"gpu": "true"}), PLAIN, False, id="node-selector-label-absent"),
        pytest.param(
            daemonset(nodeSelector={"zone": "a", "gen": "4"}), PLAIN, False, id="node-selector-all-labels"
        ),
        pytest.param(
            daemonset(affinity=required({"matchExpressions": [expr("zone", "In", "a")]})),
            PLAIN,
            True,
            id="affinity",
        ),
        pytest.param(
            daemonset(affinity=required({"matchExpressions": [expr("zone", "In", "b")]})),
            PLAIN,
            False,
            id="affinity-no",
        ),
        pytest.param(
            daemonset(
                affinity=required(
                    {"matchExpressions": [expr("zone", "In", "b")]},
                    {"matchExpressions": [expr("gen", "Gt", "4")]},
                )
            ),
            PLAIN,
            True,
            id="affinity-terms-ored",
        ),
        pytest.param(
            daemonset(
                affinity=required({"matchExpressions": [expr("zone", "Exists"), expr("gpu", "Exists")]})
            ),
            PLAIN,
            False,
            id="affinity-expressions-anded",
        ),
        pytest.param(
            daemonset(
                affinity=required(
                    {"matchExpressions": [expr("zone", "In")]}, {"matchExpressions": [expr("zone", "Exists")]}
                )
            ),
            PLAIN,
            True,
            id="affinity-invalid-term-skipped",
        ),
        pytest.param(
            daemonset(affinity=required({"matchFields": [expr("metadata.name", "In", "n1")]})),
            PLAIN,
            True,
            id="match-fields",
        ),
        pytest.param(
            daemonset(affinity=required({"matchFields": [expr("metadata.name", "In", "n2")]})),
            PLAIN,
            False,
            id="match-fields-other",
        ),
        pytest.param(daemonset(affinity=required()), PLAIN, False, id="affinity-without-terms"),
        pytest.param(
            daemonset(
                nodeSelector={"zone": "b"}, affinity=required({"matchExpressions": [expr("zone", "In", "a")]})
            ),
            PLAIN,
            False,
            id="node-selector-and-affinity-both",
        ),
        pytest.param(
            daemonset(
                affinity={
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "b")]}}
                        ]
                    }
                }
            ),
            PLAIN,
            True,
            id="preferred-affinity-never-excludes",
        ),
        pytest.param(daemonset(nodeName="n2"), PLAIN, False, id="template-names-another-node"),
        pytest.param(daemonset(nodeName="n1"), PLAIN, True, id="template-names-this-node"),
        pytest.param(daemonset(), tainted("dedicated:NoSchedule"), False, id="taint-no-schedule"),
        pytest.param(daemonset(), tainted("dedicated:NoExecute"), False, id="taint-no-execute"),
        pytest.param(
            daemonset(), tainted("dedicated:PreferNoSchedule"), True, id="taint-prefer-no-schedule-ignored"
        ),
        pytest.param(
            daemonset(tolerations=[{"key": "dedicated", "operator": "Exists"}]),
            tainted("dedicated:NoSchedule"),
            True,
            id="taint-tolerated",
        ),
        pytest.param(
            daemonset(tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
            tainted("dedicated:NoSchedule", "dedicated:NoExecute"),
            False,
            id="taint-tolerated-for-one-effect-only",
        ),
        pytest.param(
            daemonset(tolerations=[{"operator": "Exists"}]),
            tainted("a:NoSchedule", "b:NoExecute"),
            True,
            id="tolerates-all",
        ),
        *[
            pytest.param(
                daemonset(), tainted(t), True, id=f"controller-adds-{t.split('/')[1].replace(':', '-')}"
            )
            for t in CONTROLLER_TAINTS
        ],
        pytest.param(daemonset(), tainted(*CONTROLLER_TAINTS), True, id="controller-adds-all-at-once"),
        pytest.param(
            daemonset(),
            tainted("node.kubernetes.io/network-unavailable:NoSchedule"),
            False,
            id="network-unavailable",
        ),
        pytest.param(
            daemonset(hostNetwork=True),
            tainted("node.kubernetes.io/network-unavailable:NoSchedule"),
            True,
            id="network-unavailable-host-network",
        ),
        pytest.param(
            # The controller adds not-ready for NoExecute only: the NoSchedule one a new node carries until
            # it is Ready keeps DaemonSets without their own toleration off it (CNI plugins tolerate all).
            daemonset(),
            tainted("node.kubernetes.io/not-ready:NoSchedule"),
            False,
            id="not-ready-no-schedule-not-added",
        ),
        pytest.param(
            daemonset(),
            tainted("node.cloudprovider.kubernetes.io/uninitialized:NoSchedule"),
            False,
            id="cloud-uninitialized",
        ),
    ],
)
def test_should_run(the_daemonset: dict[str, Any], the_node: dict[str, Any], expected: bool) -> None:
    assert should_run(the_daemonset, the_node) is expected
    assert (placement_problem(the_daemonset, the_node) is None) is expected


@pytest.mark.parametrize(
    ("the_daemonset", "the_node", "problem"),
    [
        pytest.param(daemonset(nodeName="n2"), PLAIN, "its pod template names node n2", id="node-name"),
        pytest.param(
            daemonset(nodeSelector={"zone": "b"}),
            PLAIN,
            "its nodeSelector or required node affinity does not select this node",
            id="selector",
        ),
        pytest.param(
            daemonset(),
            tainted("dedicated:NoSchedule"),
            "it does not tolerate the taint dedicated:NoSchedule",
            id="taint",
        ),
        pytest.param(
            daemonset(),
            node("n1", taints=[taint("dedicated", "NoExecute", "db")]),
            "it does not tolerate the taint dedicated=db:NoExecute",
            id="taint-with-value",
        ),
    ],
)
def test_placement_problem_says_why(
    the_daemonset: dict[str, Any], the_node: dict[str, Any], problem: str
) -> None:
    assert placement_problem(the_daemonset, the_node) == problem


def test_junk_is_read_as_kubernetes_would_not_crash() -> None:
    assert should_run({}, {})
    assert should_run({"spec": {"template": {"spec": {"tolerations": ["junk"]}}}}, node(taints=["junk"]))
    assert not should_run(daemonset(affinity=required("junk")), PLAIN)


# --- properties ------------------------------------------------------------------------------------------

KEYS = st.sampled_from(["zone", "gen", "gpu", "dedicated"])
VALUES = st.sampled_from(["a", "b", "1", "5", "9"])
NUMBERS = st.integers(min_value=-3, max_value=12).map(str)
EFFECTS = st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])

label_maps = st.dictionaries(KEYS, st.one_of(VALUES, NUMBERS), max_size=4)
taints = st.lists(
    st.builds(lambda k, v, e: {"key": k, "value": v, "effect": e}, KEYS, VALUES, EFFECTS), max_size=3
)
# Valid tolerations only (the API server refuses the others): Equal names a key.
tolerations = st.lists(
    st.one_of(
        st.builds(
            lambda k, e: {"key": k, "operator": "Exists", "effect": e}, KEYS, st.one_of(st.just(""), EFFECTS)
        ),
        st.builds(
            lambda k, v, e: {"key": k, "operator": "Equal", "value": v, "effect": e}, KEYS, VALUES, EFFECTS
        ),
        st.just({"operator": "Exists"}),
    ),
    max_size=3,
)
requirements = st.one_of(
    st.builds(
        lambda k, op, vs: expr(k, op, *vs),
        KEYS,
        st.sampled_from(["In", "NotIn"]),
        st.lists(VALUES, min_size=1, max_size=2),
    ),
    st.builds(lambda k, op: expr(k, op), KEYS, st.sampled_from(["Exists", "DoesNotExist"])),
    st.builds(lambda k, op, n: expr(k, op, n), KEYS, st.sampled_from(["Gt", "Lt"]), NUMBERS),
)
field_requirements = st.builds(
    lambda op, name: expr("metadata.name", op, name),
    st.sampled_from(["In", "NotIn"]),
    st.sampled_from(["n1", "n2"]),
)
terms = st.builds(
    lambda exprs, fields: {k: v for k, v in (("matchExpressions", exprs), ("matchFields", fields)) if v},
    st.lists(requirements, max_size=3),
    st.lists(field_requirements, max_size=1),
)
daemonsets = st.builds(
    lambda selector, affinity_terms, tols: daemonset(
        nodeSelector=selector,
        tolerations=tols,
        **({"affinity": required(*affinity_terms)} if affinity_terms is not None else {}),
    ),
    st.dictionaries(KEYS, VALUES, max_size=2),
    st.one_of(st.none(), st.lists(terms, min_size=1, max_size=3)),
    tolerations,
)
nodes = st.builds(
    lambda name, labels, ts: node(name, labels, ts), st.sampled_from(["n1", "n2"]), label_maps, taints
)


@given(daemonsets, nodes)
def test_the_same_as_the_simulated_clusters_daemonset_controller(
    the_daemonset: dict[str, Any], the_node: dict[str, Any]
) -> None:
    """sim's DaemonSet controller (which creates the DaemonSet pods lockd waits for in tests/lockd_sim) and
    this reading were written apart; on valid objects they agree."""
    assert should_run(the_daemonset, the_node) == daemon_should_run(the_daemonset, node_info(the_node))


@given(daemonsets, nodes, taints)
def test_more_taints_never_let_a_daemonset_on(
    the_daemonset: dict[str, Any], the_node: dict[str, Any], more: list[dict[str, str]]
) -> None:
    worse = {**the_node, "spec": {"taints": list(the_node["spec"].get("taints") or []) + more}}
    assert not (should_run(the_daemonset, worse) and not should_run(the_daemonset, the_node))


@given(daemonsets, nodes)
def test_tolerating_everything_leaves_only_the_selectors(
    the_daemonset: dict[str, Any], the_node: dict[str, Any]
) -> None:
    spec = the_daemonset["spec"]["template"]["spec"]
    tolerant = daemonset(**{**spec, "tolerations": [{"operator": "Exists"}]})
    untainted = {**the_node, "spec": {}}
    assert (
        should_run(tolerant, the_node)
        == should_run(tolerant, untainted)
        == should_run(the_daemonset, untainted)
    )


@given(st.lists(terms, min_size=2, max_size=3), nodes)
def test_terms_are_ored(the_terms: list[dict[str, Any]], the_node: dict[str, Any]) -> None:
    together = should_run(daemonset(affinity=required(*the_terms)), the_node)
    assert together == any(should_run(daemonset(affinity=required(term)), the_node) for term in the_terms)


@given(KEYS, st.lists(VALUES, min_size=1, max_size=2), label_maps)
def test_in_and_notin_are_complements(key: str, values: list[str], labels: dict[str, str]) -> None:
    assert requirement_matches(expr(key, "In", *values), labels) is not requirement_matches(
        expr(key, "NotIn", *values), labels
    )
    assert requirement_matches(expr(key, "Exists"), labels) is not requirement_matches(
        expr(key, "DoesNotExist"), labels
    )
