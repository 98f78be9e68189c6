"""The emulated resource catalogue, discovery documents and request-path parsing (all pure data)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

# The newest release the test bed builds (testbed/go.mod), whose answers the emulator gives.
KUBERNETES_VERSION = ("1", "37")
STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# Field selectors every resource supports, then the extra ones the real server registers per resource
# (pkg/registry/*/strategy.go GetAttrs / the field label conversion funcs).
COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None  # set when the subresource's kind lives in another group (pods/eviction)
    version: str | None = None


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    name: str  # plural, as in URLs
    singular: str
    kind: str
    namespaced: bool
    schema: str  # the OpenAPI definition name of the kind
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    fields: tuple[str, ...] = ()  # extra field selector labels
    generation: bool = False  # metadata.generation tracks spec changes
    storage: str = ""  # objects of several group versions may share one storage (events)
    create_on_update: bool = False  # the strategy's AllowCreateOnUpdate: a PUT to a missing object creates it

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        return self.storage or (f"{self.name}.{self.group}" if self.group else self.name)

    @property
    def has_status(self) -> bool:
        return any(s.name == "status" for s in self.subresources)

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)

    @property
    def field_labels(self) -> tuple[str, ...]:
        return COMMON_FIELDS + self.fields


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, ("get", "patch", "update"))


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        "io.k8s.api.core.v1.Pod",
        short_names=("po",),
        categories=("all",),
        subresources=(
            _status("Pod"),
            Subresource("eviction", "Eviction", ("create",), group="policy", version="v1"),
            Subresource("binding", "Binding", ("create",)),
        ),
        fields=_POD_FIELDS,
        generation=True,
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        False,
        "io.k8s.api.core.v1.Node",
        short_names=("no",),
        subresources=(_status("Node"),),
        fields=("spec.unschedulable",),
    ),
    ResourceType(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        "io.k8s.api.core.v1.Namespace",
        short_names=("ns",),
        subresources=(_status("Namespace"),),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        fields=("status.phase",),
    ),
    ResourceType(
        "",
        "v1",
        "events",
        "event",
        "Event",
        True,
        "io.k8s.api.core.v1.Event",
        short_names=("ev",),
        fields=_EVENT_FIELDS,
        storage="events",
        create_on_update=True,
    ),
    ResourceType(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        True,
        "io.k8s.api.core.v1.ConfigMap",
        short_names=("cm",),
    ),
    ResourceType(
        "", "v1", "secrets", "secret", "Secret", True, "io.k8s.api.core.v1.Secret", fields=("type",)
    ),
    ResourceType(
        "",
        "v1",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        True,
        "io.k8s.api.core.v1.ServiceAccount",
        short_names=("sa",),
        # The TokenRequest API (sim.emulator.tokens), listed as the real /api/v1 lists it.
        subresources=(
            Subresource("token", "TokenRequest", ("create",), group="authentication.k8s.io", version="v1"),
        ),
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        True,
        "io.k8s.api.apps.v1.Deployment",
        short_names=("deploy",),
        categories=("all",),
        subresources=(_status("Deployment"),),
        generation=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        True,
        "io.k8s.api.apps.v1.ReplicaSet",
        short_names=("rs",),
        categories=("all",),
        subresources=(_status("ReplicaSet"),),
        fields=("status.replicas",),
        generation=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        True,
        "io.k8s.api.apps.v1.DaemonSet",
        short_names=("ds",),
        categories=("all",),
        subresources=(_status("DaemonSet"),),
        generation=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        True,
        "io.k8s.api.apps.v1.StatefulSet",
        short_names=("sts",),
        categories=("all",),
        subresources=(_status("StatefulSet"),),
        generation=True,
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "job",
        "Job",
        True,
        "io.k8s.api.batch.v1.Job",
        categories=("all",),
        subresources=(_status("Job"),),
        fields=("status.successful",),
        generation=True,
    ),
    ResourceType(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        True,
        "io.k8s.api.coordination.v1.Lease",
        create_on_update=True,
    ),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        "io.k8s.api.policy.v1.PodDisruptionBudget",
        short_names=("pdb",),
        subresources=(_status("PodDisruptionBudget"),),
        generation=True,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        False,
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        generation=True,
    ),
    ResourceType(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        False,
        "io.k8s.api.authentication.v1.TokenReview",
        verbs=("create",),  # a review is answered, never stored (sim.emulator.tokens)
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        True,
        "io.k8s.api.events.v1.Event",
        short_names=("ev",),
        fields=_EVENT_FIELDS,
        storage="events",
        create_on_update=True,
    ),
)

_BY_GROUP_VERSION: MappingProxyType[tuple[str, str], tuple[ResourceType, ...]] = MappingProxyType(
    {
        (g, v): tuple(r for r in RESOURCE_TYPES if (r.group, r.version) == (g, v))
        for g, v in dict.fromkeys((r.group, r.version) for r in RESOURCE_TYPES)
    }
)


def group_versions() -> list[tuple[str, str]]:
    return list(_BY_GROUP_VERSION)


def types_in(group: str, version: str) -> tuple[ResourceType, ...] | None:
    return _BY_GROUP_VERSION.get((group, version))


def resource_type(group: str, version: str, name: str) -> ResourceType | None:
    return next((r for r in _BY_GROUP_VERSION.get((group, version), ()) if r.name == name), None)


def builtin(group: str, name: str) -> ResourceType:
    """A resource type the emulator is known to serve (for its own use, not for request routing)."""
    found = next((r for r in RESOURCE_TYPES if r.group == group and r.name == name), None)
    if found is None:
        raise KeyError(f"{name}.{group}")
    return found


def pods() -> ResourceType:
    return builtin("", "pods")


def namespaces() -> ResourceType:
    return builtin("", "namespaces")


# ---------------------------------------------------------------------------------------------- discovery


def version_info(version: str | None = None) -> dict[str, str]:
    """`GET /version`: of KUBERNETES_VERSION, or of `version` ("1.29", ApiServerSettings.kubernetes_version)."""
    major, minor = KUBERNETES_VERSION if version is None else version.split(".", 1)
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_entry(group: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{g}/{v}", "version": v} for g, v in _BY_GROUP_VERSION if g == group]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> dict[str, Any]:
    groups = [g for g in dict.fromkeys(g for g, _ in _BY_GROUP_VERSION) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_entry(g) for g in groups]}


def api_group(group: str) -> dict[str, Any] | None:
    if not group or not any(g == group for g, _ in _BY_GROUP_VERSION):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group)}


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    types = _BY_GROUP_VERSION.get((group, version))
    if types is None:
        return None
    resources: list[dict[str, Any]] = []
    for r in types:
        entry: dict[str, Any] = {
            "name": r.name,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        for sub in r.subresources:
            sub_entry: dict[str, Any] = {
                "name": f"{r.name}/{sub.name}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": sub.kind,
                "verbs": list(sub.verbs),
            }
            if sub.group is not None:
                sub_entry["group"] = sub.group
                sub_entry["version"] = sub.version
            resources.append(sub_entry)
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


# ------------------------------------------------------------------------------------------- path parsing


@dataclass(frozen=True)
class DiscoveryPath:
    kind: Literal[
        "api", "apis", "group", "resources", "version", "health", "openapi", "openid-configuration", "jwks"
    ]
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class ResourcePath:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (namespaced resource) or a cluster-scoped resource
    name: str | None
    subresource: str = ""
    legacy_watch: bool = False  # /api/v1/watch/... paths


def parse_path(path: str) -> DiscoveryPath | ResourcePath | None:
    """Map a request path to what it addresses; None when it addresses nothing we serve."""
    parts = [p for p in path.split("/") if p]
    if parts in (["healthz"], ["readyz"], ["livez"]):
        return DiscoveryPath("health")
    if parts == ["version"]:
        return DiscoveryPath("version")
    if parts[:2] == ["openapi", "v3"]:
        return DiscoveryPath("openapi")
    # The service-account issuer's OIDC discovery (sim.emulator.tokens).
    if parts == [".well-known", "openid-configuration"]:
        return DiscoveryPath("openid-configuration")
    if parts == ["openid", "v1", "jwks"]:
        return DiscoveryPath("jwks")
    if parts == ["api"]:
        return DiscoveryPath("api")
    if parts == ["apis"]:
        return DiscoveryPath("apis")
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) == 2 and parts[0] == "apis":
        return DiscoveryPath("group", group=parts[1])
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if (group, version) not in _BY_GROUP_VERSION:
        return None
    if not rest:
        return DiscoveryPath("resources", group=group, version=version)
    legacy_watch = False
    if rest[0] == "watch":
        legacy_watch, rest = True, rest[1:]
        if not rest:
            return None
    return _parse_resource_parts(group, version, rest, legacy_watch)


def _parse_resource_parts(
    group: str, version: str, rest: list[str], legacy_watch: bool
) -> ResourcePath | None:
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        candidate = resource_type(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    rtype = resource_type(group, version, rest[0])
    if rtype is None:
        return None
    if namespace is None and rtype.namespaced and len(rest) > 1:
        return None  # a namespaced object needs its namespace in the path
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3:
        return None
    if subresource and rtype.subresource(subresource) is None:
        return None
    return ResourcePath(rtype, namespace, name, subresource, legacy_watch)
