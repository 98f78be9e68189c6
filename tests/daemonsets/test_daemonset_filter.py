"""waitForDaemonSets' `daemonSets` filter (k8s-health's --hostNet, --namespace, --in, --ex): the pure choice
(`DaemonSetFilter.chooses`: host network, namespaces, `label:value` entries as k8s-health reads --in (all)
and --ex (any), names and namespace/names), a DaemonSet object read for it (`lockd.daemonsetwait.chooses`,
the same on lockd's lean copy), which DaemonSets the node waits for under a filter (missing pods and pods
not Ready alike; a label entry cannot leave out the pod of a DaemonSet not listed yet), that a filter only
ever leaves DaemonSets out, and the watch following the node policy's filter."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockd.daemonsetwait import ALL, chooses, daemonset_view, lean_daemonset, waiting_for
from lockd.daemonsetwatch import DaemonSetWatch
from stagger.informer import InformerSettings
from stagger.policy import DaemonSetFilter

NODE = {"metadata": {"name": "n1", "labels": {}}, "spec": {}}


def ds(
    name: str,
    *,
    namespace: str = "kube-system",
    labels: dict[str, str] | None = None,
    host_network: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"ds-{name}"}
    if labels is not None:
        metadata["labels"] = labels
    template: dict[str, Any] = {"containers": [{"name": "c", "image": "i:1"}]}
    if host_network:
        template["hostNetwork"] = True
    return {
        "metadata": metadata,
        "spec": {"template": {"metadata": {"labels": {"x": "y"}}, "spec": template}},
    }


def pod(owner: str, *, namespace: str = "kube-system", host_network: bool = False) -> dict[str, Any]:
    """A pod of DaemonSet `owner` on the node, not Ready."""
    return {
        "metadata": {
            "name": f"{owner}-x",
            "namespace": namespace,
            "uid": f"pod-{owner}",
            "ownerReferences": [
                {"kind": "DaemonSet", "name": owner, "uid": f"ds-{owner}", "controller": True}
            ],
        },
        "spec": {"hostNetwork": True} if host_network else {},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    }


@pytest.mark.parametrize(
    ("chosen", "daemonset", "expected"),
    [
        pytest.param(DaemonSetFilter(), ("kube-system", "cni", {}, False), True, id="default-all"),
        pytest.param(DaemonSetFilter(host_network=True), ("kube-system", "cni", {}, False), False, id="host-net-only-leaves-out"),
        pytest.param(DaemonSetFilter(host_network=True), ("kube-system", "cni", {}, True), True, id="host-net-only-keeps"),
        pytest.param(DaemonSetFilter(namespaces=("monitoring",)), ("kube-system", "cni", {}, False), False, id="other-namespace"),
        pytest.param(DaemonSetFilter(namespaces=("monitoring", "kube-system")), ("kube-system", "cni", {}, False), True, id="one-of-namespaces"),
        pytest.param(DaemonSetFilter(include=("app:test", "v:1")), ("ns", "a", {"app": "test", "v": "1", "z": "z"}, False), True, id="in-all-labels"),
        pytest.param(DaemonSetFilter(include=("app:test", "v:1")), ("ns", "a", {"app": "test"}, False), False, id="in-one-label-missing"),
        pytest.param(DaemonSetFilter(include=("app:test",)), ("ns", "a", {"app": "prod"}, False), False, id="in-other-value"),
        pytest.param(DaemonSetFilter(exclude=("app:a", "app:b")), ("ns", "x", {"app": "b"}, False), False, id="ex-any-label"),
        pytest.param(DaemonSetFilter(exclude=("app:a", "tier:x")), ("ns", "x", {"app": "c"}, False), True, id="ex-none-matches"),
        pytest.param(DaemonSetFilter(include=("cni", "kube-proxy")), ("kube-system", "kube-proxy", {}, False), True, id="in-one-of-names"),
        pytest.param(DaemonSetFilter(include=("cni",)), ("kube-system", "agent", {}, False), False, id="in-other-name"),
        pytest.param(DaemonSetFilter(include=("monitoring/agent",)), ("kube-system", "agent", {}, False), False, id="in-name-other-namespace"),
        pytest.param(DaemonSetFilter(include=("monitoring/agent",)), ("monitoring", "agent", {}, False), True, id="in-namespace-name"),
        pytest.param(DaemonSetFilter(exclude=("agent",)), ("monitoring", "agent", {}, False), False, id="ex-name-any-namespace"),
        pytest.param(DaemonSetFilter(include=("cni", "app:net")), ("kube-system", "cni", {"app": "other"}, False), False, id="in-name-and-labels-both-needed"),
        pytest.param(DaemonSetFilter(include=("cni",), exclude=("cni",)), ("kube-system", "cni", {}, False), False, id="ex-wins"),
        pytest.param(DaemonSetFilter(include=("app:net",)), ("kube-system", "cni", None, False), True, id="labels-unknown-in-does-not-leave-out"),
        pytest.param(DaemonSetFilter(exclude=("app:net",)), ("kube-system", "cni", None, False), True, id="labels-unknown-ex-does-not-leave-out"),
        pytest.param(DaemonSetFilter(include=("tier:",)), ("ns", "a", {"tier": ""}, False), True, id="empty-label-value"),
    ],
)  # fmt: skip
def test_filter_chooses(
    chosen: DaemonSetFilter, daemonset: tuple[str, str, dict[str, str] | None, bool], expected: bool
) -> None:
    namespace, name, labels, host_network = daemonset
    assert (
        chosen.chooses(namespace=namespace, name=name, labels=labels, host_network=host_network) is expected
    )


@pytest.mark.parametrize(
    ("chosen", "item", "expected"),
    [
        pytest.param(DaemonSetFilter(host_network=True), ds("cni", host_network=True), True, id="template-host-network"),
        pytest.param(DaemonSetFilter(host_network=True), ds("cni"), False, id="template-pod-network"),
        # The DaemonSet's own labels, not its pod template's (k8s-health reads ds.Labels).
        pytest.param(DaemonSetFilter(include=("x:y",)), ds("cni"), False, id="template-labels-not-read"),
        pytest.param(DaemonSetFilter(include=("app:cni",)), ds("cni", labels={"app": "cni"}), True, id="own-labels"),
        pytest.param(DaemonSetFilter(exclude=("app:cni",)), ds("cni", labels={"app": "cni"}), False, id="own-labels-excluded"),
    ],
)  # fmt: skip
def test_a_daemonset_object_is_read_for_the_filter(
    chosen: DaemonSetFilter, item: dict[str, Any], expected: bool
) -> None:
    assert chooses(item, chosen) is expected
    assert chooses(lean_daemonset(copy.deepcopy(item)), chosen) is expected


CLUSTER = [
    ds("cni", host_network=True, labels={"app": "net"}),
    ds("proxy", host_network=True),
    ds("logs", namespace="monitoring", labels={"app": "logs"}),
    ds("agent", namespace="monitoring"),
]


def waits(
    pods: list[dict[str, Any]], daemonsets: list[dict[str, Any]] | None, chosen: DaemonSetFilter
) -> list[str]:
    view = daemonset_view(daemonsets, NODE, chosen) if daemonsets is not None else None
    return [str(w) for w in waiting_for(pods, view=view, own_pod=None, chosen=chosen)]


@pytest.mark.parametrize(
    ("chosen", "pods", "daemonsets", "expected"),
    [
        pytest.param(
            DaemonSetFilter(), [pod("agent", namespace="monitoring")], CLUSTER,
            ["kube-system/cni (no pod on this node yet)", "kube-system/proxy (no pod on this node yet)",
             "monitoring/agent (pod not Ready)", "monitoring/logs (no pod on this node yet)"],
            id="all",
        ),
        pytest.param(
            DaemonSetFilter(host_network=True), [pod("agent", namespace="monitoring")], CLUSTER,
            ["kube-system/cni (no pod on this node yet)", "kube-system/proxy (no pod on this node yet)"],
            id="host-network",
        ),
        pytest.param(
            DaemonSetFilter(host_network=True), [pod("cni", host_network=True)], None,
            ["kube-system/cni (pod not Ready)"],
            id="host-network-from-the-pod-before-listing",
        ),
        pytest.param(
            DaemonSetFilter(namespaces=("monitoring",)), [pod("cni", host_network=True)], CLUSTER,
            ["monitoring/agent (no pod on this node yet)", "monitoring/logs (no pod on this node yet)"],
            id="namespace",
        ),
        pytest.param(
            DaemonSetFilter(exclude=("app:net", "app:logs")), [pod("cni", host_network=True)], CLUSTER,
            ["kube-system/proxy (no pod on this node yet)", "monitoring/agent (no pod on this node yet)"],
            id="exclude-labels-pod-of-excluded-left-out",
        ),
        pytest.param(
            DaemonSetFilter(include=("app:net",)), [pod("agent", namespace="monitoring")], CLUSTER,
            ["kube-system/cni (no pod on this node yet)"],
            id="include-labels",
        ),
        pytest.param(
            # Not listed yet: the DaemonSet's labels are unknown, so its pod is still waited for.
            DaemonSetFilter(exclude=("app:net",)), [pod("cni", host_network=True)], None,
            ["kube-system/cni (pod not Ready)"],
            id="labels-unknown-before-listing",
        ),
        pytest.param(
            DaemonSetFilter(include=("proxy", "monitoring/agent")), [pod("cni", host_network=True)], CLUSTER,
            ["kube-system/proxy (no pod on this node yet)", "monitoring/agent (no pod on this node yet)"],
            id="include-names",
        ),
        pytest.param(
            DaemonSetFilter(exclude=("cni",)), [pod("cni", host_network=True)], None, [],
            id="exclude-name-before-listing",
        ),
    ],
)  # fmt: skip
def test_the_node_waits_only_for_chosen_daemonsets(
    chosen: DaemonSetFilter,
    pods: list[dict[str, Any]],
    daemonsets: list[dict[str, Any]] | None,
    expected: list[str],
) -> None:
    assert waits(pods, daemonsets, chosen) == expected


entries = st.sampled_from(
    ["cni", "proxy", "monitoring/agent", "kube-system/logs", "app:net", "app:logs", "z:z"]
)
filters = st.builds(
    DaemonSetFilter,
    host_network=st.booleans(),
    namespaces=st.lists(st.sampled_from(["kube-system", "monitoring", "other"]), max_size=2).map(tuple),
    include=st.lists(entries, max_size=3).map(tuple),
    exclude=st.lists(entries, max_size=3).map(tuple),
)
node_pods = st.lists(
    st.sampled_from(
        [pod("cni", host_network=True), pod("proxy"), pod("agent", namespace="monitoring"), pod("gone")]
    ),
    unique_by=lambda p: p["metadata"]["name"],
)


@given(chosen=filters, pods=node_pods, listed=st.booleans())
def test_a_filter_only_leaves_daemonsets_out(
    chosen: DaemonSetFilter, pods: list[dict[str, Any]], listed: bool
) -> None:
    daemonsets = CLUSTER if listed else None
    assert set(waits(pods, daemonsets, chosen)) <= set(waits(pods, daemonsets, ALL))
    assert waits(pods, daemonsets, DaemonSetFilter()) == waits(pods, daemonsets, ALL)


def test_the_watch_follows_the_node_policys_filter() -> None:
    pods = [pod("cni", host_network=True), pod("agent", namespace="monitoring")]
    watch = DaemonSetWatch(
        client=None,  # type: ignore[arg-type]  # never listed: not wanted
        settings=InformerSettings(),
        node=lambda: NODE,
        pods=lambda: pods,
        own_pod=None,
        bound=30.0,
    )
    assert watch.waiting() == ["kube-system/cni (pod not Ready)", "monitoring/agent (pod not Ready)"]
    watch.want(False, chosen=DaemonSetFilter(host_network=True))
    assert watch.chosen == DaemonSetFilter(host_network=True)
    assert watch.waiting() == ["kube-system/cni (pod not Ready)"]
    watch.want(False)  # no filter given: kept
    assert watch.waiting() == ["kube-system/cni (pod not Ready)"]
    watch.want(False, chosen=ALL)
    assert len(watch.waiting()) == 2
