"""Container environment and command line as the kubelet builds them: downward API, $(VAR) expansion."""

from __future__ import annotations

from typing import Any

import pytest

from sim.cluster.launchers.containerenv import (
    EnvError,
    command_line,
    configmap_refs,
    expand,
    initclient_args,
    resolve_env,
    runs_idle_stub,
    runs_initclient,
)
from sim.cluster.scenario import initclient_container

POD: dict[str, Any] = {
    "metadata": {
        "name": "web-1",
        "namespace": "shop",
        "uid": "u-1",
        "labels": {"app": "web"},
        "annotations": {"team": "a"},
    },
    "spec": {"nodeName": "sim-node-0", "serviceAccountName": "sa"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("http://$(HOST):9400", "http://10.0.0.1:9400", id="reference"),
        pytest.param("$(MISSING)/x", "$(MISSING)/x", id="unknown-left-as-is"),
        pytest.param("$$(HOST)", "$(HOST)", id="escaped"),
        pytest.param("$$$(HOST)", "$10.0.0.1", id="escaped-dollar-then-reference"),
        pytest.param("cost $5", "cost $5", id="lone-dollar"),
        pytest.param("$(HOST", "$(HOST", id="unterminated"),
        pytest.param("end$", "end$", id="trailing-dollar"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, {"HOST": "10.0.0.1"}) == expected


def test_the_injected_init_client_reaches_the_nodes_lockd() -> None:
    container = initclient_container(host_port=9400, max_wait="1m")
    env = resolve_env(container, POD, node_name="sim-node-0", host_ip="127.0.1.1", pod_ip="198.18.128.2")
    assert env == {
        "HOST_IP": "127.0.1.1",
        "STAGGER_LOCKD_URL": "http://127.0.1.1:9400",
        "POD_NAMESPACE": "shop",
        "POD_NAME": "web-1",
        "POD_UID": "u-1",
        "STAGGER_MAX_WAIT": "1m",
    }
    assert runs_initclient(container)
    assert initclient_args(command_line(container, env)) == []


def test_field_refs_and_order_of_definition() -> None:
    def ref(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    container = {
        "env": [
            {"name": "LATE", "value": "$(EARLY)-$(POD_IP)"},  # POD_IP not defined yet: left as is
            {"name": "EARLY", "value": "x"},
            {"name": "POD_IP", **ref("status.podIP")},
            {"name": "NODE", **ref("spec.nodeName")},
            {"name": "SA", **ref("spec.serviceAccountName")},
            {"name": "APP", **ref("metadata.labels['app']")},
            {"name": "TEAM", **ref("metadata.annotations['team']")},
            {"name": "BOTH", "value": "$(EARLY)-$(POD_IP)"},
        ],
        "command": ["run", "--ip=$(POD_IP)"],
        "args": ["$(NOPE)", "$$(NODE)"],
    }
    env = resolve_env(container, POD, node_name="sim-node-0", host_ip="127.0.1.1", pod_ip="198.18.128.2")
    assert env["LATE"] == "$(EARLY)-$(POD_IP)"
    assert env["BOTH"] == "x-198.18.128.2"
    assert (env["NODE"], env["SA"], env["APP"], env["TEAM"]) == ("sim-node-0", "sa", "web", "a")
    assert command_line(container, env) == ["run", "--ip=198.18.128.2", "$(NOPE)", "$(NODE)"]


def test_resource_and_configmap_refs() -> None:
    container = {
        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
        "env": [
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {
                "name": "CPU_M",
                "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}},
            },
            {
                "name": "MEM_MI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        ],
    }
    assert configmap_refs(container) == ["cfg", "nope"]
    env = resolve_env(
        container, POD, node_name="n", host_ip="h", pod_ip="p", configmaps={"cfg": {"level": "debug"}}
    )
    assert env == {"CPU": "1", "CPU_M": "250", "MEM_MI": "1024", "LEVEL": "debug"}


@pytest.mark.parametrize(
    ("var", "message"),
    [
        pytest.param(
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}},
            "unsupported fieldRef",
            id="field",
        ),
        pytest.param(
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            "unsupported valueFrom",
            id="secret",
        ),
        pytest.param(
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
            'configmap "c" key "k" not found',
            id="missing-configmap",
        ),
        pytest.param({"value": "no name"}, "no name", id="nameless"),
    ],
)
def test_unresolvable_env_is_a_config_error(var: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError, match=message):
        resolve_env({"env": [var]}, POD, node_name="n", host_ip="h", pod_ip="p")


def test_initclient_detection_and_args() -> None:
    assert runs_initclient({"command": ["/bin/initclient"]})
    assert not runs_initclient({"command": ["java", "-jar", "app.jar"]})
    assert initclient_args(["python", "-m", "initclient", "--max-wait", "5s"]) == ["--max-wait", "5s"]
    assert initclient_args(["java"]) == []


def test_evict_modes_stub_is_told_apart_from_the_init_client() -> None:
    stub = {"name": "stagger-hold", "command": ["python", "-m", "webhook.idle"]}
    assert runs_idle_stub(stub) and not runs_initclient(stub)
    assert runs_idle_stub({"command": ["sh", "-c", "exec python -m webhook.idle"]})
    # A stub keeps no argument of the container it replaced, but even one naming the init client is a stub.
    assert not runs_initclient({"command": ["python", "-m", "webhook.idle"], "args": ["--initclient"]})
    assert not runs_idle_stub({"command": ["python", "-m", "initclient"]})
    assert not runs_idle_stub({"command": ["python", "-m", "lockd"], "args": ["--idle"]})
