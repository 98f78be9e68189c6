"""The mutating admission webhook's decision for one AdmissionReview: a pure function of the review body
and the policies, returning the HTTP status and the body to answer with. The aiohttp server around it
(TLS, logging, metrics) is elsewhere.

Admission never denies a pod: stagger must not be the reason a workload cannot be created (the webhook is
also registered with failurePolicy Ignore). For a pod with `<prefix>/enable: "1"` it answers with a JSON
Patch that
- inserts the init client as the first init container (so sidecars and the app's own init containers wait
  too), configured from the downward API, with small resources and a locked-down security context;
- for a pod in staggering policies: labels it `<prefix>/group` and annotates `<prefix>/policies` and
  `<prefix>/group-key` (see `stagger.matching`), and holds it unless it is bypassed in every policy: label
  `<prefix>/staggered: "1"` (lock and gate modes) and, in gate mode, the `<prefix>/pacing` scheduling gate.
- in evict mode the leader's answer (`EvictAnswer`, asked by the HTTP layer before `review`) decides:
  let the pod through (its ticket and granted-at annotated: its place is counted already), or hold it
  (the staggered label, the `<prefix>/hold` annotation, `<prefix>/held-since`, and a nodeSelector no node
  matches or every container replaced by an idle stub). A pod that must not be evicted (no controller
  owner, a DaemonSet's, a static pod, a Job's whose failure policy would count the eviction) is paced in
  lock mode instead, with a warning (`evict_ineligible`).

`POST /mutate/jobs` (`review_job`) adds the rule that keeps a Job from counting an eviction as a failure
(`job_mutation`) to the Jobs whose pods evict mode may hold.

A pod already carrying the init container (admission reinvoked, or a pod opted in by hand) is left as it
is. Anything unexpected while building the patch admits the pod unchanged with a warning, and the caller
hears of the exception through `internal_errors` to log and count it. A body that is not an
AdmissionReview at all gets 400 with `{"error": reason}`. Dry-run requests are patched the same way: the
patch has no side effects.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stagger import matching
from stagger.durations import format_duration
from stagger.groupbook import controller_of
from stagger.matching import Pair, Placement
from stagger.names import Names
from stagger.policy import PolicyFile, StaggeringPolicy
from stagger.timestamps import format_rfc3339
from webhook import wire

__all__ = [
    "DISRUPTION_IGNORE_RULE",
    "HOLD_CONTAINER",
    "IDLE_COMMAND",
    "INTERNAL_ERROR_WARNING",
    "EvictAnswer",
    "EvictQuestion",
    "InjectSettings",
    "escape_pointer",
    "evict_ineligible",
    "evict_question",
    "init_container",
    "job_mutation",
    "max_wait_for",
    "mutation",
    "review",
    "review_job",
    "stub_container",
]

INTERNAL_ERROR_WARNING = "stagger: internal error, pod admitted unchanged"
# The stand-in process of a pod held with `hold: stub` (lockd/idle.py, in the same image as lockd).
IDLE_COMMAND = ("python", "-m", "lockd.idle")
HOLD_CONTAINER = "stagger-hold"
# What `POST /mutate/jobs` adds to a Job's podFailurePolicy: an eviction (the API server adds the
# DisruptionTarget condition, reason EvictionByEvictionAPI) is not counted against backoffLimit.
DISRUPTION_IGNORE_RULE: dict[str, Any] = {
    "action": "Ignore",
    "onPodConditions": [{"type": "DisruptionTarget"}],
}
# Kubernetes' limit on podFailurePolicy.rules (apis/batch/validation: maxPodFailurePolicyRules).
MAX_POD_FAILURE_RULES = 20
_LOCKED_DOWN: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True, kw_only=True)
class InjectSettings:
    """How the init client is injected.

    `max_wait` is the init client's own bound on waiting (STAGGER_MAX_WAIT); compute it with
    `max_wait_for(policy_file)`. A pod in staggering policies gets at least its maxBlockedDuration, so the
    group releases it before its init client gives up. (The init client also stops at the node policy's
    maxWait that lockd sends, whichever is smaller.)"""

    image: str
    lockd_port: int = 9400
    max_wait: float = 600.0
    container_name: str = "stagger-wait"
    # The stagger image's entrypoint is `python -m`, so `args=("initclient",)` with no command works too;
    # the full command does not depend on the entrypoint.
    command: tuple[str, ...] = ("python", "-m", "initclient")
    args: tuple[str, ...] = ()
    image_pull_policy: str | None = None  # None: the cluster's default for the tag


def max_wait_for(policy_file: PolicyFile, *, default: float = 600.0) -> float:
    """The init client's max wait for a policy file: the largest node policy maxWait (`default` without
    node policies), so that no node's policy is cut short by the init client."""
    return max((policy.max_wait for policy in policy_file.node_policies), default=default)


