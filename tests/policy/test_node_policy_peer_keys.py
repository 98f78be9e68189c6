"""Node policy keys for pod-startup-lock's lock and k8s-health (issue 40): a dependency's `interval` and
`failInterval` (--passHc, --failHc; default: lockd's --dependency-interval), `$(NODE_NAME)` and
`$(NODE_IP)` in its target (an unknown variable refused, naming the field; the target checked at load
with placeholder values, so a bad URL is still refused), `daemonSets` {hostNetwork, namespaces, include,
exclude} (k8s-health's --hostNet, --namespace, --in, --ex) and `countDaemonSets`: what loads, every
error's exact message, how `$(VAR)` expands (`expand_target`, IPv6 put in brackets in the host part
only), what the policy explanation shows, and that a rendered file loads as the same policy file."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagger.policy import (
    DaemonSetFilter,
    Dependency,
    NodePolicy,
    PolicyError,
    PolicyFile,
    describe_node_policy,
    expand_target,
    parse_policy_file,
    parse_policy_text,
    target_variables,
)
from stagger.policy.render import policy_document

D = "nodePolicies[0].dependencies[0]"
S = "nodePolicies[0].daemonSets"


def node(**fields: Any) -> dict[str, Any]:
    return {"nodePolicies": [{"name": "n", **fields}]}


def loaded(data: dict[str, Any]) -> NodePolicy:
    return parse_policy_file(data).node_policies[0]


@pytest.mark.parametrize(
    ("dependency", "expected"),
    [
        pytest.param({"tcp": "db:5432"}, Dependency(kind="tcp", target="db:5432"), id="intervals-default-to-none"),
        pytest.param(
            {"http": "http://es:9200/", "interval": "1m", "failInterval": "10s"},
            Dependency(kind="http", target="http://es:9200/", interval=60.0, fail_interval=10.0),
            id="pass-and-fail-intervals",
        ),
        pytest.param({"tcp": "db:1", "failInterval": 2}, Dependency(kind="tcp", target="db:1", fail_interval=2.0), id="fail-interval-alone"),
        pytest.param(
            {"http": "http://$(NODE_IP):9999"},
            Dependency(kind="http", target="http://$(NODE_IP):9999"),
            id="k8s-health-on-the-node",
        ),
        pytest.param(
            {"http": "https://u:p@$(NODE_NAME).nodes.example:8443/ready?node=$(NODE_NAME)"},
            Dependency(kind="http", target="https://u:p@$(NODE_NAME).nodes.example:8443/ready?node=$(NODE_NAME)"),
            id="node-name-in-host-and-query",
        ),
        pytest.param({"tcp": "$(NODE_IP):5432"}, Dependency(kind="tcp", target="$(NODE_IP):5432"), id="tcp-node-ip"),
        pytest.param({"tcp": "$(NODE_NAME):22"}, Dependency(kind="tcp", target="$(NODE_NAME):22"), id="tcp-node-name"),
        pytest.param(
            # Not a variable reference (no name and closing parenthesis): plain text, as Kubernetes leaves it.
            {"http": "http://es:9200/price?q=$(x"},
            Dependency(kind="http", target="http://es:9200/price?q=$(x"),
            id="not-a-reference",
        ),
    ],
)  # fmt: skip
def test_dependencies_load(dependency: dict[str, Any], expected: Dependency) -> None:
    assert loaded(node(dependencies=[dependency])).dependencies == (expected,)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, (DaemonSetFilter(), False), id="defaults-all-and-not-counted"),
        pytest.param({"daemonSets": {}}, (DaemonSetFilter(), False), id="empty-filter-is-all"),
        pytest.param(
            {"daemonSets": {"hostNetwork": True, "namespaces": ["kube-system", "monitoring"]}},
            (DaemonSetFilter(host_network=True, namespaces=("kube-system", "monitoring")), False),
            id="host-network-and-namespaces",
        ),
        pytest.param(
            {"daemonSets": {"include": ["app:test", "version:1.1", "cni"], "exclude": ["monitoring/agent", "app.kubernetes.io/part-of:logging"]}},
            (DaemonSetFilter(include=("app:test", "version:1.1", "cni"), exclude=("monitoring/agent", "app.kubernetes.io/part-of:logging")), False),
            id="labels-and-names",
        ),
        pytest.param({"daemonSets": {"include": ["tier:"]}}, (DaemonSetFilter(include=("tier:",)), False), id="empty-label-value"),
        pytest.param({"countDaemonSets": True}, (DaemonSetFilter(), True), id="count-daemonsets"),
    ],
)  # fmt: skip
def test_daemonset_keys_load(fields: dict[str, Any], expected: tuple[DaemonSetFilter, bool]) -> None:
    policy = loaded(node(**fields))
    assert (policy.daemonsets, policy.count_daemonsets) == expected


@pytest.mark.parametrize(
    ("data", "errors"),
    [
        pytest.param(
            node(dependencies=[{"http": "http://$(HOST_IP):9999"}]),
            [f"{D}.http: has an unknown variable $(HOST_IP); a target may use $(NODE_NAME) and $(NODE_IP) (got 'http://$(HOST_IP):9999')"],
            id="unknown-variable-http",
        ),
        pytest.param(
            node(dependencies=[{"tcp": "$(POD_IP):80"}]),
            [f"{D}.tcp: has an unknown variable $(POD_IP); a target may use $(NODE_NAME) and $(NODE_IP) (got '$(POD_IP):80')"],
            id="unknown-variable-tcp",
        ),
        pytest.param(
            node(dependencies=[{"http": "http://u:secret@$(A).example/$(A)"}]),
            [f"{D}.http: has an unknown variable $(A); a target may use $(NODE_NAME) and $(NODE_IP) (got 'http://***@$(A).example/$(A)')"],
            id="unknown-variable-once-and-no-password",
        ),
        pytest.param(
            node(dependencies=[{"http": "http://$(NODE_IP):99999/"}]),
            [f"{D}.http: must be a URL with a port from 1 to 65535 (got 'http://$(NODE_IP):99999/')"],
            id="bad-port-after-substitution",
        ),
        pytest.param(
            node(dependencies=[{"http": "ftp://$(NODE_IP)/"}]),
            [f"{D}.http: must be an http or https URL with a host (got 'ftp://$(NODE_IP)/')"],
            id="bad-scheme-after-substitution",
        ),
        pytest.param(
            node(dependencies=[{"tcp": "$(NODE_IP)"}]),
            [f"{D}.tcp: must be HOST:PORT like db.example:5432 (got '$(NODE_IP)')"],
            id="tcp-without-port",
        ),
        pytest.param(
            # lockd puts an IPv6 node IP in brackets itself: written in brackets, an IPv4 node's would not work.
            node(dependencies=[{"tcp": "[$(NODE_IP)]:80"}]),
            [f"{D}.tcp: must have an IPv6 address between the brackets (got '[$(NODE_IP)]:80')"],
            id="node-ip-in-brackets",
        ),
        pytest.param(node(dependencies=[{"tcp": "db:1", "interval": "0s"}]), [f"{D}.interval: must be longer than 0s (got '0s')"], id="interval-zero"),
        pytest.param(node(dependencies=[{"tcp": "db:1", "failInterval": "often"}]), [f"{D}.failInterval: not a duration like 90s, 10m or 1h30m (got 'often')"], id="fail-interval-not-a-duration"),
        pytest.param(node(dependencies=[{"tcp": "db:1", "failHc": 10}]), [f"{D}.failHc: unknown key; expected one of http, tcp, timeout, interval, failInterval"], id="peer-flag-name"),
        pytest.param(node(daemonSets=True), [f"{S}: must be a mapping with keys hostNetwork, namespaces, include, exclude (got True)"], id="not-a-mapping"),
        pytest.param(node(daemonSets={"hostNet": True}), [f"{S}.hostNet: unknown key; did you mean 'hostNetwork'?"], id="peer-flag-hostnet"),
        pytest.param(node(daemonSets={"hostNetwork": "yes"}), [f"{S}.hostNetwork: must be true or false (got 'yes')"], id="host-network-not-bool"),
        pytest.param(node(daemonSets={"namespaces": "kube-system"}), [f"{S}.namespaces: must be a list (got 'kube-system')"], id="namespaces-not-a-list"),
        pytest.param(
            node(daemonSets={"namespaces": ["Kube"]}),
            [f"{S}.namespaces[0]: must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit (got 'Kube')"],
            id="namespace-not-a-label",
        ),
        pytest.param(node(daemonSets={"include": ["Agent"]}), [f"{S}.include[0]: must be a DaemonSet's name (a lowercase DNS subdomain), namespace/name or label:value (got 'Agent')"], id="name-not-a-subdomain"),
        pytest.param(
            node(daemonSets={"exclude": ["Kube_System/agent"]}),
            [f"{S}.exclude[0]: must have a namespace of at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit before the / (got 'Kube_System/agent')"],
            id="bad-namespace-before-slash",
        ),
        pytest.param(node(daemonSets={"exclude": [":x"]}), [f"{S}.exclude[0]: label key name must not be empty (got ':x')"], id="label-without-key"),
        pytest.param(node(daemonSets={"include": ["app:a b"]}), [f"{S}.include[0]: label value must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric (got 'app:a b')"], id="bad-label-value"),
        pytest.param(node(daemonSets={"include": [7]}), [f"{S}.include[0]: must be a DaemonSet's name, namespace/name or label:value (got 7)"], id="entry-not-a-string"),
        pytest.param(node(countDaemonSets="true"), ["nodePolicies[0].countDaemonSets: must be true or false (got 'true')"], id="count-daemonsets-not-bool"),
    ],
)  # fmt: skip
def test_errors(data: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_file(data)
    assert list(caught.value.errors) == errors


V4 = {"NODE_NAME": "worker-1", "NODE_IP": "10.0.0.7"}
V6 = {"NODE_NAME": "worker-1", "NODE_IP": "fd00::7"}


@pytest.mark.parametrize(
    ("target", "kind", "variables", "expected"),
    [
        pytest.param("http://$(NODE_IP):9999", "http", V4, "http://10.0.0.7:9999", id="v4-url"),
        pytest.param("http://$(NODE_IP):9999/x", "http", V6, "http://[fd00::7]:9999/x", id="v6-url-bracketed"),
        pytest.param("http://[$(NODE_IP)]:9999", "http", V6, "http://[fd00::7]:9999", id="v6-written-in-brackets"),
        pytest.param("http://es:9200/?ip=$(NODE_IP)#$(NODE_IP)", "http", V6, "http://es:9200/?ip=fd00::7#fd00::7", id="v6-outside-the-host-as-is"),
        pytest.param("http://u:p@$(NODE_IP)?x", "http", V6, "http://u:p@[fd00::7]?x", id="v6-host-before-query"),
        pytest.param("$(NODE_IP):5432", "tcp", V6, "[fd00::7]:5432", id="v6-tcp"),
        pytest.param("$(NODE_IP):5432", "tcp", V4, "10.0.0.7:5432", id="v4-tcp"),
        pytest.param("http://$(NODE_NAME).nodes:80/$(NODE_NAME)", "http", V6, "http://worker-1.nodes:80/worker-1", id="node-name-twice"),
        pytest.param("http://es:9200/$(x", "http", {}, "http://es:9200/$(x", id="no-reference"),
    ],
)  # fmt: skip
def test_expand_target(target: str, kind: Any, variables: dict[str, str], expected: str) -> None:
    assert expand_target(target, kind=kind, variables=variables) == expected


def test_a_missing_variable_raises_naming_it() -> None:
    with pytest.raises(KeyError, match="NODE_IP"):
        expand_target("$(NODE_IP):80", kind="tcp", variables={"NODE_NAME": "n"})
    assert target_variables("http://$(NODE_IP):1/$(NODE_NAME)?$(X)$(") == ["NODE_IP", "NODE_NAME", "X"]


def test_the_explanation_shows_the_new_keys() -> None:
    policy = NodePolicy(
        name="n",
        wait_for_daemonsets=True,
        daemonsets=DaemonSetFilter(
            host_network=True, namespaces=("kube-system",), exclude=("tier:optional",)
        ),
        count_daemonsets=True,
        dependencies=(
            Dependency(kind="http", target="http://$(NODE_IP):9999", interval=60.0, fail_interval=10.0),
        ),
    )
    described = describe_node_policy(policy, cores=2)
    assert described["countDaemonSets"] is True
    assert described["daemonSets"] == {
        "hostNetwork": True,
        "namespaces": ["kube-system"],
        "include": [],
        "exclude": ["tier:optional"],
    }
    assert described["dependencies"] == [
        {
            "kind": "http",
            "target": "http://$(NODE_IP):9999",
            "timeoutSeconds": 2.0,
            "intervalSeconds": 60.0,
            "failIntervalSeconds": 10.0,
        }
    ]


@pytest.mark.parametrize(
    ("policy", "written"),
    [
        pytest.param(NodePolicy(name="n"), {"name": "n"}, id="defaults-left-out"),
        pytest.param(
            NodePolicy(name="n", daemonsets=DaemonSetFilter(include=("app:test",)), count_daemonsets=True),
            {"name": "n", "daemonSets": {"include": ["app:test"]}, "countDaemonSets": True},
            id="only-what-is-set",
        ),
        pytest.param(
            NodePolicy(name="n", dependencies=(Dependency(kind="tcp", target="$(NODE_IP):1", fail_interval=90.0),)),
            {"name": "n", "dependencies": [{"tcp": "$(NODE_IP):1", "failInterval": "1m30s"}]},
            id="fail-interval-as-a-duration",
        ),
    ],
)  # fmt: skip
def test_rendered(policy: NodePolicy, written: dict[str, Any]) -> None:
    assert policy_document(PolicyFile(node_policies=(policy,))) == {"nodePolicies": [written]}


durations = st.none() | st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)
dependencies = st.builds(
    Dependency,
    kind=st.just("http"),
    target=st.sampled_from(["http://$(NODE_IP):9999", "https://$(NODE_NAME).example:8443/x?n=$(NODE_NAME)"]),
    interval=durations,
    fail_interval=durations,
) | st.builds(
    Dependency,
    kind=st.just("tcp"),
    target=st.sampled_from(["$(NODE_IP):5432", "$(NODE_NAME):22", "db:1"]),
    interval=durations,
    fail_interval=durations,
)
entries = st.sampled_from(["cni", "kube-system/kube-proxy", "app:test", "example.com/tier:", "v:1.1"])
filters = st.builds(
    DaemonSetFilter,
    host_network=st.booleans(),
    namespaces=st.lists(st.sampled_from(["kube-system", "monitoring"]), max_size=2).map(tuple),
    include=st.lists(entries, max_size=3).map(tuple),
    exclude=st.lists(entries, max_size=3).map(tuple),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(
        NodePolicy,
        name=st.just("n"),
        wait_for_daemonsets=st.booleans(),
        daemonsets=filters,
        count_daemonsets=st.booleans(),
        count_all_starting=st.booleans(),
        dependencies=st.lists(dependencies, max_size=3).map(tuple),
    )
)
def test_a_rendered_policy_loads_as_the_same_policy(policy: NodePolicy) -> None:
    policy_file = PolicyFile(node_policies=(policy,))
    text = yaml.safe_dump(policy_document(policy_file), sort_keys=False)
    assert parse_policy_text(text, source="<render>") == policy_file
