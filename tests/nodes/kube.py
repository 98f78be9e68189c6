"""What the tests on real nodes do to the cluster: kubectl and helm as a user runs them, API reads (as the
admin, through `RealCluster.api`, cheap enough to sample pods twice a second), the chart's release, and the
herd's pods watched over time.

`Herd` watches a set of pods until they are all Ready and keeps, after every change, how many had started (the
app container running: every init container done) and how many were Ready, per node and in all; the tests
check node and group limits against it. A watch brings every version of a pod the API server stored, so a
pod Ready for a moment (then unready again because its kubelet restarted) is seen Ready, as lockd sees it.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sim.realcluster.cluster import WORKLOAD_IMAGE, RealCluster
from tests.tools import ROOT, tool

CHART = ROOT / "charts" / "stagger"
PREFIX = "v1.stagger.technicianted"
ENABLE = {f"{PREFIX}/enable": "1"}
T = TypeVar("T")


class Kube:
    """kubectl and helm with the cluster's admin kubeconfig, and its API."""

    def __init__(self, cluster: RealCluster) -> None:
        self.cluster = cluster
        self.kubeconfig = str(cluster.kubeconfig)

    def run(
        self, name: str, *args: str, input: str | None = None, check: bool = True, timeout: float = 180
    ) -> str:
        done = subprocess.run(
            [str(tool(name)), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert done.returncode == 0, f"{name} {' '.join(args)}:\n{done.stderr}{done.stdout[-2000:]}"
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.run("kubectl", "apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.cluster.api("GET", path)
        assert status == 200, f"GET {path}: {status} {body.get('message')}"
        return body

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={urllib.request.quote(selector)}" if selector else ""
        return list(self.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"])

    def namespace(self, name: str) -> str:
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def delete_namespace(self, name: str) -> None:
        self.run("kubectl", "delete", "namespace", name, "--wait=true", "--timeout=120s", check=False)


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float = 120, every: float = 0.5) -> T:
    """Polls `probe` until it returns something (not None): that value. Fails naming `what` and the
    last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(every)


# --- pods -------------------------------------------------------------------------------------------


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def has_started(pod: dict[str, Any]) -> bool:
    """Every init container done and an app container running or run: the pod's own start-up is under way."""
    for status in pod.get("status", {}).get("containerStatuses", []):
        state = status.get("state", {})
        if "running" in state or "terminated" in state or status.get("restartCount", 0) > 0:
            return True
    return False


def restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", []))


def init_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in pod["status"].get("initContainerStatuses", []) if s["name"] == name)


def workload(
    name: str,
    namespace: str,
    *,
    replicas: int,
    cpu_seconds: float = 1.0,
    labels: dict[str, str] | None = None,
    liveness_delay: int = 60,
    kind: str = "Deployment",
    exit_after: float | None = None,
    prefix: str | None = PREFIX,
) -> dict[str, Any]:
    """A Deployment (or a Job) of the test bed's workload: `cpu_seconds` of real CPU before it is Ready,
    readiness and liveness probes as a real app has (liveness gives up `liveness_delay` + 6 s after start).
    Opted in by `<prefix>/enable: "1"`; `prefix` None: no label (opted in otherwise, or not at all)."""
    args = ["--cpu-seconds", str(cpu_seconds)]
    if exit_after is not None:
        args += ["--exit-after", str(exit_after)]
    container = {
        "name": "app",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "args": args,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080},
            "initialDelaySeconds": liveness_delay,
            "periodSeconds": 2,
            "failureThreshold": 3,
        },
    }
    enable = {f"{prefix}/enable": "1"} if prefix is not None else {}
    pod_labels = {"app": name, **enable, **(labels or {})}
    template: dict[str, Any] = {
        "metadata": {"labels": pod_labels},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 2},
    }
    if kind == "Job":
        template["spec"]["restartPolicy"] = "Never"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": pod_labels},
            "spec": {
                "parallelism": replicas,
                "completions": replicas,
                "backoffLimit": 0,
                "template": template,
            },
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def probed_ready(pod: dict[str, Any]) -> bool:
    """lockd's own run of the pod's readiness probe passed for its app container's current run (the
    `probed-ready-at` it wrote is not older than the container's start): its start-up is over, though the
    kubelet's Ready condition may lag by a moment."""
    stamp = (pod["metadata"].get("annotations") or {}).get(f"{PREFIX}/probed-ready-at")
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    started = ((statuses[0].get("state") or {}).get("running") or {}).get("startedAt")
    # Both RFC 3339 in UTC with whole seconds: they compare as text.
    return bool(stamp and started and str(stamp) >= str(started))


