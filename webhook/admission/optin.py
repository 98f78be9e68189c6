"""How a pod being created comes to be opted in: by its own `<prefix>/enable: "1"` label (`POST /mutate/pods`),
by its namespace's (`POST /mutate/pods/namespace`: the API server sent it because the namespace carries the
label), or by naming one of the configured schedulers (`POST /mutate/pods/scheduler`). The last two add the
enable label, so that lockd, the reconcilers and `kubectl stagger` see the pod as any opted-in pod; the
scheduler route also gives the pod the default scheduler.

A pod whose own enable label says anything but "1" (documented: "0") has opted out: neither route touches
it. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from stagger import matching
from stagger.names import Names
from webhook.admission import wire
from webhook.admission.inject import add_entries, add_op

__all__ = ["DEFAULT_SCHEDULER", "ROUTES", "OptIn", "Route", "opt_in"]

Route = Literal["label", "namespace", "scheduler"]
ROUTES: Final[tuple[Route, ...]] = ("label", "namespace", "scheduler")

# The scheduler every cluster runs (kube-scheduler's default profile; the API server's default for
# spec.schedulerName).
DEFAULT_SCHEDULER: Final = "default-scheduler"


@dataclass(frozen=True, kw_only=True)
class OptIn:
    """A pod opted in: as it will be once `ops` are applied (the enable label set and, by the scheduler
    route, the default scheduler), the operations themselves, and the warnings they call for."""

    pod: Mapping[str, Any]
    ops: tuple[wire.PatchOperation, ...] = ()
    warnings: tuple[str, ...] = ()


def opt_in(
    pod: Mapping[str, Any],
    *,
    route: Route,
    names: Names,
    scheduler_names: Collection[str] = (),
) -> OptIn | None:
    """The pod opted in by `route`, or None when that route leaves it alone.

    - label: only a pod labelled `<prefix>/enable: "1"`, unchanged.
    - namespace: any pod that has not opted out; the label is added when it is missing. The namespace is
      not checked: the API server's namespaceSelector chose the pod, and admission makes no API call.
    - scheduler: a pod whose spec.schedulerName is one of `scheduler_names` (checked here: the route is
      only the API server's matchConditions, which an API server may not evaluate) and has not opted out;
      the label added, and the scheduler replaced by the default one (with a warning).

    Raises ValueError for a pod the label cannot be added to (no metadata): `review` admits it unchanged."""
    value = matching.pod_labels(pod).get(names.enable_label)
    if route == "label":
        return OptIn(pod=pod) if value == "1" else None
    if value is not None and value != "1":
        return None  # opted out by its own label
    spec = pod.get("spec")
    scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if route == "scheduler" and (not isinstance(scheduler, str) or scheduler not in scheduler_names):
        return None
    ops: list[wire.PatchOperation] = []
    warnings: list[str] = []
    if value is None:
        metadata = pod.get("metadata")
        if not isinstance(metadata, Mapping):
            raise ValueError("the pod has no metadata")
        add_entries(ops, metadata, "labels", {names.enable_label: "1"})
        labels = metadata.get("labels")
        labels = labels if isinstance(labels, Mapping) else {}
        pod = {**pod, "metadata": {**metadata, "labels": {**labels, names.enable_label: "1"}}}
    if route == "scheduler":
        assert isinstance(spec, Mapping)  # it names a scheduler
        # "add" replaces the member (RFC 6902 4.1), as everywhere in stagger's patches.
        ops.append(add_op("/spec/schedulerName", DEFAULT_SCHEDULER))
        warnings.append(f"stagger: schedulerName {scheduler} replaced by {DEFAULT_SCHEDULER}")
        pod = {**pod, "spec": {**spec, "schedulerName": DEFAULT_SCHEDULER}}
    return OptIn(pod=pod, ops=tuple(ops), warnings=tuple(warnings))
