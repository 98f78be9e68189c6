"""The real kubectl (installed by sim/tools.sh) against the emulator: get (server-side Table, -o wide,
-l, -A, nodes), describe (events found by involvedObject field selectors), delete (with its wait on a
watch, also through a graceful deletion), apply (create, then a three-way patch), and get -w."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.emulator.server import ApiServerSettings, ApiServerThread
from tests.emulator.conftest import Core, Http, pod
from tests.tools import ROOT, tool


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    return tool("kubectl")


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path, cache: Path) -> None:
        self.command = [str(binary), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [*self.command, *args], input=stdin, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
        return result.stdout


@pytest.fixture
def kubectl(kubectl_binary: Path, kubeconfig: Path, tmp_path: Path) -> Kubectl:
    return Kubectl(kubectl_binary, kubeconfig, tmp_path / "cache")


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def bind(core: Core, name: str, node: str = "n1") -> None:
    core.create_namespaced_pod_binding(
        name, "default", {"metadata": {"name": name}, "target": {"name": node}}, _preload_content=False
    )


def test_get_pods_prints_the_server_table(kubectl: Kubectl, core: Core) -> None:
    core.create_namespaced_pod("default", pod("web-1", labels={"app": "web"}))
    core.create_namespaced_pod("default", pod("gated", schedulingGates=[{"name": "example.com/g"}]))
    core.patch_namespaced_pod_status(
        "gated",
        "default",
        {
            "status": {
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
            }
        },
    )
    table = rows(kubectl("get", "pods"))
    assert table[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [r[:4] for r in table[1:]] == [
        ["gated", "0/1", "SchedulingGated", "0"],
        ["web-1", "0/1", "Pending", "0"],
    ]
    bind(core, "web-1")
    wide = rows(kubectl("get", "pods", "-o", "wide", "web-1"))
    assert wide[0][:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert wide[1][6] == "n1"


def test_get_with_selector_across_namespaces(kubectl: Kubectl, core: Core) -> None:
    core.create_namespace({"metadata": {"name": "team"}})
    core.create_namespaced_pod("default", pod("a", labels={"app": "web"}))
    core.create_namespaced_pod("team", pod("b", labels={"app": "web"}))
    core.create_namespaced_pod("team", pod("c", labels={"app": "db"}))
    table = rows(kubectl("get", "pods", "-l", "app=web", "-A"))
    assert table[0][:2] == ["NAMESPACE", "NAME"]
    assert [r[:2] for r in table[1:]] == [["default", "a"], ["team", "b"]]
    assert rows(kubectl("get", "pods", "-l", "app notin (web)", "-A"))[1][:2] == ["team", "c"]


def test_get_nodes(kubectl: Kubectl, http: Http) -> None:
    http.post(
        "/api/v1/nodes",
        {
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.35.0-sim"},
            },
        },
    )
    table = rows(kubectl("get", "nodes"))
    assert table[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table[1][:3] == ["n1", "Ready", "worker"] and table[1][-1] == "v1.35.0-sim"


def test_describe_pod_lists_its_events(kubectl: Kubectl, core: Core) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    for name, target, uid in (("mine", "web", created.metadata.uid), ("other", "else", "x")):
        core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": target, "namespace": "default", "uid": uid},
                "reason": "Staggered",
                "message": f"held by {name}",
                "type": "Normal",
                "source": {"component": "stagger"},
                "count": 1,
            },
        )
    out = kubectl("describe", "pod", "web")
    assert "Name:             web" in out
    assert "Staggered" in out and "held by mine" in out
    assert "held by other" not in out


def test_delete_unbound_pod(kubectl: Kubectl, core: Core) -> None:
    core.create_namespaced_pod("default", pod("web"))
    assert 'pod "web" deleted' in kubectl("delete", "pod", "web")
    assert core.list_namespaced_pod("default").items == []


@pytest.mark.parametrize(
    "settings", [pytest.param(ApiServerSettings(graceful_deletion_slack=0.1), id="slack")]
)
def test_delete_waits_through_a_graceful_deletion(kubectl: Kubectl, core: Core) -> None:
    core.create_namespaced_pod("default", pod("web", terminationGracePeriodSeconds=1))
    bind(core, "web")
    assert 'pod "web" deleted' in kubectl("delete", "pod", "web", "--timeout=20s")
    assert core.list_namespaced_pod("default").items == []


def test_apply_creates_then_patches(kubectl: Kubectl, core: Core) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: '{}'\n"
    assert "configmap/cfg created" in kubectl("apply", "-f", "-", stdin=manifest.format(1))
    assert "configmap/cfg configured" in kubectl("apply", "-f", "-", stdin=manifest.format(2))
    assert core.read_namespaced_config_map("cfg", "default").data == {"a": "2"}
    bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\nbogus: 1\n"
    result = subprocess.run(
        [*kubectl.command, "apply", "-f", "-"], input=bad, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and 'unknown field "bogus"' in result.stderr


def test_get_watch_shows_new_pods(kubectl: Kubectl, core: Core, server: ApiServerThread) -> None:
    process = subprocess.Popen(
        [*kubectl.command, "get", "pods", "-w", "--request-timeout=20s"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        wait_for_watch(server)
        core.create_namespaced_pod("default", pod("late"))
        lines: Iterator[str] = iter(process.stdout.readline, "")
        seen = next(line for line in lines if line.split() and line.split()[0] == "late")
        assert seen.split()[:3] == ["late", "0/1", "Pending"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def wait_for_watch(server: ApiServerThread) -> None:
    import time

    deadline = time.monotonic() + 20
    while server.call(lambda: server.server.watch_count) == 0:
        assert time.monotonic() < deadline, "kubectl never started watching"
        time.sleep(0.05)


def test_tools_script_installs_both_binaries_once(kubectl_binary: Path) -> None:
    dest = kubectl_binary.parent
    again = subprocess.run(
        ["bash", str(ROOT / "sim" / "tools.sh"), str(dest)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and again.stdout == ""  # already installed: nothing downloaded
    helm = subprocess.run(
        [str(dest / "helm"), "version", "--short"], capture_output=True, text=True, timeout=60
    )
    assert helm.returncode == 0 and helm.stdout.startswith("v")
    client_version = subprocess.run(
        [str(kubectl_binary), "version", "--client"], capture_output=True, text=True, timeout=60
    )
    assert "Client Version: v1.35." in client_version.stdout
