"""The cluster's DNS: CoreDNS as kube-system's `coredns` Deployment behind the `kube-dns` Service, as kubeadm
and kind install it, from the test bed's CoreDNS image (`make node-tools`). Pods resolve Services by name
through it (lockd reaches the controller's leader Service as `<release>-controller-leader.<ns>.svc`).

The objects are kubeadm's, trimmed: no upstream resolver (`forward`) since this machine has no network
beyond the package registries, and CoreDNS listens on 5353 in its pod (the Service maps 53 to it), so it
needs no capability to bind.
"""

from __future__ import annotations

from typing import Any

from sim.realcluster.plan import ClusterPlan

COREDNS_IMAGE = "localhost/stagger-testbed/coredns:1"
NAMESPACE = "kube-system"

COREFILE = """\
.:5353 {
    errors
    health :8080
    ready :8181
    kubernetes CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    cache 30
}
"""


DNS_LABELS = {"k8s-app": "kube-dns"}
"""The label kubeadm's CoreDNS pods carry and the `kube-dns` Service selects."""


def coredns_objects(plan: ClusterPlan, *, replicas: int = 1) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for each object, in the order they are created."""
    return [
        (
            "/api/v1/namespaces/kube-system/serviceaccounts",
            _object("v1", "ServiceAccount", "coredns", NAMESPACE),
        ),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", _cluster_role()),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", _cluster_role_binding()),
        ("/api/v1/namespaces/kube-system/configmaps", _config_map(plan)),
        ("/apis/apps/v1/namespaces/kube-system/deployments", _deployment(replicas=replicas)),
        ("/api/v1/namespaces/kube-system/services", _service(plan)),
    ]


def _cluster_role() -> dict[str, Any]:
    """What the `kubernetes` plugin watches to answer for Services and pods."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["endpoints", "services", "pods", "namespaces"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    return {**_object("rbac.authorization.k8s.io/v1", "ClusterRole", "system:coredns"), "rules": rules}


def _cluster_role_binding() -> dict[str, Any]:
    return {
        **_object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "system:coredns"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:coredns",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE}],
    }


def _config_map(plan: ClusterPlan) -> dict[str, Any]:
    return {
        **_object("v1", "ConfigMap", "coredns", NAMESPACE),
        "data": {"Corefile": COREFILE.replace("CLUSTER_DOMAIN", plan.cluster_domain)},
    }


def _container() -> dict[str, Any]:
    return {
        "name": "coredns",
        "image": COREDNS_IMAGE,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 5353, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 5353, "protocol": "TCP"},
        ],
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
    }


def _deployment(*, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": NAMESPACE, "labels": DNS_LABELS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": DNS_LABELS},
            "template": {
                "metadata": {"labels": DNS_LABELS},
                "spec": {
                    "serviceAccountName": "coredns",
                    "priorityClassName": "system-cluster-critical",
                    "dnsPolicy": "Default",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [_container()],
                    "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                },
            },
        },
    }


def _service(plan: ClusterPlan) -> dict[str, Any]:
    return {
        **_object("v1", "Service", "kube-dns", NAMESPACE),
        "spec": {
            "selector": DNS_LABELS,
            "clusterIP": plan.dns_service_ip,
            "ports": [
                {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "targetPort": 5353, "protocol": "TCP"},
            ],
        },
    }


def _object(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "sim.realcluster"}}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}
