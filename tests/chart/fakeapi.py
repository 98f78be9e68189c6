"""Just enough of a Kubernetes API server for `helm template --dry-run=server`, so the chart's `lookup`
calls find objects from a previous install: discovery for the kinds the chart renders, `/version`,
GET of stored objects (404 for any other), empty lists. Plain HTTP on loopback, in a thread."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# (group, version) → [(resource, kind, namespaced)]
RESOURCES: dict[tuple[str, str], list[tuple[str, str, bool]]] = {
    ("", "v1"): [
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
        ("services", "Service", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("namespaces", "Namespace", False),
    ],
    ("apps", "v1"): [("daemonsets", "DaemonSet", True), ("deployments", "Deployment", True)],
    ("policy", "v1"): [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    ("coordination.k8s.io", "v1"): [("leases", "Lease", True)],
    ("rbac.authorization.k8s.io", "v1"): [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    ("admissionregistration.k8s.io", "v1"): [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False)
    ],
}
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # path → object
        self.requests: list[str] = []

    def add_secret(self, release: str, namespace: str, secret: dict[str, Any]) -> None:
        """A Secret as the release's previous install left it (with Helm's ownership metadata)."""
        metadata = {
            **secret["metadata"],
            "namespace": namespace,
            "labels": {**secret["metadata"].get("labels", {}), "app.kubernetes.io/managed-by": "Helm"},
            "annotations": {
                "meta.helm.sh/release-name": release,
                "meta.helm.sh/release-namespace": namespace,
            },
        }
        self.objects[f"/api/v1/namespaces/{namespace}/secrets/{metadata['name']}"] = {
            **secret,
            "metadata": metadata,
        }

    def answer(self, path: str) -> tuple[int, Any]:
        if path == "/version":
            return 200, {"major": "1", "minor": "34", "gitVersion": "v1.34.0", "platform": "linux/amd64"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups = [
                {"name": group, "versions": [{"groupVersion": f"{group}/{version}", "version": version}],
                 "preferredVersion": {"groupVersion": f"{group}/{version}", "version": version}}
                for group, version in RESOURCES if group
            ]  # fmt: skip
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        for (group, version), resources in RESOURCES.items():
            group_version = f"{group}/{version}" if group else version
            base = f"/apis/{group}/{version}" if group else f"/api/{version}"
            if path == base:
                return 200, {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": group_version,
                    "resources": [
                        {
                            "name": name,
                            "singularName": "",
                            "namespaced": namespaced,
                            "kind": kind,
                            "verbs": VERBS,
                        }
                        for name, kind, namespaced in resources
                    ],
                }
            if path.startswith(base + "/"):
                if path in self.objects:
                    return 200, self.objects[path]
                resource = path.rstrip("/").rsplit("/", 1)[-1]
                for name, kind, _ in resources:
                    if resource == name:  # a list: nothing stored is listed
                        return 200, {
                            "kind": f"{kind}List",
                            "apiVersion": group_version,
                            "metadata": {},
                            "items": [],
                        }
        return 404, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "NotFound",
            "code": 404,
        }


@contextlib.contextmanager
def serving(api: FakeApi, kubeconfig: Path) -> Iterator[FakeApi]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            api.requests.append(path)
            code, body = api.answer(path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="fake-api")
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
