"""Semantic validation the OpenAPI schema cannot express (pkg/apis/*/validation), as pure functions that
return `FieldError`s worded like the real ones. The schema check itself lives in `schema`."""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

from sim.emulator.errors import FieldError, GoRendered
from sim.emulator.eventvalidation import validate_event, validate_event_update
from sim.emulator.jobvalidation import job_spec_errors, job_update_errors
from sim.emulator.names import (
    dns1123_label_problems,
    dns1123_subdomain_problems,
    label_value_problems,
    qualified_name_problems,
)
from sim.emulator.policyvalidation import pdb_spec_errors
from sim.emulator.resources import ResourceType
from sim.emulator.selectors import SelectorError, selector_from_object
from sim.emulator.strategy import prune_nulls
from stagger.objects import Obj

RESTART_POLICIES = ("Always", "OnFailure", "Never")
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def dns_label_problem(value: str) -> str | None:
    problems = dns1123_label_problems(value)
    return problems[0] if problems else None


def dns_subdomain_problem(value: str) -> str | None:
    problems = dns1123_subdomain_problems(value)
    return problems[0] if problems else None


def invalid_each(path: str, value: Any, problems: list[str]) -> list[FieldError]:
    """One Invalid error per problem, as the real validators turn a list of messages into errors."""
    return [FieldError("FieldValueInvalid", path, problem, value) for problem in problems]


def _meta_errors(rtype: ResourceType, obj: Obj) -> list[FieldError]:
    """ValidateObjectMeta (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): name, labels, annotations."""
    metadata = obj.get("metadata") or {}
    errors: list[FieldError] = []
    name = metadata.get("name") or ""
    if not name:
        errors.append(FieldError("FieldValueRequired", "metadata.name", "name or generateName is required"))
    elif rtype.kind != "Event":  # legacy Events only get the generic path-segment check
        check = dns1123_label_problems if rtype.kind == "Namespace" else dns1123_subdomain_problems
        errors.extend(invalid_each("metadata.name", name, check(name)))
    for key, value in (metadata.get("labels") or {}).items():
        errors.extend(invalid_each("metadata.labels", key, qualified_name_problems(key)))
        errors.extend(
            invalid_each(
                "metadata.labels", value, label_value_problems(value if isinstance(value, str) else "")
            )
        )
    for key in metadata.get("annotations") or {}:
        errors.extend(invalid_each("metadata.annotations", key, qualified_name_problems(key.lower())))
    return errors


def _container_errors(spec: Obj, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(FieldError("FieldValueRequired", f"{path}.containers"))
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            where = f"{path}.{kind}[{index}]"
            name = container.get("name") or ""
            if not name:
                errors.append(FieldError("FieldValueRequired", f"{where}.name"))
            elif dns_label_problem(name):
                errors.append(
                    FieldError("FieldValueInvalid", f"{where}.name", dns_label_problem(name) or "", name)
                )
            elif name in seen:
                errors.append(FieldError("FieldValueDuplicate", f"{where}.name", value=name))
            seen.add(name)
            if not container.get("image"):
                errors.append(FieldError("FieldValueRequired", f"{where}.image"))
    return errors


def _pod_spec_errors(spec: Obj, path: str) -> list[FieldError]:
    """ValidatePodSpec's checks the emulator makes (the workload kinds add their own restart rules)."""
    errors = _container_errors(spec, path)
    policy = spec.get("restartPolicy")
    if policy == "":
        errors.append(FieldError("FieldValueRequired", f"{path}.restartPolicy"))
    elif policy is not None and policy not in RESTART_POLICIES:
        errors.append(
            FieldError(
                "FieldValueNotSupported", f"{path}.restartPolicy", value=policy, supported=RESTART_POLICIES
            )
        )
    # validateSchedulingGates: each entry's name is a qualified name (the error is on the entry's path).
    gates: set[str] = set()
    for index, gate in enumerate(spec.get("schedulingGates") or []):
        name = gate.get("name") or ""
        where = f"{path}.schedulingGates[{index}]"
        errors.extend(invalid_each(where, name, qualified_name_problems(name)))
        if name in gates:
            errors.append(FieldError("FieldValueDuplicate", where, value=name))
        gates.add(name)
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        errors.append(
            FieldError("FieldValueInvalid", f"{path}.terminationGracePeriodSeconds", "must be >= 0", grace)
        )
    return errors


def _workload_errors(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    selector_obj = spec.get("selector")
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector_obj is None:  # `{}` is a selector, an empty one (refused below)
        errors.append(FieldError("FieldValueRequired", "spec.selector"))
    else:
        try:
            selector = selector_from_object(selector_obj, nil_selects=False)
        except SelectorError as err:
            return [FieldError("FieldValueInvalid", "spec.selector", str(err), value=selector_obj)]
        if selector.empty:
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.selector",
                    "empty selector is invalid for "
                    + {"StatefulSet": "statefulset", "DaemonSet": "daemonset"}.get(
                        str(obj.get("kind")), "deployment"
                    ),
                    {},
                )
            )
        elif not selector.matches(labels):
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    "spec.template.metadata.labels",
                    "`selector` does not match template `labels`",
                    labels,
                )
            )
    pod_spec = template.get("spec") or {}
    errors.extend(_pod_spec_errors(pod_spec, "spec.template.spec"))
    # ValidatePodTemplateSpecForReplicaSet / ValidateDaemonSetSpec / ValidateStatefulSetSpec: they run
    # forever.
    if pod_spec.get("restartPolicy", "Always") != "Always":
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.template.spec.restartPolicy",
                value=pod_spec["restartPolicy"],
                supported=("Always",),
            )
        )
    if pod_spec.get("activeDeadlineSeconds") is not None:
        owner = obj.get("kind") if obj.get("kind") in ("DaemonSet", "StatefulSet") else "ReplicaSet"
        errors.append(
            FieldError(
                "FieldValueForbidden",
                "spec.template.spec.activeDeadlineSeconds",
                f"activeDeadlineSeconds in {owner} is not Supported",
            )
        )
    return errors


