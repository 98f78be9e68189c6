"""The pod subresources that are actions: eviction (pkg/registry/core/pod/storage/eviction.go) and
binding (BindingREST), as functions of the registry."""

from __future__ import annotations

import copy

from sim.emulator import disruption, errors
from sim.emulator.errors import ApiError, FieldError, Status
from sim.emulator.registry import Registry
from sim.emulator.resources import pods
from sim.emulator.strategy import prune_nulls, set_pod_condition
from stagger.objects import Obj
from stagger.podstate import is_pod_ready


def can_ignore_budget(pod: Obj) -> bool:
    """canIgnorePDB: a pod that is not running (yet or any more), or already terminating. Such a pod is
    deleted without looking at its budget (which is not used up): a Pending pod held unscheduled or in
    Init (stagger's evict mode) goes even when its budget allows no disruption."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def _budget_allows(registry: Registry, pod: Obj, *, now: float, dry_run: bool) -> None:
    """The budget part of EvictionREST.Create, judged from the budget's status (kept by
    disruption.DisruptionController, as the real disruption controller keeps it)."""
    budgets = disruption.budgets_of(registry.store, pod)
    if len(budgets) > 1:
        raise ApiError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
                "code": 500,
            }
        )
    if not budgets:
        return
    pdb = budgets[0]
    if not is_pod_ready(pod):
        # An unhealthy pod may go when the policy says so, or when the budget is met anyway.
        if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return
        status = pdb.get("status") or {}
        if status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0:
            return
    disruption.check_and_decrement(registry.store, pdb, pod["metadata"]["name"], now=now, dry_run=dry_run)


def evict(
    registry: Registry, namespace: str, name: str, eviction: Obj, *, now: float, dry_run: bool = False
) -> Status:
    """POST pods/NAME/eviction (pkg/registry/core/pod/storage/eviction.go)."""
    rtype = pods()
    body_name = (eviction.get("metadata") or {}).get("name")
    if body_name and body_name != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = dict(eviction.get("deleteOptions") or {})
    pod = registry.get(rtype, namespace, name)
    registry.check_preconditions(rtype, pod, options)
    # The condition write below changes the resourceVersion the client may have pinned: checked now.
    options.pop("preconditions", None)
    if not can_ignore_budget(pod):
        _budget_allows(registry, pod, now=now, dry_run=dry_run)
    # addConditionAndDeletePod, on both paths (budget ignored or allowing): DisruptionTarget first (not on
    # a dry run), then the delete, which is at once for a pod on no node (or terminal), graceful otherwise
    # (Registry._pod_grace: podStrategy.CheckGracefulDelete).
    if not dry_run:
        with_condition = copy.deepcopy(pod)
        set_pod_condition(
            with_condition,
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "EvictionByEvictionAPI",
                "message": "Eviction API: evicting",
            },
            now=now,
        )
        if prune_nulls(with_condition) != prune_nulls(pod):
            registry.store.put(rtype.storage_key, with_condition)
        registry.delete(rtype, namespace, name, options, now=now)
    return errors.success(code=201)


def bind(
    registry: Registry, namespace: str, name: str, binding: Obj, *, now: float, dry_run: bool = False
) -> Status:
    """POST pods/NAME/binding: sets spec.nodeName and PodScheduled=True, only on an unbound pod."""
    rtype = pods()
    target = (binding.get("target") or {}).get("name")
    if not target:
        raise errors.invalid("", "Binding", name, [FieldError("FieldValueRequired", "target.name")])
    body_name = (binding.get("metadata") or {}).get("name")
    if body_name and body_name != name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    pod = registry.get(rtype, namespace, name)
    metadata, spec = pod["metadata"], pod.get("spec") or {}
    uid = (binding.get("metadata") or {}).get("uid")
    if uid and uid != metadata.get("uid"):
        raise errors.conflict(
            "",
            "pods/binding",
            name,
            f"the UID in the binding object ({uid}) doesn't match the pod ({metadata.get('uid')})",
        )
    if metadata.get("deletionTimestamp"):
        raise errors.conflict(
            "", "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    if spec.get("nodeName"):
        raise errors.conflict(
            "", "pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        )
    if spec.get("schedulingGates"):
        raise errors.conflict("", "pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates")
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = target
    annotations = (binding.get("metadata") or {}).get("annotations") or {}
    if annotations:
        bound["metadata"].setdefault("annotations", {}).update(annotations)
    set_pod_condition(bound, {"type": "PodScheduled", "status": "True"}, now=now)
    if not dry_run:
        registry.store.put(rtype.storage_key, bound)
    return errors.success(code=201)
