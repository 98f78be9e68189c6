"""PodDisruptionBudget status, kept by an in-emulator disruption controller as the real one keeps it
(pkg/controller/disruption/disruption.go v1.36), and the budget side of an eviction
(pkg/registry/core/pod/storage/eviction.go checkAndDecrement).

The controller recomputes a budget's status whenever one of its pods or the budget itself is written
(synchronously, inside that write: the status is always current, where the real controller lags a
little), and writes it only when it changed:

* selected pods: `spec.selector` as LabelSelectorAsSelector reads it (nil: none, empty: all pods of the
  namespace);
* expectedPods: for maxUnavailable and percentage minAvailable, the summed replicas of the pods'
  controllers (ReplicaSet, or the Deployment above it) — pods without a controller count for nothing;
  an integer minAvailable counts the selected pods;
* desiredHealthy: minAvailable (percentages rounded up), or expectedPods - maxUnavailable;
* currentHealthy: selected pods that are Ready, not terminating and not just evicted (status.disruptedPods,
  for DELETION_TIMEOUT);
* disruptionsAllowed: currentHealthy - desiredHealthy, 0 when negative or when no pod is expected;
* observedGeneration = metadata.generation, and the DisruptionAllowed condition (SufficientPods /
  InsufficientPods).
A budget whose pods' controllers cannot be scaled (a Job's, a DaemonSet's) or found fails to sync as the
real one does (failSafe): disruptionsAllowed 0, condition reason SyncFailed, observedGeneration left
behind — so evictions answer 429 "still being processed".

Not emulated: the controller's Events (NoPods, UnmanagedPods ...), the timed re-check when an evicted
pod is not deleted within DELETION_TIMEOUT (the next write to the budget or its pods re-checks), and the
clean-up of stale DisruptionTarget pod conditions.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterable

from sim.emulator import errors
from sim.emulator.resources import builtin, pods
from sim.emulator.selectors import LabelSelector, SelectorError, selector_from_object
from sim.emulator.store import Store, StoredEvent
from stagger.objects import Obj
from stagger.podstate import is_pod_ready
from stagger.timestamps import format_rfc3339, parse_rfc3339

DELETION_TIMEOUT = 120.0  # DeletionTimeout: how long an evicted pod may take to be deleted
MAX_DISRUPTED_PODS = 2000  # eviction.go MaxDisruptedPodSize
CONDITION = "DisruptionAllowed"
PDB_STORAGE = builtin("policy", "poddisruptionbudgets").storage_key
POD_STORAGE = pods().storage_key
# Kinds the emulator serves that have no scale subresource: getScaleController's error for them.
_UNSCALABLE = {("apps", "DaemonSet"): "daemonsets.apps", ("batch", "Job"): "jobs.batch", ("", "Pod"): "pods"}
_SCALABLE_ELSEWHERE = {("", "ReplicationController")}  # a real kind, not emulated


class SyncFailed(Exception):
    """The budget's status cannot be computed; the message is the real controller's error."""


Lookup = Callable[[str, str, str], Obj | None]  # (storage, namespace, name) -> object


# ----------------------------------------------------------------------------------------------- selection


def selector_of(pdb: Obj) -> LabelSelector | None:
    """metav1.LabelSelectorAsSelector of spec.selector (nil selects nothing, {} everything); None when
    it is not a valid selector."""
    try:
        return selector_from_object((pdb.get("spec") or {}).get("selector"), nil_selects=False)
    except SelectorError:
        return None


def selects(pdb: Obj, pod: Obj) -> bool:
    selector = selector_of(pdb)
    return selector is not None and selector.matches((pod.get("metadata") or {}).get("labels"))


def scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%") or not text[:-1].isdigit():
        raise SyncFailed("invalid value for IntOrString: invalid type: string is not a percentage")
    return math.ceil(int(text[:-1]) * total / 100)


# ------------------------------------------------------------------------------------------ expected pods


def _controller_ref(obj: Obj) -> Obj | None:
    return next(
        (r for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")), None
    )


def _group(ref: Obj) -> str:
    api_version = str(ref.get("apiVersion") or "")
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _owned(lookup: Lookup, storage: str, namespace: str, ref: Obj) -> Obj | None:
    found = lookup(storage, namespace, str(ref.get("name") or ""))
    return found if found is not None and found["metadata"].get("uid") == ref.get("uid") else None


def _controller_scale(ref: Obj, namespace: str, lookup: Lookup) -> tuple[str, int] | None:
    """The finders in order (RC, Deployment, ReplicaSet, StatefulSet, scale subresource): the controlling
    object's UID and replicas, None when it is not there (any more)."""
    group, kind = _group(ref), ref.get("kind")
    if kind == "ReplicaSet" and group in ("apps", "extensions"):
        replicaset = _owned(lookup, "replicasets.apps", namespace, ref)
        if replicaset is None:
            return None
        owner = _controller_ref(replicaset)
        if (
            owner is not None
            and owner.get("kind") == "Deployment"
            and _group(owner) in ("apps", "extensions")
        ):
            deployment = _owned(lookup, "deployments.apps", namespace, owner)
            if deployment is not None:
                return deployment["metadata"]["uid"], int((deployment.get("spec") or {}).get("replicas", 1))
        return replicaset["metadata"]["uid"], int((replicaset.get("spec") or {}).get("replicas", 1))
    if kind == "Deployment" and group == "apps":
        deployment = _owned(lookup, "deployments.apps", namespace, ref)
        return (
            None
            if deployment is None
            else (deployment["metadata"]["uid"], int(deployment["spec"].get("replicas", 1)))
        )
    if kind == "StatefulSet" and group == "apps":
        statefulset = _owned(lookup, "statefulsets.apps", namespace, ref)
        return (
            None
            if statefulset is None
            else (statefulset["metadata"]["uid"], int((statefulset.get("spec") or {}).get("replicas", 1)))
        )
    if (group, kind) in _UNSCALABLE:
        raise SyncFailed(f"{_UNSCALABLE[(group, str(kind))]} does not implement the scale subresource")
    if (group, kind) in _SCALABLE_ELSEWHERE:
        return None
    raise SyncFailed(f'no matches for kind "{kind}" in version "{ref.get("apiVersion")}"')


