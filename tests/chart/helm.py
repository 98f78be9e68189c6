"""Rendering the chart for the tests: `helm template` (helm from .tools/bin) with `--set` values, parsed
into objects, and small lookups over them. One render per distinct set of values (cached): the generated
certificate and token differ between renders, so every object a test compares comes from one render."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.tools import ROOT, tool

CHART = ROOT / "charts" / "stagger"
RELEASE = "demo"
NAMESPACE = "stagger"
FULLNAME = "demo-stagger"
CONTROLLER = f"{FULLNAME}-controller"
LEADER = f"{FULLNAME}-controller-leader"
PREFIX = "v1.stagger.technicianted"

Doc = dict[str, Any]


class RenderError(Exception):
    """helm template failed; the message is its stderr."""


def render(
    *sets: str,
    strings: tuple[str, ...] = (),
    jsons: tuple[str, ...] = (),
    files: tuple[Path, ...] = (),
    flags: tuple[str, ...] = (),
) -> list[Doc]:
    """The chart's objects for these `--set` (and `--set-string`, `--set-json`) values and values files
    (`-f`, given before the others), and more `helm template` flags (e.g. `--kube-version=1.34.0`); do not
    modify them."""
    return list(_render(sets, strings, jsons, (*(f"--values={f}" for f in files), *flags)))


def render_against(kubeconfig: Path, *sets: str) -> list[Doc]:
    """As `render`, with `lookup` reading the cluster of `kubeconfig` (`--dry-run=server`): an upgrade."""
    cluster = ("--kubeconfig", str(kubeconfig), "--dry-run=server", "--disable-openapi-validation")
    return list(_render(sets, (), (), cluster))


def render_release(*sets: str, release: str, namespace: str, kubeconfig: Path) -> list[Doc]:
    """As `render`, as release `release` in `namespace`, with the capabilities (API versions, Kubernetes
    version) and lookups of the cluster of `kubeconfig`. Not cached."""
    args = [str(tool("helm")), "template", release, str(CHART), "--namespace", namespace]
    args += ["--kubeconfig", str(kubeconfig), "--dry-run=server", "--disable-openapi-validation"]
    for item in sets:
        args += ["--set", item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@functools.cache
def _render(
    sets: tuple[str, ...], strings: tuple[str, ...], jsons: tuple[str, ...], extra: tuple[str, ...] = ()
) -> tuple[Doc, ...]:
    args = [str(tool("helm")), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra]
    for option, items in (("--set", sets), ("--set-string", strings), ("--set-json", jsons)):
        for item in items:
            args += [option, item]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def by_kind(docs: list[Doc], kind: str) -> Doc:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, [(doc["kind"], doc["metadata"]["name"]) for doc in docs]
    return found[0]


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, [(doc["kind"], doc["metadata"]["name"]) for doc in docs]
    return found[0]


def kinds(docs: list[Doc]) -> set[tuple[str, str]]:
    return {(doc["kind"], doc["metadata"]["name"]) for doc in docs}


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Doc) -> Doc:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1
    first: Doc = containers[0]
    return first


def env(workload: Doc) -> dict[str, Doc]:
    return {item["name"]: item for item in container(workload).get("env", [])}


def values(workload: Doc) -> dict[str, str]:
    """The container's plain environment variables (not those from the downward API)."""
    return {name: item["value"] for name, item in env(workload).items() if "value" in item}


def mounted_file(workload: Doc, path: str) -> Doc:
    """The volume that holds `path` in the container (the mount with the longest matching prefix)."""
    mounts = [
        m for m in container(workload)["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{path} is on no volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    assert mount.get("readOnly") is True, mount
    volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
    volume: Doc = volumes[mount["name"]]
    return volume


# Values that are Kubernetes types handed to the pods as they are: one value each, whatever is inside.
KUBERNETES_VALUES = frozenset(
    {
        "lockd.resources",
        "lockd.tolerations",
        "lockd.nodeSelector",
        "lockd.updateStrategy",
        "lockd.affinity",
        "lockd.podLabels",
        "lockd.podAnnotations",
        "controller.resources",
        "controller.tolerations",
        "controller.nodeSelector",
        "controller.affinity",
        "controller.podLabels",
        "controller.podAnnotations",
        "controller.webhook.namespaceSelector",
        "commonLabels",
        "imagePullSecrets",
        "metrics.serviceMonitor.labels",
        "metrics.prometheusRule.labels",
        "metrics.dashboard.labels",
        "metrics.dashboard.annotations",
    }
)


def value_leaves(values: dict[str, Any] | None = None, path: str = "") -> dict[str, Any]:
    """The chart's values (values.yaml by default) by dotted key, down to the leaves: a list, an empty map
    or a Kubernetes type (KUBERNETES_VALUES) is one leaf."""
    if values is None:
        values = yaml.safe_load((CHART / "values.yaml").read_text())
    found: dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{path}.{key}" if path else key
        if isinstance(value, dict) and value and dotted not in KUBERNETES_VALUES:
            found |= value_leaves(value, dotted)
        else:
            found[dotted] = value
    return found
