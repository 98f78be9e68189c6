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

A pod already carrying the init container (admission reinvoked, or a pod opted in by hand) is left as it
is. Anything unexpected while building the patch admits the pod unchanged with a warning, and the caller
hears of the exception through `internal_errors` to log and count it. A body that is not an
AdmissionReview at all gets 400 with `{"error": reason}`. Dry-run requests are patched the same way: the
patch has no side effects.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stagger import matching
from stagger.durations import format_duration
from stagger.matching import Placement
from stagger.names import Names
from stagger.policy import PolicyFile, StaggeringPolicy
from webhook import wire

__all__ = [
    "INTERNAL_ERROR_WARNING",
    "InjectSettings",
    "escape_pointer",
    "init_container",
    "max_wait_for",
    "mutation",
    "review",
]

INTERNAL_ERROR_WARNING = "stagger: internal error, pod admitted unchanged"
EVICT_NOT_BUILT_WARNING = "stagger: mode evict is not available yet; the pod is paced in lock mode"


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
    container["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
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


def mutation(
    pod: Mapping[str, Any],
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    namespace: str | None = None,
) -> tuple[list[wire.PatchOperation], list[str]]:
    """The JSON Patch for a pod being created, and the warnings for its author; ([], []) for a pod stagger
    leaves alone. `namespace` (the request's) stands in for a missing metadata.namespace when grouping.

    May raise on a pod too malformed to patch (no spec) or from a grouping expression: `review` turns any
    exception into "admitted unchanged"."""
    if matching.pod_labels(pod).get(names.enable_label) != "1":
        return [], []
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("the pod has no spec")
    if _has_init_container(spec, settings.container_name):
        return [], []  # reinvoked, or opted in by hand: already done
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        raise ValueError("the pod has no metadata")
    if namespace and not metadata.get("namespace"):
        # Pods created in a namespace often arrive without metadata.namespace; grouping may use it.
        pod = {**pod, "metadata": {**metadata, "namespace": namespace}}
    placement = matching.match_pod(pod, policies)

    ops: list[wire.PatchOperation] = []
    warnings: list[str] = []
    max_wait = settings.max_wait
    if placement is not None and not placement.fully_bypassed:
        max_wait = max(max_wait, placement.max_blocked_duration)
    container = init_container(settings, max_wait=max_wait)
    if isinstance(spec.get("initContainers"), list) and spec["initContainers"]:
        ops.append(_add("/spec/initContainers/0", container))
    else:
        ops.append(_add("/spec/initContainers", [container]))
    if placement is not None:
        warnings.extend(placement.warnings)
        ops.extend(_placement_ops(placement, metadata=metadata, spec=spec, names=names, warnings=warnings))
    return ops, warnings


def _placement_ops(
    placement: Placement,
    *,
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    names: Names,
    warnings: list[str],
) -> list[wire.PatchOperation]:
    ops: list[wire.PatchOperation] = []
    hold = not placement.fully_bypassed
    if placement.mode == "evict" and hold:
        # Evict mode (hold by nodeSelector or stub, evict when allowed) is not built: pacing the pod through
        # its init client is the closest thing that holds nothing back forever.
        warnings.append(EVICT_NOT_BUILT_WARNING)
    labels = {names.group_label: placement.group}
    if hold:
        labels[names.staggered_label] = "1"
    _add_entries(ops, metadata, "labels", labels)
    annotations = {
        names.policies_annotation: matching.policies_annotation(placement),
        names.group_key_annotation: matching.group_key_annotation(placement),
    }
    _add_entries(ops, metadata, "annotations", annotations)
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


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    """A pod being created (the webhook is registered for nothing else, but a misconfiguration must not
    get our patch applied to something else)."""
    operation = request.get("operation", "CREATE")
    resource = request.get("resource")
    kind = request["object"].get("kind", "Pod")
    if operation != "CREATE" or kind != "Pod" or request.get("subResource"):
        return False
    return not isinstance(resource, Mapping) or (resource.get("group"), resource.get("resource")) == (
        "",
        "pods",
    )


def review(
    body: object,
    *,
    policies: Sequence[StaggeringPolicy],
    names: Names,
    settings: InjectSettings,
    internal_errors: list[Exception] | None = None,
) -> tuple[int, wire.ReviewOut | wire.ErrorBody]:
    """The HTTP status and body answering one AdmissionReview (`body` is the decoded JSON).

    400 `{"error": reason}` when `body` is not an AdmissionReview request; otherwise 200 and a response
    that allows the pod, with a patch when stagger changes it. An exception while building the patch is
    appended to `internal_errors` (for the caller to log and count) and the pod is admitted unchanged with
    the warning INTERNAL_ERROR_WARNING."""
    problem = _request_problem(body)
    if problem is not None:
        return 400, {"error": problem}
    assert isinstance(body, Mapping)  # checked by _request_problem
    request = body["request"]
    response: wire.AdmissionResponse = {"uid": request["uid"], "allowed": True}
    try:
        if _is_pod_create(request):
            namespace = request.get("namespace")
            ops, warnings = mutation(
                request["object"],
                policies=policies,
                names=names,
                settings=settings,
                namespace=namespace if isinstance(namespace, str) else None,
            )
            if ops:
                patch = json.dumps(ops, separators=(",", ":")).encode("utf-8")
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(patch).decode("ascii")
            if warnings:
                response["warnings"] = warnings
    except Exception as error:  # never let a bug in stagger block a pod
        if internal_errors is not None:
            internal_errors.append(error)
        response = {"uid": request["uid"], "allowed": True, "warnings": [INTERNAL_ERROR_WARNING]}
    return 200, {"apiVersion": wire.API_VERSION, "kind": wire.KIND, "response": response}
