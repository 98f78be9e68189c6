"""What admission adds to a pod, as data: the init client's container (configured from the downward API, small
resources, a locked-down security context), evict mode's hold container and idle stubs, and the JSON Patch
operations that add them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stagger.contracts.podtoken import TOKEN_VOLUME
from stagger.durations import format_duration
from stagger.policy import PolicyFile
from webhook.admission import wire

__all__ = [
    "HOLD_CONTAINER",
    "IDLE_COMMAND",
    "InjectSettings",
    "add_entries",
    "add_op",
    "already_done",
    "escape_pointer",
    "init_container",
    "max_wait_for",
    "stub_container",
    "stub_ops",
    "token_volume_ops",
    "unreachable_wait_for",
]


# The stand-in process of a pod held with `hold: stub` (webhook/idle.py, in the same image as lockd).
IDLE_COMMAND = ("python", "-m", "webhook.idle")


HOLD_CONTAINER = "stagger-hold"

# The pod's service-account token for lockd, projected into the init client only: stagger's audience, so
# it is of no use against the API server; the shortest life the API server allows (10 minutes; the kubelet
# replaces it after 80% of that), bound to the pod, so lockd learns the pod's name and uid from it. The
# volume's name is lockd's too: a pod with the volume must show the token (stagger.contracts.podtoken).
TOKEN_DIR = "/var/run/secrets/stagger"
TOKEN_PATH = "token"
TOKEN_SECONDS = 600


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
    # The init client's bound while lockd cannot decide (STAGGER_UNREACHABLE_WAIT): `unreachable_wait_for`.
    unreachable_wait: float = 60.0
    container_name: str = "stagger-wait"
    # The stagger image's entrypoint is `python -m`, so `args=("initclient",)` with no command works too;
    # the full command does not depend on the entrypoint.
    command: tuple[str, ...] = ("python", "-m", "initclient")
    args: tuple[str, ...] = ()
    image_pull_policy: str | None = None  # None: the cluster's default for the tag
    # The audience of the pod's service-account token projected into the init client (None: no token).
    token_audience: str | None = None


def max_wait_for(policy_file: PolicyFile, *, default: float = 600.0) -> float:
    """The init client's max wait for a policy file: the largest node policy maxWait (`default` without
    node policies), so that no node's policy is cut short by the init client."""
    return max((policy.max_wait for policy in policy_file.node_policies), default=default)


def unreachable_wait_for(policy_file: PolicyFile, *, default: float = 60.0) -> float:
    """The init client's unreachable bound for a policy file: the largest node policy unreachableWait
    (`default` without node policies). Admission does not know the pod's node, so no node's policy is cut
    short."""
    return max((policy.unreachable_wait for policy in policy_file.node_policies), default=default)


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
        {"name": "STAGGER_UNREACHABLE_WAIT", "value": format_duration(settings.unreachable_wait)},
    ]
    if settings.token_audience is not None:
        container["env"].append({"name": "STAGGER_POD_TOKEN_FILE", "value": f"{TOKEN_DIR}/{TOKEN_PATH}"})
        container["volumeMounts"] = [{"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}]
    # Measured (tests/benchmarks/initclient_cost.py; issue 39): 15 MiB resident while it waits (plain http, as
    # injected), 22 MiB with an https lockd URL (ssl and the CA bundle), 40 ms of CPU in all from exec to exit
    # on a grant and next to none while it waits. The request is what it holds plus room for the page cache of
    # its start and the kernel's part; the limit is twice the largest path, since going over it is an OOM kill
    # that fails the pod's start instead of opening it. CPU: a little is enough, and none is capped.
    container["resources"] = {"requests": {"cpu": "10m", "memory": "24Mi"}, "limits": {"memory": "48Mi"}}
    container["securityContext"] = dict(_LOCKED_DOWN)
    # The init client's one line (why it gave up waiting, say) shows in the pod's status.
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def token_volume_ops(spec: Mapping[str, Any], settings: InjectSettings) -> list[wire.PatchOperation]:
    """The projected volume of the pod's service-account token that the init client mounts (none without
    an audience, or when the pod has a volume of that name already: opted in by hand)."""
    if settings.token_audience is None:
        return []
    volumes = spec.get("volumes")
    if isinstance(volumes, list) and any(
        isinstance(v, Mapping) and v.get("name") == TOKEN_VOLUME for v in volumes
    ):
        return []
    source = {
        "audience": settings.token_audience,
        "expirationSeconds": TOKEN_SECONDS,
        "path": TOKEN_PATH,
    }
    volume = {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": source}]}}
    if isinstance(volumes, list) and volumes:
        return [add_op("/spec/volumes/-", volume)]
    return [add_op("/spec/volumes", [volume])]


def add_op(path: str, value: Any) -> wire.PatchOperation:
    return {"op": "add", "path": path, "value": value}


def add_entries(
    ops: list[wire.PatchOperation], metadata: Mapping[str, Any], field: str, entries: Mapping[str, str]
) -> None:
    """Set `entries` in metadata.<field> (labels or annotations), creating the map when it is absent."""
    if not entries:
        return
    if isinstance(metadata.get(field), Mapping):
        for key, value in entries.items():
            ops.append(add_op(f"/metadata/{field}/{escape_pointer(key)}", value))
    else:
        ops.append(add_op(f"/metadata/{field}", dict(entries)))


def _has_init_container(spec: Mapping[str, Any], name: str) -> bool:
    containers = spec.get("initContainers")
    return isinstance(containers, list) and any(
        isinstance(container, Mapping) and container.get("name") == name for container in containers
    )


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


def stub_ops(spec: Mapping[str, Any], *, settings: InjectSettings) -> list[wire.PatchOperation]:
    containers = _containers(spec, "containers")
    inits = _containers(spec, "initContainers")
    stubs = [_hold_container(settings)] + [stub_container(c, settings=settings, init=True) for c in inits]
    # Both "add", which replaces an existing member (RFC 6902 4.1): a "replace" of /spec/containers did not
    # apply to a pod without that member, and a patch that does not apply fails the pod's creation whatever
    # the failurePolicy (found by tests/fuzz/test_webhook_admission.py).
    return [
        add_op("/spec/containers", [stub_container(c, settings=settings, init=False) for c in containers]),
        add_op("/spec/initContainers", stubs),
    ]


def already_done(spec: Mapping[str, Any], settings: InjectSettings) -> bool:
    """Reinvoked, or opted in by hand: the init client or the hold's stub is there already."""
    return _has_init_container(spec, settings.container_name) or _has_init_container(spec, HOLD_CONTAINER)