def escape_pointer(token: str) -> str:
    """One member name as a JSON Pointer reference token (RFC 6901): `~` -> `~0`, then `/` -> `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def init_container(settings: InjectSettings, *, max_wait: float) -> dict[str, Any]:
    """The init client container as it goes into the pod."""
    container: dict[str, Any] = {"name": settings.container_name, "image": settings.image}
    if settings.command:
        container["command"] = list(settings.command)
    if settings.args:
        container["args"] = list(settings.args)
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    container["env"] = [
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("POD_UID", "metadata.uid"),
        # Before STAGGER_LOCKD_URL: Kubernetes expands $(VAR) only from variables defined earlier.
        _field_env("HOST_IP", "status.hostIP"),
        {"name": "STAGGER_LOCKD_URL", "value": f"http://$(HOST_IP):{settings.lockd_port}"},
        {"name": "STAGGER_MAX_WAIT", "value": format_duration(max_wait)},
    ]
    container["resources"] = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
    container["securityContext"] = dict(_LOCKED_DOWN)
    # The init client's one line (why it gave up waiting, say) shows in the pod's status.
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _add(path: str, value: Any) -> wire.PatchOperation:
    return {"op": "add", "path": path, "value": value}


def _add_entries(
    ops: list[wire.PatchOperation], metadata: Mapping[str, Any], field: str, entries: Mapping[str, str]
) -> None:
    """Set `entries` in metadata.<field> (labels or annotations), creating the map when it is absent."""
    if not entries:
        return
    if isinstance(metadata.get(field), Mapping):
        for key, value in entries.items():
            ops.append(_add(f"/metadata/{field}/{escape_pointer(key)}", value))
    else:
        ops.append(_add(f"/metadata/{field}", dict(entries)))


def _has_init_container(spec: Mapping[str, Any], name: str) -> bool:
    containers = spec.get("initContainers")
    return isinstance(containers, list) and any(
        isinstance(container, Mapping) and container.get("name") == name for container in containers
    )


# --- evict mode -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EvictQuestion:
    """What admission asks the leader about a pod in evict mode (`stagger.groupbook.admit`)."""

    pacer_groups: tuple[Pair, ...]
    bypassed_groups: tuple[Pair, ...]
    owner: str  # the controller's uid
    dry_run: bool


@dataclass(frozen=True, kw_only=True)
class EvictAnswer:
    """The answer: `admit` (let through, counted under `ticket`), `hold`, or `lock` (nobody could evict
    it: no group pacing here; paced by its init client as in lock mode). `now`: wall time, epoch seconds,
    for the annotations; `held_since`: the first hold of the pod's chain, when carried over."""

    outcome: Literal["admit", "hold", "lock"]
    reason: str
    now: float
    ticket: str | None = None
    held_since: float | None = None


def evict_ineligible(pod: Mapping[str, Any], *, names: Names) -> str | None:
    """Why this pod must not be held in evict mode (an eviction would not bring it back as it should),
    or None. Pure."""
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    if "kubernetes.io/config.mirror" in annotations:
        return "a static pod (the kubelet's mirror pod) cannot be evicted and recreated"
    owner = controller_of(metadata)
    if owner is None:
        return "a bare pod (no controller owner) would be deleted for good by an eviction"
    kind = owner.get("kind")
    if kind == "Node":
        return "a static pod (the kubelet's mirror pod) cannot be evicted and recreated"
    if kind == "DaemonSet":
        return "a DaemonSet's pod would be recreated on the same node at once, held or not"
    if kind == "Job" and annotations.get(names.evictable_annotation) != "1":
        return (
            "its Job would count an eviction as a failure (its podFailurePolicy has no Ignore rule for "
            "DisruptionTarget: see the Job's admission warnings)"
        )
    return None