def expected_scale(selected: list[Obj], lookup: Lookup) -> int:
    """getExpectedScale: the summed scale of the selected pods' controllers (pods without one ignored)."""
    scales: dict[str, int] = {}
    for pod in selected:
        ref = _controller_ref(pod)
        if ref is None or ref.get("uid") in scales:
            continue
        found = _controller_scale(ref, pod["metadata"].get("namespace") or "", lookup)
        if found is None:
            raise SyncFailed(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[found[0]] = found[1]
    return sum(scales.values())


def expected_and_desired(pdb: Obj, selected: list[Obj], lookup: Lookup) -> tuple[int, int]:
    """getExpectedPodCount."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected = expected_scale(selected, lookup)
        return expected, max(0, expected - scaled(spec["maxUnavailable"], expected))
    minimum = spec.get("minAvailable")
    if isinstance(minimum, int):
        return len(selected), minimum
    if isinstance(minimum, str):
        expected = expected_scale(selected, lookup)
        return expected, scaled(minimum, expected)
    return 0, 0


# ------------------------------------------------------------------------------------------------ status


def _terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def disrupted_pods(pdb: Obj, selected: list[Obj], now: float) -> dict[str, str]:
    """buildDisruptedPodMap: evicted pods not deleted yet, until DELETION_TIMEOUT."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    for pod in selected:
        name = pod["metadata"]["name"]
        if _terminating(pod) or name not in recorded:
            continue
        if (parse_rfc3339(str(recorded[name])) or 0.0) + DELETION_TIMEOUT >= now:
            kept[name] = recorded[name]
    return kept


def count_healthy(selected: Iterable[Obj], disrupted: dict[str, str]) -> int:
    """countHealthyPods (the disrupted map is already limited to DELETION_TIMEOUT)."""
    return sum(
        1
        for pod in selected
        if not _terminating(pod) and pod["metadata"]["name"] not in disrupted and is_pod_ready(pod)
    )


def set_condition(status: Obj, condition: Obj, *, now: float) -> None:
    """meta.SetStatusCondition: lastTransitionTime moves only when the status does."""
    conditions = status.setdefault("conditions", [])
    for existing in conditions:
        if existing.get("type") == condition["type"]:
            if existing.get("status") != condition["status"]:
                existing["lastTransitionTime"] = format_rfc3339(now, digits=0)
            existing.update({k: v for k, v in condition.items() if k != "lastTransitionTime"})
            return
    conditions.append({**condition, "lastTransitionTime": format_rfc3339(now, digits=0)})


def update_allowed_condition(status: Obj, *, now: float) -> None:
    """pdbhelper.UpdateDisruptionAllowedCondition."""
    allowed = (status.get("disruptionsAllowed") or 0) > 0
    condition = {
        "type": CONDITION,
        "status": "True" if allowed else "False",
        "observedGeneration": status.get("observedGeneration", 0),
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
    }
    if not condition["observedGeneration"]:
        del condition["observedGeneration"]
    set_condition(status, condition, now=now)


def _condition(status: Obj) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)