def _webhook_errors(obj: Obj) -> list[FieldError]:
    """The errors of each webhook of a Mutating- or ValidatingWebhookConfiguration."""
    errors: list[FieldError] = []
    names: set[str] = set()
    for index, hook in enumerate(obj.get("webhooks") or []):
        where = f"webhooks[{index}]"
        name = hook.get("name") or ""
        errors.extend(_webhook_name_errors(name, where=where, seen=names))
        names.add(name)
        errors.extend(_side_effects_errors(hook.get("sideEffects"), where=where))
        errors.extend(_review_versions_errors(hook.get("admissionReviewVersions") or [], where=where))
        errors.extend(_webhook_call_errors(hook, where=where))
    return errors


def _webhook_name_errors(name: str, *, where: str, seen: set[str]) -> list[FieldError]:
    """A webhook's name: a domain of three segments or more, unique in its configuration."""
    if not name:
        return [FieldError("FieldValueRequired", f"{where}.name")]
    if name.count(".") < 2 or dns_subdomain_problem(name):
        return [
            FieldError(
                "FieldValueInvalid",
                f"{where}.name",
                "should be a domain with at least three segments separated by dots",
                name,
            )
        ]
    if name in seen:
        return [FieldError("FieldValueDuplicate", f"{where}.name", value=name)]
    return []


def _side_effects_errors(side: Any, *, where: str) -> list[FieldError]:
    """admissionregistration/v1 accepts only None and NoneOnDryRun (v1beta1's Some and Unknown are gone)."""
    if side is None:
        return [
            FieldError("FieldValueRequired", f"{where}.sideEffects", "must specify one of None, NoneOnDryRun")
        ]
    if side not in ("None", "NoneOnDryRun"):
        return [
            FieldError(
                "FieldValueNotSupported",
                f"{where}.sideEffects",
                value=side,
                supported=("None", "NoneOnDryRun"),
            )
        ]
    return []


def _review_versions_errors(versions: Any, *, where: str) -> list[FieldError]:
    """The AdmissionReview versions the webhook accepts: one the API server speaks must be among them."""
    if not versions:
        return [
            FieldError(
                "FieldValueRequired",
                f"{where}.admissionReviewVersions",
                "must specify one of v1, v1beta1",
            )
        ]
    if not set(versions) & {"v1", "v1beta1"}:
        return [
            FieldError(
                "FieldValueInvalid",
                f"{where}.admissionReviewVersions",
                "must include at least one of v1, v1beta1",
                versions,
            )
        ]
    return []