def evict_question(
    body: object, *, policies: Sequence[StaggeringPolicy], names: Names, settings: InjectSettings
) -> EvictQuestion | None:
    """The question to ask the leader before `review` for this AdmissionReview, or None when there is
    none (not a pod being created in evict mode that may be held). Never raises: a body `review` would
    refuse, or a grouping expression that fails, asks nothing (`review` answers)."""
    try:
        if _request_problem(body) is not None:
            return None
        assert isinstance(body, Mapping)
        request = body["request"]
        if not _is_pod_create(request):
            return None
        pod = _with_namespace(request["object"], request.get("namespace"))
        if matching.pod_labels(pod).get(names.enable_label) != "1":
            return None
        spec = pod.get("spec")
        if not isinstance(spec, Mapping) or _already_done(spec, settings):
            return None
        placement = matching.match_pod(pod, policies)
        if placement is None or placement.mode != "evict" or placement.fully_bypassed:
            return None
        if evict_ineligible(pod, names=names) is not None:
            return None
        owner = controller_of(pod.get("metadata") or {})
        return EvictQuestion(
            pacer_groups=matching.pacer_groups(placement),
            bypassed_groups=tuple((m.policy_name, m.key) for m in placement.matches if m.bypassed),
            owner=str((owner or {}).get("uid") or ""),
            dry_run=request.get("dryRun") is True,
        )
    except Exception:  # review() meets the same problem and reports it
        return None


def stub_container(container: Mapping[str, Any], *, settings: InjectSettings, init: bool) -> dict[str, Any]:
    """An idle stand-in for one container of a pod held with `hold: stub`: same name, resources (so the
    pod keeps its place and footprint) and, for app containers, ports; none of its image, code, mounts,
    environment or probes."""
    stub: dict[str, Any] = {
        "name": container.get("name"),
        "image": settings.image,
        "command": list(IDLE_COMMAND),
    }
    if settings.image_pull_policy:
        stub["imagePullPolicy"] = settings.image_pull_policy
    if isinstance(container.get("resources"), Mapping):
        stub["resources"] = container["resources"]
    if not init and isinstance(container.get("ports"), list):
        stub["ports"] = container["ports"]
    if init and container.get("restartPolicy"):
        stub["restartPolicy"] = container["restartPolicy"]  # a sidecar's resources add up differently
    stub["securityContext"] = dict(_LOCKED_DOWN)
    return stub