def _instance(pod: dict[str, Any]) -> tuple[str, str]:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return pod["metadata"]["name"], str(statuses[0].get("containerID", ""))


@dataclass(frozen=True)
class Sample:
    at: float
    started: int
    ready: int
    starting_per_node: dict[str, int]
    starting: tuple[str, ...] = ()


@dataclass
class Herd:
    """Watches the pods of `selector` in `namespace` in a thread (see the module)."""

    kube: Kube
    namespace: str
    selector: str
    prefix: str = PREFIX
    """The release's label prefix: a pod is held while labelled `<prefix>/staggered`."""
    samples: list[Sample] = field(default_factory=list)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    """Pods seen held (labelled `staggered`) at least once."""
    gated: set[str] = field(default_factory=set)
    """Pods seen with stagger's scheduling gate."""
    ever_ready: set[tuple[str, str]] = field(default_factory=set)
    """(pod, app container ID) seen Ready once: no longer starting if it turns unready (a restarted kubelet
    reports every pod unready until its readiness probe passes again); a new container of the pod (a pod
    sandbox made again after a cold start) starts anew. Seed it with another Herd's to carry on from it."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Herd:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        began = time.monotonic()
        listed = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods?{self._query()}")
        live = {p["metadata"]["name"]: p for p in listed["items"]}
        version = listed["metadata"]["resourceVersion"]
        self._sample(live, began)
        while not self._stop.is_set():
            # Short watches, so that the thread sees _stop; each resumes where the last one ended.
            path = f"/api/v1/namespaces/{self.namespace}/pods?{self._query()}&watch=1&timeoutSeconds=2&resourceVersion={version}"
            with self.kube.cluster.api_stream(path) as stream:
                for line in stream:
                    event = json.loads(line)
                    pod = event["object"]
                    if event["type"] == "ERROR":  # 410: resume from a fresh list
                        listed = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods?{self._query()}")
                        live = {p["metadata"]["name"]: p for p in listed["items"]}
                        version = listed["metadata"]["resourceVersion"]
                        break
                    version = pod["metadata"]["resourceVersion"]
                    if event["type"] == "DELETED":
                        live.pop(pod["metadata"]["name"], None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        live[pod["metadata"]["name"]] = pod
                    self._sample(live, began)

    def _query(self) -> str:
        return f"labelSelector={urllib.request.quote(self.selector)}"

    def _sample(self, current: dict[str, dict[str, Any]], began: float) -> None:
        """One sample after every change the watch brings (so no state, however short, is missed)."""
        for name, pod in current.items():
            self.pods[name] = pod
            if (pod["metadata"].get("labels") or {}).get(f"{self.prefix}/staggered") == "1":
                self.held.add(name)
            if any(g.get("name") == f"{self.prefix}/pacing" for g in pod["spec"].get("schedulingGates", [])):
                self.gated.add(name)
        live = [p for p in current.values() if not p["metadata"].get("deletionTimestamp")]
        # A pod whose probe lockd saw pass has started (its slot ended then; Ready follows within a second).
        self.ever_ready.update(_instance(p) for p in live if is_ready(p) or probed_ready(p))
        started = [p for p in live if has_started(p)]
        per_node: dict[str, int] = {}
        names = []
        for pod in started:
            starting = _instance(pod) not in self.ever_ready
            if starting and pod.get("status", {}).get("phase") == "Running":
                node = pod["spec"].get("nodeName", "")
                per_node[node] = per_node.get(node, 0) + 1
                names.append(f"{node}/{pod['metadata']['name']}")
        ready = sum(1 for p in live if is_ready(p) or p.get("status", {}).get("phase") == "Succeeded")
        self.samples.append(Sample(time.monotonic() - began, len(started), ready, per_node, tuple(names)))

    def wait_ready(self, count: int, *, timeout: float = 180) -> None:
        def done() -> bool | None:
            last = self.samples[-1] if self.samples else None
            return True if last is not None and last.ready >= count else None

        wait_for(f"{count} pods Ready in {self.namespace} ({self.samples[-1:]})", done, timeout=timeout)

    def gone(self) -> set[str]:
        """Pods seen during the run that no longer exist (evicted or deleted)."""
        now = set(pod_names(self.kube.pods(self.namespace, self.selector)))
        return set(self.pods) - now

    def over_node_limit(self, limit: int) -> list[Sample]:
        return [s for s in self.samples if max(s.starting_per_node.values(), default=0) > limit]

    def max_starting_per_node(self) -> int:
        return max((max(s.starting_per_node.values(), default=0) for s in self.samples), default=0)


# --- the release ------------------------------------------------------------------------------------


@dataclass
class Release:
    kube: Kube
    name: str
    namespace: str
    image: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return str(self.values.get("prefix", PREFIX))

    def _image_values(self) -> list[str]:
        repository, _, tag = self.image.rpartition(":")
        return [
            "--set", f"image.repository={repository}",
            "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never",
        ]  # fmt: skip

    def _values_file(self, values: dict[str, Any]) -> Path:
        path = Path(self.kube.cluster.data_dir) / f"values-{self.name}.yaml"
        path.write_text(yaml.safe_dump(values))
        return path

    def install(self, values: dict[str, Any] | None = None) -> None:
        self.values = values or {}
        self.kube.run(
            "helm", "install", self.name, str(CHART), "-n", self.namespace, "--create-namespace",
            *self._image_values(), "-f", str(self._values_file(self.values)), "--wait", "--timeout", "180s",
        )  # fmt: skip

    def upgrade(self, values: dict[str, Any]) -> None:
        self.values = values
        self.kube.run(
            "helm", "upgrade", self.name, str(CHART), "-n", self.namespace,
            *self._image_values(), "-f", str(self._values_file(values)), "--wait", "--timeout", "180s",
        )  # fmt: skip

    def uninstall(self) -> None:
        self.kube.run("helm", "uninstall", self.name, "-n", self.namespace, "--wait", "--timeout", "120s")

    def selector(self, component: str) -> str:
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"

    def wait_ready(self, *, nodes: int, timeout: float = 120) -> None:
        """Every node's lockd Ready, and a controller replica that leads (its pod labelled leader)."""

        def ready() -> bool | None:
            lockds = [p for p in self.kube.pods(self.namespace, self.selector("lockd")) if is_ready(p)]
            leaders = self.kube.pods(self.namespace, f"{self.selector('controller')},{self.prefix}/leader=1")
            return True if len(lockds) >= nodes and any(is_ready(p) for p in leaders) else None

        wait_for(
            f"release {self.name}: lockd Ready on {nodes} nodes and a controller leader",
            ready,
            timeout=timeout,
        )

    def lockd_pod(self, node: str) -> dict[str, Any]:
        pods = [
            p
            for p in self.kube.pods(self.namespace, self.selector("lockd"))
            if p["spec"].get("nodeName") == node
        ]
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        return pods[0]

    def group_diagnostics(self) -> str:
        """What explains a group's pods past their allowance, for a failure's message: the controller
        replicas' leader elections and lockd's group pacer service failures (and fail-opens), from their logs."""
        lines = []
        for component, needle in (("controller", "leader election"), ("lockd", "group pacer service")):
            for pod in self.kube.pods(self.namespace, self.selector(component)):
                name = pod["metadata"]["name"]
                log = self.kube.run("kubectl", "logs", "-n", self.namespace, name, "--tail=400", check=False)
                lines += [f"{name}: {line}" for line in log.splitlines() if needle in line][-10:]
        return "\n".join(lines) or "(no leader election or group pacer service lines in the logs)"

    def lockd_port(self) -> int:
        return int(self.values.get("lockd", {}).get("port", 9400))


def lockd_status(address: str, port: int = 9400) -> dict[str, Any]:
    """lockd's /status as `curl http://NODE_IP:PORT/status` gets it: over the node's address and the
    hostPort (the CNI portmap plugin), from the host."""
    with urllib.request.urlopen(f"http://{address}:{port}/status", timeout=5) as response:
        return dict(json.loads(response.read()))


def pod_names(pods: list[dict[str, Any]]) -> Iterator[str]:
    return (p["metadata"]["name"] for p in pods)
