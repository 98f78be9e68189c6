"""A container's environment and command line as the kubelet builds them (pure).

Environment variables are resolved in list order: a plain ``value`` may use ``$(VAR)`` for any variable
defined earlier in the list, ``$$`` escapes a ``$``, and an unknown reference is left as it is (the
rules of Kubernetes' ``expansion`` package). ``valueFrom`` supports the downward API fields a container
can ask for (``fieldRef``), ``resourceFieldRef`` for requests/limits of cpu and memory, and
``configMapKeyRef`` given the ConfigMaps. Anything else is a ``CreateContainerConfigError``, as in a
real kubelet.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sim.cluster.objects import annotations_of, byte_count, cpu_millis, labels_of, meta

INITCLIENT_MARKER = "initclient"
IDLE_STUB_MARKER = "webhook.idle"
"""What the command line of evict mode's stub names (``python -m webhook.idle``, ``hold: stub``)."""


class EnvError(ValueError):
    """The container cannot be started: its environment refers to something that cannot be resolved."""


def expand(text: str, mapping: Mapping[str, str]) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(mapping.get(name, f"$({name})"))
            i = end + 1
        else:
            out.append(ch + nxt)
            i += 2
    return "".join(out)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")


def field_value(pod: Mapping[str, Any], path: str, *, node_name: str, host_ip: str, pod_ip: str) -> str:
    """A downward-API ``fieldRef`` value."""
    m = meta(pod)
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": str(m.get("name", "")),
        "metadata.namespace": str(m.get("namespace", "")),
        "metadata.uid": str(m.get("uid", "")),
        "spec.nodeName": node_name,
        "spec.serviceAccountName": str(spec.get("serviceAccountName") or "default"),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return simple[path]
    sub = _SUBSCRIPT.match(path)
    if sub:
        source = labels_of(pod) if sub.group(1) == "labels" else annotations_of(pod)
        return source.get(sub.group(2), "")
    raise EnvError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """A ``resourceFieldRef`` value, rounded up to the divisor like the kubelet."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    values = ((container.get("resources") or {}).get(kind)) or {}
    if kind not in ("requests", "limits") or name not in ("cpu", "memory"):
        raise EnvError(f"unsupported resourceFieldRef resource {resource!r}")
    if name not in values:
        return "0"
    if name == "cpu":
        divisor_m = cpu_millis(ref.get("divisor") or "1")
        return str(math.ceil(cpu_millis(values["cpu"]) / divisor_m))
    divisor = byte_count(ref.get("divisor") or "1")
    return str(math.ceil(byte_count(values["memory"]) / divisor))


def resolve_env(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    *,
    node_name: str,
    host_ip: str,
    pod_ip: str,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str]:
    """The container's environment (``env`` only; ``envFrom`` is not simulated)."""
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        name = str(var.get("name", ""))
        if not name:
            raise EnvError("an env entry has no name")
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var.get("valueFrom") or {}
        if "fieldRef" in source:
            path = str((source["fieldRef"] or {}).get("fieldPath", ""))
            env[name] = field_value(pod, path, node_name=node_name, host_ip=host_ip, pod_ip=pod_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_value(container, source["resourceFieldRef"] or {})
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"] or {}
            data = (configmaps or {}).get(str(ref.get("name", "")))
            if data is None or str(ref.get("key", "")) not in data:
                if ref.get("optional"):
                    continue
                raise EnvError(f'configmap "{ref.get("name")}" key "{ref.get("key")}" not found')
            env[name] = data[str(ref.get("key"))]
        else:
            raise EnvError(f"unsupported valueFrom for env {name!r}: {sorted(source)}")
    return env


def configmap_refs(container: Mapping[str, Any]) -> list[str]:
    """Names of the ConfigMaps the container's env refers to (for the kubelet to fetch first)."""
    names = []
    for var in container.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("configMapKeyRef")
        if ref and ref.get("name") not in names:
            names.append(str(ref.get("name")))
    return names


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded from the container's environment."""
    parts: Sequence[Any] = [*(container.get("command") or []), *(container.get("args") or [])]
    return [expand(str(p), env) for p in parts]


def _argv_parts(container: Mapping[str, Any]) -> list[str]:
    return [str(p) for p in [*(container.get("command") or []), *(container.get("args") or [])]]


def runs_idle_stub(container: Mapping[str, Any]) -> bool:
    """Whether this container is evict mode's stub (its command line names ``webhook.idle``): a process that
    idles until the pod is deleted, then exits 0."""
    return any(IDLE_STUB_MARKER in p for p in _argv_parts(container))


def runs_initclient(container: Mapping[str, Any]) -> bool:
    """Whether this container runs the stagger init client (its command line mentions ``initclient``);
    never a stub, whatever its arguments say."""
    return not runs_idle_stub(container) and any(INITCLIENT_MARKER in p for p in _argv_parts(container))


def initclient_args(argv: Sequence[str]) -> list[str]:
    """The arguments after the element naming the init client (``python -m initclient --x`` -> ``--x``)."""
    for i, part in enumerate(argv):
        if INITCLIENT_MARKER in part:
            return list(argv[i + 1 :])
    return []