def _hold_container(settings: InjectSettings) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": HOLD_CONTAINER,
        "image": settings.image,
        "command": list(IDLE_COMMAND),
    }
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    container["resources"] = {"requests": {"cpu": "1m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}
    container["securityContext"] = dict(_LOCKED_DOWN)
    return container


def _containers(spec: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    # A field that is not a list (a malformed pod) holds no containers: iterating it raised TypeError, an
    # internal error, for `containers: 5` (found by tests/fuzz/test_webhook_admission.py).
    value = spec.get(field)
    return [c for c in value if isinstance(c, Mapping)] if isinstance(value, list) else []


def _stub_ops(spec: Mapping[str, Any], *, settings: InjectSettings) -> list[wire.PatchOperation]:
    containers = _containers(spec, "containers")
    inits = _containers(spec, "initContainers")
    stubs = [_hold_container(settings)] + [stub_container(c, settings=settings, init=True) for c in inits]
    # Both "add", which replaces an existing member (RFC 6902 4.1): a "replace" of /spec/containers did not
    # apply to a pod without that member, and a patch that does not apply fails the pod's creation whatever
    # the failurePolicy (found by tests/fuzz/test_webhook_admission.py).
    return [
        _add("/spec/containers", [stub_container(c, settings=settings, init=False) for c in containers]),
        _add("/spec/initContainers", stubs),
    ]


def _with_namespace(pod: Mapping[str, Any], namespace: object) -> Mapping[str, Any]:
    # Pods created in a namespace often arrive without metadata.namespace; grouping may use it.
    metadata = pod.get("metadata")
    if (
        isinstance(namespace, str)
        and namespace
        and isinstance(metadata, Mapping)
        and not metadata.get("namespace")
    ):
        return {**pod, "metadata": {**metadata, "namespace": namespace}}
    return pod


def _already_done(spec: Mapping[str, Any], settings: InjectSettings) -> bool:
    """Reinvoked, or opted in by hand: the init client or the hold's stub is there already."""
    return _has_init_container(spec, settings.container_name) or _has_init_container(spec, HOLD_CONTAINER)


def mutation(
    pod: Mapping[str, Any],
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    namespace: str | None = None,
    evict: EvictAnswer | None = None,
) -> tuple[list[wire.PatchOperation], list[str]]:
    """The JSON Patch for a pod being created, and the warnings for its author; ([], []) for a pod stagger
    leaves alone. `namespace` (the request's) stands in for a missing metadata.namespace when grouping.
    `evict`: the leader's answer for a pod in evict mode (None: nobody could be asked, lock mode).

    May raise on a pod too malformed to patch (no spec) or from a grouping expression: `review` turns any
    exception into "admitted unchanged"."""
    if matching.pod_labels(pod).get(names.enable_label) != "1":
        return [], []
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("the pod has no spec")
    if _already_done(spec, settings):
        return [], []
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError("the pod has no metadata")
    pod = _with_namespace(pod, namespace)
    placement = matching.match_pod(pod, policies)

    ops: list[wire.PatchOperation] = []
    warnings: list[str] = list(placement.warnings) if placement is not None else []
    hold = placement is not None and not placement.fully_bypassed
    if placement is not None and placement.mode == "evict" and hold:
        ineligible = evict_ineligible(pod, names=names)
        if ineligible is not None:
            warnings.append(
                f"stagger: not held for eviction: {ineligible}; paced by its init client (lock mode)"
            )
            evict = None
        elif evict is None or evict.outcome == "lock":
            why = evict.reason if evict is not None else "no answer from the group pacer"
            warnings.append(f"stagger: evict mode unavailable ({why}); paced by its init client (lock mode)")
            evict = None
        if evict is not None and evict.outcome == "hold" and placement.hold == "stub":
            # Every container is replaced by an idle stub: no init client either (nothing of the pod runs).
            ops.extend(_stub_ops(spec, settings=settings))
            ops.extend(_placement_ops(placement, metadata=metadata, spec=spec, names=names, evict=evict))
            return ops, warnings
    else:
        evict = None
    max_wait = settings.max_wait
    if hold:
        assert placement is not None
        max_wait = max(max_wait, placement.max_blocked_duration)
    container = init_container(settings, max_wait=max_wait)
    if isinstance(spec.get("initContainers"), list) and spec["initContainers"]:
        ops.append(_add("/spec/initContainers/0", container))
    else:
        ops.append(_add("/spec/initContainers", [container]))
    if placement is not None:
        ops.extend(_placement_ops(placement, metadata=metadata, spec=spec, names=names, evict=evict))
    return ops, warnings


def _placement_ops(
    placement: Placement,
    *,
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    names: Names,
    evict: EvictAnswer | None,
) -> list[wire.PatchOperation]:
    """Labels, annotations and the hold itself. `evict` None for an evict-mode pod: lock mode instead."""
    ops: list[wire.PatchOperation] = []
    hold = not placement.fully_bypassed and (evict is None or evict.outcome == "hold")
    labels = {names.group_label: placement.group}
    if hold:
        labels[names.staggered_label] = "1"
    _add_entries(ops, metadata, "labels", labels)
    annotations = {
        names.policies_annotation: matching.policies_annotation(placement),
        names.group_key_annotation: matching.group_key_annotation(placement),
    }
    if evict is not None and evict.outcome == "admit":
        if evict.ticket:
            annotations[names.ticket_annotation] = evict.ticket
        annotations[names.granted_at_annotation] = format_rfc3339(evict.now)
        if evict.held_since is not None:
            annotations[names.held_since_annotation] = format_rfc3339(evict.held_since)
    elif evict is not None and evict.outcome == "hold":
        annotations[names.hold_annotation] = placement.hold
        held_since = evict.now if evict.held_since is None else min(evict.held_since, evict.now)
        annotations[names.held_since_annotation] = format_rfc3339(held_since)
    _add_entries(ops, metadata, "annotations", annotations)
    if evict is not None and evict.outcome == "hold" and placement.hold == "nodeSelector":
        if isinstance(spec.get("nodeSelector"), Mapping):
            ops.append(_add(f"/spec/nodeSelector/{escape_pointer(names.hold_node_label)}", "true"))
        else:
            ops.append(_add("/spec/nodeSelector", {names.hold_node_label: "true"}))
    if placement.mode == "gate" and hold:
        gate = {"name": names.scheduling_gate}
        gates = spec.get("schedulingGates")
        if not isinstance(gates, list) or not gates:
            ops.append(_add("/spec/schedulingGates", [gate]))
        elif gate not in gates:
            ops.append(_add("/spec/schedulingGates/-", gate))
    return ops


def _request_problem(body: object) -> str | None:
    """Why `body` is not an AdmissionReview request we can answer, or None."""
    if not isinstance(body, Mapping):
        return "the body must be a JSON object (an AdmissionReview)"
    if body.get("apiVersion") != wire.API_VERSION:
        return f"apiVersion must be {wire.API_VERSION} (got {body.get('apiVersion')!r:.80})"
    if body.get("kind") != wire.KIND:
        return f"kind must be {wire.KIND} (got {body.get('kind')!r:.80})"
    request = body.get("request")
    if not isinstance(request, Mapping):
        return "request must be an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return "request.uid must be a non-empty string"
    if not isinstance(request.get("object"), Mapping):
        return "request.object must be an object"
    return None


def _is_create(request: Mapping[str, Any], *, kind: str, group: str, resource: str) -> bool:
    """An object of `kind` being created (the webhooks are registered for nothing else, but a
    misconfiguration must not get our patch applied to something else)."""
    operation = request.get("operation", "CREATE")
    requested = request.get("resource")
    if operation != "CREATE" or request["object"].get("kind", kind) != kind or request.get("subResource"):
        return False
    return not isinstance(requested, Mapping) or (requested.get("group"), requested.get("resource")) == (
        group,
        resource,
    )


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    return _is_create(request, kind="Pod", group="", resource="pods")


Mutate = Callable[[Mapping[str, Any], str | None], tuple[list[wire.PatchOperation], list[str]]]
"""(the object, the request's namespace) -> (JSON patch, warnings)."""


def _answer(
    body: object,
    *,
    applies: Callable[[Mapping[str, Any]], bool],
    mutate: Mutate,
    internal_errors: list[Exception] | None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The answer to one AdmissionReview: 400 when it is not one; else allowed, with `mutate`'s patch and
    warnings when the request `applies`; an exception admits the object unchanged (see `review`)."""
    problem = _request_problem(body)
    if problem is not None:
        return 400, {"error": problem}
    assert isinstance(body, Mapping)  # checked by _request_problem
    request = body["request"]
    response: wire.AdmissionResponse = {"uid": request["uid"], "allowed": True}
    try:
        if applies(request):
            namespace = request.get("namespace")
            ops, warnings = mutate(request["object"], namespace if isinstance(namespace, str) else None)
            if ops:
                patch = json.dumps(ops, separators=(",", ":")).encode("utf-8")
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(patch).decode("ascii")
            if warnings:
                response["warnings"] = warnings
    except Exception as error:  # never let a bug in stagger block a pod or a Job
        if internal_errors is not None:
            internal_errors.append(error)
        response = {"uid": request["uid"], "allowed": True, "warnings": [INTERNAL_ERROR_WARNING]}
    return 200, {"apiVersion": wire.API_VERSION, "kind": wire.KIND, "response": response}


def review(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    internal_errors: list[Exception] | None = None,
    evict: EvictAnswer | None = None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The HTTP status and body answering one AdmissionReview (`body` is the decoded JSON). `evict`: the
    leader's answer to `evict_question` for this review, if it asked one.

    400 `{"error": reason}` when `body` is not an AdmissionReview request; otherwise 200 and a response
    that allows the pod, with a patch when stagger changes it. An exception while building the patch is
    appended to `internal_errors` (for the caller to log and count) and the pod is admitted unchanged with
    the warning INTERNAL_ERROR_WARNING."""
    return _answer(
        body,
        applies=_is_pod_create,
        mutate=lambda pod, namespace: mutation(
            pod, policies=policies, names=names, settings=settings, namespace=namespace, evict=evict
        ),
        internal_errors=internal_errors,
    )


# --- Jobs ---------------------------------------------------------------------------------------------


def _disruption_rules(rules: Sequence[object]) -> list[Mapping[str, Any]]:
    """The rules of a podFailurePolicy that match the DisruptionTarget condition (status True)."""
    found = []
    for rule in rules:
        if not isinstance(rule, Mapping):
            continue
        patterns = rule.get("onPodConditions")
        if not isinstance(patterns, list):
            # Not a list (a malformed Job): no pattern. Iterating `onPodConditions: 5` raised TypeError, an
            # internal error (found by tests/fuzz/test_webhook_admission.py).
            continue
        for pattern in patterns:
            if (
                isinstance(pattern, Mapping)
                and pattern.get("type") == "DisruptionTarget"
                and pattern.get("status", "True") == "True"
            ):
                found.append(rule)
                break
    return found


def job_mutation(
    job: Mapping[str, Any],
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    namespace: str | None = None,
) -> tuple[list[wire.PatchOperation], list[str]]:
    """The JSON Patch for a Job being created, and the warnings for its author. Pure.

    For a Job whose pod template is opted in and in an evict-mode policy (not bypassed everywhere): add
    `{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}` first in podFailurePolicy.rules (first,
    because the first matching rule decides), and mark the template `<prefix>/evictable: "1"` so that its
    pods may be held. Left alone, with a warning, when Kubernetes would not take a podFailurePolicy
    (restartPolicy other than Never) or when the Job has its own DisruptionTarget rule that is not Ignore:
    its pods are then paced by their init client (lock mode). A Job given a podFailurePolicy here also gets
    `podReplacementPolicy: Failed`, the only value Kubernetes allows with one."""
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(template, Mapping):
        return [], []
    template_meta = template.get("metadata")
    if not isinstance(template_meta, Mapping):
        return [], []
    job_meta = job.get("metadata")
    job_namespace = job_meta.get("namespace") if isinstance(job_meta, Mapping) else None
    pod = {**template, "metadata": {**template_meta, "namespace": job_namespace or namespace or ""}}
    if matching.pod_labels(pod).get(names.enable_label) != "1":
        return [], []
    placement = matching.match_pod(pod, policies)
    if placement is None or placement.mode != "evict" or placement.fully_bypassed:
        return [], []
    pod_spec = template.get("spec")
    pod_spec = pod_spec if isinstance(pod_spec, Mapping) else {}
    lock = "its pods are paced by their init client (lock mode), not held for eviction"
    if pod_spec.get("restartPolicy") != "Never":
        return [], [
            f"stagger: restartPolicy {pod_spec.get('restartPolicy')!s}: Kubernetes allows a podFailurePolicy "
            f"only with restartPolicy Never, so an eviction would count as a failure; {lock}"
        ]
    failure_policy = spec.get("podFailurePolicy")
    rules = failure_policy.get("rules") if isinstance(failure_policy, Mapping) else None
    rules = rules if isinstance(rules, list) else []
    ops: list[wire.PatchOperation] = []
    existing = _disruption_rules(rules)
    if any(rule.get("action") != "Ignore" for rule in existing):
        return [], [
            "stagger: the Job's podFailurePolicy has a DisruptionTarget rule whose action is not Ignore, "
            f"so an eviction would count against it; {lock}"
        ]
    if not existing:
        if len(rules) >= MAX_POD_FAILURE_RULES:
            return [], [
                f"stagger: the Job's podFailurePolicy has {len(rules)} rules already (Kubernetes allows "
                f"{MAX_POD_FAILURE_RULES}), no room for the DisruptionTarget Ignore rule; {lock}"
            ]
        if isinstance(failure_policy, Mapping) and isinstance(failure_policy.get("rules"), list):
            ops.append(_add("/spec/podFailurePolicy/rules/0", DISRUPTION_IGNORE_RULE))
        elif isinstance(failure_policy, Mapping):
            ops.append(_add("/spec/podFailurePolicy/rules", [DISRUPTION_IGNORE_RULE]))
        else:
            ops.append(_add("/spec/podFailurePolicy", {"rules": [DISRUPTION_IGNORE_RULE]}))
        if spec.get("podReplacementPolicy") != "Failed":
            # The API server defaulted it to TerminatingOrFailed before admission (no podFailurePolicy then),
            # and a Job with a podFailurePolicy may only have Failed (apis/batch/validation
            # validatePodReplacementPolicy): without this the Job would be refused.
            ops.append(_add("/spec/podReplacementPolicy", "Failed"))
    annotations = template_meta.get("annotations")
    if isinstance(annotations, Mapping):
        path = f"/spec/template/metadata/annotations/{escape_pointer(names.evictable_annotation)}"
        ops.append(_add(path, "1"))
    else:
        ops.append(_add("/spec/template/metadata/annotations", {names.evictable_annotation: "1"}))
    return ops, list(placement.warnings)


def review_job(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    internal_errors: list[Exception] | None = None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """`POST /mutate/jobs`: as `review`, for Jobs being created (`job_mutation`)."""
    return _answer(
        body,
        applies=lambda request: _is_create(request, kind="Job", group="batch", resource="jobs"),
        mutate=lambda job, namespace: job_mutation(job, policies=policies, names=names, namespace=namespace),
        internal_errors=internal_errors,
    )
