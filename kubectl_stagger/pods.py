"""Which pods are stagger's and where their `/status` is: pure readings of pod objects (the chart's labels
and named ports, charts/stagger/templates), and the pod proxy path that reaches them through the API
server (Kubernetes API: "Connect GET requests to proxy of Pod",
`GET /api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}`, where `{name}` may be
`scheme:name:port`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from stagger.podstate import is_pod_ready

__all__ = ["COMPONENT_LABEL", "by_preference", "endpoint", "proxy_path", "selector_for"]

COMPONENT_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"

# The chart names lockd's port `http` and the controller's TLS port (where /status is) `https`.
_PORT_NAMES = {"lockd": "http", "controller": "https"}


def selector_for(component: str, *, release: str | None, selector: str | None) -> str:
    """The chart's component label, the release's instance label when given, and any more labels."""
    parts = [f"{COMPONENT_LABEL}={component}"]
    if release:
        parts.append(f"{INSTANCE_LABEL}={release}")
    if selector:
        parts.append(selector)
    return ",".join(parts)


def _ports(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    containers = (pod.get("spec") or {}).get("containers") or []
    return [port for container in containers for port in container.get("ports") or []]


def endpoint(pod: Mapping[str, Any], *, component: str) -> tuple[str, int] | None:
    """(scheme, port) of the component's `/status`: its named port, else its first; None without one."""
    ports = _ports(pod)
    wanted = _PORT_NAMES.get(component)
    chosen = next((p for p in ports if p.get("name") == wanted), ports[0] if ports else None)
    if chosen is None or not isinstance(chosen.get("containerPort"), int):
        return None
    scheme = "https" if chosen.get("name") == "https" or component == "controller" else "http"
    return scheme, chosen["containerPort"]


def proxy_path(*, namespace: str, name: str, scheme: str, port: int, path: str) -> str:
    return (
        f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/"
        f"{scheme}:{quote(name, safe='')}:{port}/proxy/{path.lstrip('/')}"
    )


def _is_leader(pod: Mapping[str, Any]) -> bool:
    # The leader labels its own pod `<prefix>/leader: "1"` (the chart's leader Service selects it); the
    # prefix is an install's choice, so any `*/leader` label counts.
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return any(key.endswith("/leader") and value == "1" for key, value in labels.items())


def by_preference(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Controller replicas in the order to ask them: the labelled leader, then Ready ones, then the rest
    (only the leader has the group counts; another replica's `/status` shows an empty book)."""
    return sorted(pods, key=lambda pod: (not _is_leader(pod), not is_pod_ready(pod)))


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def name_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")
