"""Per-resource behaviour of the real registry strategies, as pure functions of objects (and `now`):
defaulting, the in-tree mutating admission plugins for pods, PrepareForCreate / PrepareForUpdate
(status and spec ownership, generation), and the core <-> events.k8s.io/v1 Event conversion.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from sim.emulator.resources import ResourceType
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339

# utilrand.String's alphabet: no vowels (no accidental words) and no confusable characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
POD_GRACE_DEFAULT = 30


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


def prune_nulls(value: Any) -> Any:
    """Drop null map values recursively: `{"a": null}` and `{}` mean the same to a Go struct."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------------ defaults


def _default_container(container: Obj) -> None:
    image = container.get("image") or ""
    if "imagePullPolicy" not in container and image:
        tail = image.rsplit("/", 1)[-1]
        tagged = ":" in tail and not tail.endswith(":latest")
        container["imagePullPolicy"] = "IfNotPresent" if tagged or "@" in image else "Always"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def default_pod_spec(spec: Obj, *, restart_policy: bool = True) -> None:
    """SetDefaults_PodSpec and SetDefaults_Container."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    if restart_policy:
        spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", POD_GRACE_DEFAULT)
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            if isinstance(container, dict):
                _default_container(container)


def _default_template(obj: Obj) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])


def apply_defaults(rtype: ResourceType, obj: Obj) -> None:
    """Defaulting done when a request body is decoded (before admission), in place."""
    spec = obj.get("spec")
    kind = rtype.kind
    if kind == "Pod" and isinstance(spec, dict):
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
    elif kind == "Deployment" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        _default_template(obj)
    elif kind == "ReplicaSet" and isinstance(spec, dict):
        spec.setdefault("replicas", 1)
        _default_template(obj)
    elif kind == "DaemonSet" and isinstance(spec, dict):
        spec.setdefault("revisionHistoryLimit", 10)
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
        _default_template(obj)
    elif kind == "StatefulSet" and isinstance(spec, dict):
        # SetDefaults_StatefulSet (pkg/apis/apps/v1/defaults.go; MaxUnavailableStatefulSet on by default
        # since v1.37: a rolling update's maxUnavailable defaults to 1).
        spec.setdefault("podManagementPolicy", "OrderedReady")
        strategy = spec.setdefault("updateStrategy", {})
        if not strategy.get("type"):
            strategy["type"] = "RollingUpdate"
            strategy.setdefault("rollingUpdate", {})
        if strategy["type"] == "RollingUpdate" and isinstance(strategy.get("rollingUpdate"), dict):
            strategy["rollingUpdate"].setdefault("partition", 0)
            strategy["rollingUpdate"].setdefault("maxUnavailable", 1)
        retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        retention.setdefault("whenDeleted", "Retain")
        retention.setdefault("whenScaled", "Retain")
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("serviceName", "")
        _default_template(obj)
    elif kind == "Job" and isinstance(spec, dict):
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault(
            "podReplacementPolicy",
            "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed",
        )
        spec.setdefault("manualSelector", False)
        for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
            for pattern in (rule.get("onPodConditions") or []) if isinstance(rule, dict) else []:
                if isinstance(pattern, dict) and not pattern.get("status"):
                    pattern["status"] = "True"  # SetDefaults_PodFailurePolicyOnPodConditionsPattern
        # Defaulted to Always like any pod template, which the Job's validation then refuses.
        _default_template(obj)
        _default_job_labels(obj)
    elif kind == "MutatingWebhookConfiguration":
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict):
                _default_webhook(hook)


def _default_job_labels(job: Obj) -> None:
    """SetDefaults_Job: a job without labels takes its template's. Defaults apply at every decode, the
    one from storage too, so the labels the selector generation adds to the template end up on the job."""
    template = (job.get("spec") or {}).get("template") or {}
    template_labels = (template.get("metadata") or {}).get("labels")
    metadata = job.setdefault("metadata", {})
    if template_labels and not metadata.get("labels"):
        metadata["labels"] = dict(template_labels)


def _default_webhook(hook: Obj) -> None:
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("timeoutSeconds", 10)
    hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        service.setdefault("port", 443)


def admit_pod_in_tree(pod: Obj) -> None:
    """The in-tree mutating admission plugins that run before webhooks on pod CREATE:
    ServiceAccount, DefaultTolerationSeconds and Priority."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tolerations = spec.get("tolerations") or []
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == taint and t.get("effect") in ("NoExecute", None, "") for t in tolerations):
            tolerations.append(
                {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec["tolerations"] = tolerations
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION = 60 * 60 + 7  # serviceaccount.WarnOnlyBoundTokenExpirationSeconds


def _token_volume(name: str) -> Obj:
    """TokenVolumeSource: the projected token, cluster CA and namespace."""
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def mount_service_account_token(pod: Obj, service_account: Obj | None) -> None:
    """The ServiceAccount admission plugin on pod CREATE (plugin/pkg/admission/serviceaccount/admission.go
    v1.36): unless the pod (or else its service account) opts out, every container without a mount at
    TOKEN_MOUNT_PATH mounts a projected `kube-api-access-XXXXX` volume; the service account's image pull
    secrets are copied to a pod without any. (The emulator does not refuse a pod whose service account
    does not exist, as the real plugin does; it does give every namespace its `default` one.)"""
    spec = pod.setdefault("spec", {})
    account = service_account or {}
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is not False:
        volumes = spec.get("volumes") or []
        existing = next((v for v in volumes if str(v.get("name", "")).startswith("kube-api-access-")), None)
        name = existing["name"] if existing else generate_name("kube-api-access-")
        needed = False
        for kind in ("initContainers", "containers"):
            for container in spec.get(kind) or []:
                mounts = container.setdefault("volumeMounts", [])
                if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                    mounts.append({"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
                    needed = True
        if needed and existing is None:
            spec["volumes"] = [*volumes, _token_volume(name)]
    if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in account["imagePullSecrets"]]


# ---------------------------------------------------------------------------------------- create / update


def pod_qos_class(pod: Obj) -> str:
    containers = [
        c for kind in ("initContainers", "containers") for c in (pod.get("spec") or {}).get(kind) or []
    ]
    requests: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    for c in containers:
        resources = c.get("resources") or {}
        requests.append(
            {k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
        )
        limits.append({k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")})
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        set(lim) == {"cpu", "memory"} and all(req.get(k, lim[k]) == lim[k] for k in lim)
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_for_create(rtype: ResourceType, obj: Obj, *, now: float, uid: str) -> None:
    """rest.BeforeCreate's system fields plus the strategy's PrepareForCreate, in place.
    The name must already be set (generateName resolved)."""
    metadata = obj.setdefault("metadata", {})
    metadata["uid"] = uid
    metadata["creationTimestamp"] = format_rfc3339(now, digits=0)
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"):
        metadata.pop(key, None)
    if rtype.generation:
        metadata["generation"] = 1
    kind = rtype.kind
    if kind == "Pod":
        obj["status"] = {"phase": "Pending", "qosClass": pod_qos_class(obj)}
    elif kind == "Namespace":
        labels = metadata.setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = metadata["name"]
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif kind == "Job":
        obj["status"] = {}
        _generate_job_selector(obj, uid)
    elif kind == "Lease":
        _drop_gated_lease_fields(obj, None)
    elif rtype.has_status and kind != "Node":
        # Non-omitempty status fields of a fresh object serialize as zero values.
        obj["status"] = dict(_ZERO_STATUS.get(kind, {}))


def _generate_job_selector(job: Obj, uid: str) -> None:
    """generateSelector (pkg/registry/batch/job/strategy.go): labels the user set are kept (validation
    then refuses a mismatch); the job's labels follow its template's (strategy._default_job_labels)."""
    spec = job.setdefault("spec", {})
    if spec.get("manualSelector"):
        return
    name = job["metadata"]["name"]
    template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    for key, value in (
        ("controller-uid", uid),
        ("batch.kubernetes.io/controller-uid", uid),
        ("job-name", name),
        ("batch.kubernetes.io/job-name", name),
    ):
        labels.setdefault(key, value)
    selector = spec.get("selector") if isinstance(spec.get("selector"), dict) else {}
    match_labels = selector.setdefault("matchLabels", {})
    match_labels.setdefault("batch.kubernetes.io/controller-uid", uid)
    spec["selector"] = selector
    _default_job_labels(job)


_ZERO_STATUS: dict[str, dict[str, int]] = {
    "ReplicaSet": {"replicas": 0},
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "DaemonSet": {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
    "PodDisruptionBudget": {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
}


def _drop_gated_lease_fields(new: Obj, old: Obj | None) -> None:
    """The CoordinatedLeaderElection gate is off by default (beta, v1.36): spec.strategy and
    spec.preferredHolder are dropped unless the stored lease already had them
    (pkg/registry/coordination/lease/strategy.go PrepareForCreate/PrepareForUpdate)."""
    spec = new.get("spec")
    if not isinstance(spec, dict):
        return
    old_spec = (old or {}).get("spec") or {}
    for key in ("strategy", "preferredHolder"):
        if old_spec.get(key) is None:
            spec.pop(key, None)


_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def prepare_for_update(rtype: ResourceType, new: Obj, old: Obj, *, subresource: str) -> Obj:
    """The strategy's PrepareForUpdate: which part of the object a write may change. Returns a new dict."""
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = copy.deepcopy(new["status"])
        else:
            result.pop("status", None)
        return result
    result = copy.deepcopy(new)
    metadata = result.setdefault("metadata", {})
    old_meta = old.get("metadata") or {}
    for key in _SYSTEM_META:
        if key in old_meta:
            metadata[key] = old_meta[key]
        else:
            metadata.pop(key, None)
    if rtype.has_status:
        if "status" in old:
            result["status"] = copy.deepcopy(old["status"])
        else:
            result.pop("status", None)
    if rtype.kind == "Lease":
        _drop_gated_lease_fields(result, old)
    if rtype.kind == "Namespace":
        metadata.setdefault("labels", {})["kubernetes.io/metadata.name"] = old_meta.get("name", "")
        result["spec"] = copy.deepcopy(old.get("spec") or {})
    if rtype.generation and "generation" in old_meta:
        watched = "webhooks" if rtype.kind == "MutatingWebhookConfiguration" else "spec"
        if prune_nulls(result.get(watched)) != prune_nulls(old.get(watched)):
            metadata["generation"] = old_meta["generation"] + 1
    return result


# ------------------------------------------------------------------------------------------ pod helpers


def set_pod_condition(pod: Obj, condition: Obj, *, now: float) -> None:
    """podutil.UpdatePodCondition: replace the condition of that type; keep lastTransitionTime when the
    status did not change."""
    status = pod.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    stamped = {"lastProbeTime": None, "lastTransitionTime": format_rfc3339(now, digits=0), **condition}
    for index, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") == condition.get("status") and existing.get("lastTransitionTime"):
                stamped["lastTransitionTime"] = existing["lastTransitionTime"]
            conditions[index] = stamped
            return
    conditions.append(stamped)


# -------------------------------------------------------------------------------- events.k8s.io/v1 <-> v1

# events.k8s.io/v1 name -> core/v1 name (pkg/apis/events/v1/conversion.go)
_EVENT_RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_EVENT_RENAMES_BACK = {v: k for k, v in _EVENT_RENAMES.items()}


def event_to_core(event: Obj) -> Obj:
    converted = {_EVENT_RENAMES.get(k, k): v for k, v in event.items()}
    converted["apiVersion"] = "v1"
    return converted


def event_from_core(event: Obj) -> Obj:
    converted = {_EVENT_RENAMES_BACK.get(k, k): v for k, v in event.items()}
    converted["apiVersion"] = "events.k8s.io/v1"
    return converted