def _webhook_call_errors(hook: Obj, *, where: str) -> list[FieldError]:
    """How the API server calls the webhook: its timeout, and exactly one of an https URL or a Service."""
    errors: list[FieldError] = []
    timeout = hook.get("timeoutSeconds")
    if isinstance(timeout, int) and not 1 <= timeout <= 30:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                f"{where}.timeoutSeconds",
                "the timeout value must be between 1 and 30 seconds",
                timeout,
            )
        )
    client = hook.get("clientConfig") or {}
    if ("url" in client) == ("service" in client):
        errors.append(
            FieldError(
                "FieldValueRequired", f"{where}.clientConfig", "exactly one of url or service is required"
            )
        )
    elif "url" in client and not str(client["url"]).startswith("https://"):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                f"{where}.clientConfig.url",
                "'https' is the only allowed URL scheme",
                client["url"],
            )
        )
    return errors


def _lease_errors(spec: Obj) -> list[FieldError]:
    """ValidateLeaseSpec (pkg/apis/coordination/validation/validation.go); strategy and preferredHolder
    are dropped before validation while their feature gate is off (strategy._drop_gated_lease_fields)."""
    errors: list[FieldError] = []
    duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
    if isinstance(duration, int) and duration <= 0:
        errors.append(
            FieldError("FieldValueInvalid", "spec.leaseDurationSeconds", "must be greater than 0", duration)
        )
    if isinstance(transitions, int) and transitions < 0:
        errors.append(
            FieldError(
                "FieldValueInvalid",
                "spec.leaseTransitions",
                "must be greater than or equal to 0",
                transitions,
            )
        )
    return errors


def validate_create(rtype: ResourceType, obj: Obj) -> list[FieldError]:
    """The strategy's Validate: the object's own rules plus those that only apply to a new object."""
    if rtype.kind == "Event":
        # The event strategy's rules; the generic ObjectMeta check runs only once they pass (rest.BeforeCreate).
        return validate_event(obj, new_api=rtype.group == "events.k8s.io") or _meta_errors(rtype, obj)
    errors = validate_object(rtype, obj)
    if rtype.kind == "Pod":
        # ValidatePodCreate: a pod cannot be assigned a node while scheduling gates remain.
        spec = obj.get("spec") or {}
        if spec.get("nodeName") and spec.get("schedulingGates"):
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    "spec.nodeName",
                    "cannot be set until all schedulingGates have been cleared",
                )
            )
    return errors


def validate_object(rtype: ResourceType, obj: Obj) -> list[FieldError]:
    """What create and update both check of the object itself."""
    errors = _meta_errors(rtype, obj)
    kind = rtype.kind
    if kind == "Pod":
        errors.extend(_pod_spec_errors(obj.get("spec") or {}, "spec"))
    elif kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"):
        errors.extend(_workload_errors(obj))
    elif kind == "Job":
        errors.extend(job_spec_errors(obj.get("spec") or {}, _pod_spec_errors))
    elif kind == "MutatingWebhookConfiguration":
        errors.extend(_webhook_errors(obj))
    elif kind == "Lease":
        errors.extend(_lease_errors(obj.get("spec") or {}))
    elif kind == "PodDisruptionBudget":
        errors.extend(pdb_spec_errors(obj.get("spec") or {}))
    return errors


_STATEFULSET_IMMUTABLE = ("selector", "volumeClaimTemplates", "serviceName", "podManagementPolicy")


def _statefulset_update_errors(new_spec: Obj, old_spec: Obj) -> list[FieldError]:
    """ValidateStatefulSetUpdate (v1.37): the spec's fields that may not change, each its own error in this
    order (before v1.37 one Forbidden error on `spec` named the fields that may)."""
    return [
        FieldError("FieldValueInvalid", f"spec.{key}", "field is immutable", new_spec.get(key))
        for key in _STATEFULSET_IMMUTABLE
        if prune_nulls(new_spec.get(key)) != prune_nulls(old_spec.get(key))
    ]