def conditions_up_to_date(pdb: Obj) -> bool:
    """pdbhelper.ConditionsAreUpToDate."""
    status = pdb.get("status") or {}
    condition = _condition(status)
    if condition is None or status.get("observedGeneration", 0) != pdb["metadata"].get("generation", 0):
        return False
    if (status.get("disruptionsAllowed") or 0) > 0:
        return condition.get("status") == "True" and condition.get("reason") == "SufficientPods"
    return condition.get("status") == "False" and condition.get("reason") == "InsufficientPods"


def _fail_safe(pdb: Obj, problem: str, *, now: float) -> Obj:
    """failSafe: nothing may be disrupted; observedGeneration stays where it was."""
    status = copy.deepcopy(pdb.get("status") or {})
    status["disruptionsAllowed"] = 0
    condition = {"type": CONDITION, "status": "False", "reason": "SyncFailed", "message": problem}
    if status.get("observedGeneration"):
        condition["observedGeneration"] = status["observedGeneration"]
    set_condition(status, condition, now=now)
    return status


def synced_status(pdb: Obj, namespace_pods: Iterable[Obj], lookup: Lookup, *, now: float) -> Obj | None:
    """trySync + updatePdbStatus (or failSafe): the status to write, None when it would not change."""
    selector = selector_of(pdb)
    selected = (
        []
        if selector is None
        else [p for p in namespace_pods if selector.matches(p["metadata"].get("labels"))]
    )
    status = pdb.get("status") or {}
    try:
        expected, desired = expected_and_desired(pdb, selected, lookup)
    except SyncFailed as failure:
        failed = _fail_safe(pdb, str(failure), now=now)
        return None if failed == status else failed
    disrupted = disrupted_pods(pdb, selected, now)
    healthy = count_healthy(selected, disrupted)
    allowed = max(0, healthy - desired) if expected > 0 else 0
    generation = pdb["metadata"].get("generation", 0)
    current = (
        status.get("currentHealthy"),
        status.get("desiredHealthy"),
        status.get("expectedPods"),
        status.get("disruptionsAllowed"),
        status.get("disruptedPods") or {},
    )
    if current == (healthy, desired, expected, allowed, disrupted) and conditions_up_to_date(pdb):
        return None
    new: Obj = {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": copy.deepcopy(status.get("conditions") or []),
    }
    if disrupted:
        new["disruptedPods"] = disrupted
    update_allowed_condition(new, now=now)
    return new


# ---------------------------------------------------------------------------------------------- controller