def validate_update(rtype: ResourceType, new: Obj, old: Obj) -> list[FieldError]:
    if rtype.kind == "Event":
        errors = validate_event_update(new, old, new_api=rtype.group == "events.k8s.io")
    else:
        errors = validate_object(rtype, new)
    new_meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        added = [f for f in new_meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])]
        if added:
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    "metadata.finalizers",
                    f"no new finalizers can be added if the object is being deleted, found new finalizers {added}",
                )
            )
    if rtype.kind == "Pod":
        errors.extend(pod_update_errors(new.get("spec") or {}, old.get("spec") or {}))
        errors.extend(pod_ip_errors(new.get("status") or {}))
    elif rtype.kind == "Job":
        errors.extend(job_update_errors(new, old, _pod_spec_errors))
    elif rtype.kind == "StatefulSet":
        errors.extend(_statefulset_update_errors(new.get("spec") or {}, old.get("spec") or {}))
    elif rtype.kind in ("Deployment", "ReplicaSet", "DaemonSet") and prune_nulls(
        (new.get("spec") or {}).get("selector")
    ) != prune_nulls((old.get("spec") or {}).get("selector")):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                "spec.selector",
                "field is immutable",
                (new.get("spec") or {}).get("selector"),
            )
        )
    return errors


def pod_ip_errors(status: Obj) -> list[FieldError]:
    """validatePodIPs (pkg/apis/core/validation/validation.go, run by ValidatePodStatusUpdate): every
    status.podIPs entry an IP, and more than one only as a dual-stack pair, one IPv4 and one IPv6. The bad
    list prints as the internal core.PodIP structs (field `IP`, no JSON tag)."""
    errors: list[FieldError] = []
    ips = [str(entry.get("ip", "")) for entry in status.get("podIPs") or [] if isinstance(entry, dict)]
    families: list[int] = []
    for index, ip in enumerate(ips):
        try:
            families.append(ipaddress.ip_address(ip).version)
        except ValueError:
            errors.append(
                FieldError(
                    "FieldValueInvalid",
                    f"status.podIPs[{index}]",
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    ip,
                )
            )
    if len(ips) > 1 and not errors and (len(ips) > 2 or len(set(families)) != 2):
        rendered = "[" + ",".join("{" + f'"IP":{json.dumps(ip)}' + "}" for ip in ips) + "]"
        errors.append(
            FieldError(
                "FieldValueInvalid",
                "status.podIPs",
                "may specify no more than one IP for each IP family",
                GoRendered(rendered),
            )
        )
    return errors


def _toleration_key(toleration: Obj) -> tuple[Any, ...]:
    return tuple(toleration.get(k) for k in ("key", "operator", "value", "effect"))


def pod_update_errors(new: Obj, old: Obj) -> list[FieldError]:
    """ValidatePodUpdate's spec rules: only images, activeDeadlineSeconds, added tolerations and removed
    scheduling gates may change (plus nodeSelector additions while the pod is gated)."""
    errors: list[FieldError] = []
    old_gates = {g.get("name") for g in old.get("schedulingGates") or []}
    for index, gate in enumerate(new.get("schedulingGates") or []):
        if gate.get("name") not in old_gates:
            errors.append(
                FieldError(
                    "FieldValueForbidden",
                    f"spec.schedulingGates[{index}].name",
                    f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
                )
            )
    old_deadline, new_deadline = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    if old_deadline is not None and (new_deadline is None or new_deadline > old_deadline):
        errors.append(
            FieldError(
                "FieldValueInvalid",
                "spec.activeDeadlineSeconds",
                "must be less than or equal to previous value",
                new_deadline,
            )
        )
    new_tolerations = {_toleration_key(t) for t in new.get("tolerations") or []}
    if any(_toleration_key(t) not in new_tolerations for t in old.get("tolerations") or []):
        errors.append(
            FieldError(
                "FieldValueForbidden",
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )
        )
    munged = copy.deepcopy(new)
    for kind in ("containers", "initContainers"):
        old_list, new_list = old.get(kind) or [], munged.get(kind) or []
        if len(old_list) == len(new_list):
            for new_c, old_c in zip(new_list, old_list, strict=True):
                if isinstance(new_c, dict) and isinstance(old_c, dict):
                    new_c["image"] = old_c.get("image")
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        munged.pop(key, None)
        if key in old:
            munged[key] = old[key]
    old_grace, new_grace = old.get("terminationGracePeriodSeconds"), new.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int) and old_grace < 0 and new_grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if old.get("schedulingGates"):
        old_selector = old.get("nodeSelector") or {}
        new_selector = new.get("nodeSelector") or {}
        if all(new_selector.get(k) == v for k, v in old_selector.items()):
            munged.pop("nodeSelector", None)
            if "nodeSelector" in old:
                munged["nodeSelector"] = old["nodeSelector"]
    if prune_nulls(munged) != prune_nulls(old):
        errors.append(FieldError("FieldValueForbidden", "spec", POD_UPDATE_FORBIDDEN))
    return errors