class DisruptionController:
    """Keeps every budget's status current, from inside the store's writes (see the module docstring)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._pending: set[tuple[str, str]] = set()
        self._busy = False

    def attach(self) -> None:
        self.store.add_listener(self.on_event)

    def _lookup(self, storage: str, namespace: str, name: str) -> Obj | None:
        return self.store.get(storage, namespace, name)

    def on_event(self, storage: str, event: StoredEvent) -> None:
        if storage == PDB_STORAGE:
            if event.type != "DELETED":
                metadata = event.obj["metadata"]
                self._pending.add((metadata.get("namespace") or "", metadata["name"]))
        elif storage == POD_STORAGE:
            namespace = event.obj["metadata"].get("namespace") or ""
            for pdb in self.store.objects(PDB_STORAGE, namespace):
                if selects(pdb, event.obj) or (event.prev is not None and selects(pdb, event.prev)):
                    self._pending.add((namespace, pdb["metadata"]["name"]))
        else:
            return
        if self._busy:
            return  # a sync's own write: handled by the loop below
        self._busy = True
        try:
            while self._pending:
                self.sync(*self._pending.pop())
        finally:
            self._busy = False

    def sync(self, namespace: str, name: str) -> None:
        pdb = self.store.get(PDB_STORAGE, namespace, name)
        if pdb is None:
            return
        new = synced_status(pdb, self.store.objects(POD_STORAGE, namespace), self._lookup, now=self.clock())
        if new is not None:
            self.store.put(PDB_STORAGE, {**pdb, "status": new})


# ------------------------------------------------------------------------------------------------ eviction


def too_many_requests(message: str, *, retry_after: int = 0) -> errors.ApiError:
    return errors.too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        causes=[{"reason": "DisruptionBudget", "message": message}],
        retry_after=retry_after,
    )


def _refusal(pdb: Obj) -> str:
    name, status = pdb["metadata"]["name"], pdb.get("status") or {}
    condition = _condition(status) or {}
    refused = condition.get("status") == "False" and condition.get("message")
    if refused and condition.get("reason") == "SyncFailed":
        return f"The disruption budget {name} does not allow evicting pods currently because it failed sync: {condition['message']}"
    healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
    if healthy <= desired:
        return f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently"
    if refused:
        return f"The disruption budget {name} does not allow evicting pods currently ({condition.get('reason')}): {condition['message']}"
    return f"The disruption budget {name} does not allow evicting pods currently"


def check_and_decrement(store: Store, pdb: Obj, pod_name: str, *, now: float, dry_run: bool) -> None:
    """checkAndDecrement: refuse from the budget's status, else use one disruption up and record the
    pod as disrupted (a status write, as the eviction does through the API)."""
    metadata, status = pdb["metadata"], pdb.get("status") or {}
    name = metadata["name"]
    if status.get("observedGeneration", 0) < metadata.get("generation", 0):
        raise too_many_requests(
            f"The disruption budget {name} is still being processed by the server.", retry_after=10
        )
    allowed = status.get("disruptionsAllowed", 0)
    if allowed < 0:
        raise errors.forbidden("policy", "poddisruptionbudget", name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise errors.forbidden(
            "policy",
            "poddisruptionbudget",
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        )
    if allowed == 0:
        raise too_many_requests(_refusal(pdb))
    new = copy.deepcopy(status)
    new["disruptionsAllowed"] = allowed - 1
    if new["disruptionsAllowed"] == 0:
        update_allowed_condition(new, now=now)
    if dry_run:
        return
    new.setdefault("disruptedPods", {})[pod_name] = format_rfc3339(now, digits=0)
    store.put(PDB_STORAGE, {**pdb, "status": new})


def budgets_of(store: Store, pod: Obj) -> list[Obj]:
    """getPodDisruptionBudgets: the budgets of the pod's namespace whose selector matches it."""
    namespace = pod["metadata"].get("namespace") or ""
    return [pdb for pdb in store.objects(PDB_STORAGE, namespace) if selects(pdb, pod)]
