"""The generic registry: what create, update and delete do to stored objects (the pod actions,
eviction and binding, are in `podactions`).

Synchronous and free of I/O (admission, which awaits webhooks, happens in the HTTP layer between
`decode` and the write). Public methods take and return objects in the *request's* version ("view");
only events.k8s.io/v1 Events differ from their storage form (core/v1 Events).
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sim.emulator import decoding, errors, microtime
from sim.emulator.errors import FieldError, Status
from sim.emulator.resources import RESOURCE_TYPES, ResourceType, builtin, namespaces, pods
from sim.emulator.schema import Schemas, format_path, remove_paths
from sim.emulator.selectors import FieldSelector, LabelSelector, field_values
from sim.emulator.store import Store
from sim.emulator.strategy import (
    admit_pod_in_tree,
    apply_defaults,
    event_from_core,
    event_to_core,
    generate_name,
    mount_service_account_token,
    prepare_for_create,
    prepare_for_update,
    prune_nulls,
)
from sim.emulator.validation import validate_create, validate_update
from stagger.objects import Obj
from stagger.timestamps import format_rfc3339, parse_rfc3339

logger = logging.getLogger(__name__)

FieldValidation = Literal["Strict", "Warn", "Ignore"]
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_ATTEMPTS = 8


class StaleRead(Exception):
    """The object changed while the request was in admission; the caller reads it again and retries."""


@dataclass(frozen=True)
class RegistryConfig:
    # Seconds after a pod's deletionTimestamp at which the server itself finishes a graceful deletion
    # that no kubelet finished (the real server waits forever; a test bed without kubelets must not).
    graceful_deletion_slack: float = 2.0


@dataclass(frozen=True)
class Decoded:
    obj: Obj
    warnings: tuple[str, ...] = ()
    # The schema violations found while decoding; a write of this very object (admission changed
    # nothing) reuses them instead of checking the schema again. None: not checked.
    schema_errors: tuple[FieldError, ...] | None = None


@dataclass
class _Deadline:
    uid: str
    at: float


@dataclass
class Registry:
    store: Store
    schemas: Schemas
    config: RegistryConfig = field(default_factory=RegistryConfig)
    # Called when a graceful-deletion deadline is added, so the reaper can re-plan its sleep.
    on_deadline: Callable[[], None] = lambda: None
    _deadlines: dict[tuple[str, str], _Deadline] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------ views

    @staticmethod
    def to_view(rtype: ResourceType, obj: Obj) -> Obj:
        return event_from_core(obj) if rtype.group == "events.k8s.io" else obj

    @staticmethod
    def from_view(rtype: ResourceType, obj: Obj) -> Obj:
        return event_to_core(obj) if rtype.group == "events.k8s.io" else obj

    # ------------------------------------------------------------------------------------------ reads

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rtype.storage_key, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.group, rtype.name, name)
        return self.to_view(rtype, obj)

    def predicate(
        self, rtype: ResourceType, labels: LabelSelector, fields: FieldSelector
    ) -> Callable[[Obj], bool]:
        names = tuple(r.field for r in fields.requirements)

        def matches(obj: Obj) -> bool:
            if not labels.matches((obj.get("metadata") or {}).get("labels")):
                return False
            return not names or fields.matches(field_values(obj, names))

        return matches

    def list_objects(
        self,
        rtype: ResourceType,
        *,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int = 0,
        continue_token: str = "",
        at_rv: int | None = None,
    ) -> Obj:
        page = self.store.list_page(
            rtype.storage_key,
            namespace=namespace,
            predicate=self.predicate(rtype, labels, fields),
            limit=limit,
            continue_token=continue_token,
            at_rv=at_rv,
        )
        metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            metadata["continue"] = page.continue_token
            if labels.empty and not fields.requirements:
                # storage.PrepareContinueToken: a count is only given for a list without selectors.
                metadata["remainingItemCount"] = page.remaining
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.api_version,
            "metadata": metadata,
            "items": [self.to_view(rtype, o) for o in page.items],
        }

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        ns = self.store.get(namespaces().storage_key, "", namespace)
        return None if ns is None else dict((ns.get("metadata") or {}).get("labels") or {})

    # ---------------------------------------------------------------------------------------- decode

    def decode(
        self,
        rtype: ResourceType,
        body: Any,
        *,
        namespace: str | None,
        name: str | None,
        create: bool,
        field_validation: FieldValidation = "Warn",
    ) -> Decoded:
        """Turn a request body into the object admission sees: checked type, namespace and name, unknown
        fields dropped (or refused when Strict), defaults applied."""
        if not isinstance(body, dict):
            raise errors.bad_request(
                f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                f"{rtype.kind}: the body must be a JSON object"
            )
        obj = prune_nulls(copy.deepcopy(body))
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rtype.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rtype.api_version})"
            )
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f'{kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
            )
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        problem = decoding.decode_problem(self.schemas, rtype.schema, obj) or microtime.decode_problem(
            rtype.group, rtype.kind, obj
        )
        if problem:
            raise errors.bad_request(
                f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {problem}'
            )
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise errors.bad_request("metadata must be an object")
        if rtype.namespaced:
            body_ns = metadata.get("namespace")
            if body_ns and namespace and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            metadata["namespace"] = namespace or body_ns or ""
        else:
            metadata.pop("namespace", None)
        if name is not None:
            body_name = metadata.get("name")
            if body_name and body_name != name:
                raise errors.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                )
            metadata["name"] = name
        warnings: list[str] = []
        schema_errors: tuple[FieldError, ...] | None = None
        if self.schemas.has(rtype.schema):
            unknown, found = self.schemas.check(rtype.schema, obj)
            schema_errors = tuple(found)
            if unknown and field_validation == "Strict":
                listed = ", ".join(f'unknown field "{format_path(p)}"' for p in unknown)
                raise errors.bad_request(f"strict decoding error: {listed}")
            if field_validation == "Warn":
                warnings.extend(f'unknown field "{format_path(p)}"' for p in unknown)
            remove_paths(obj, unknown)
        apply_defaults(rtype, obj)
        if create:
            if rtype.namespaced:
                self._require_namespace(metadata["namespace"])
            if rtype.kind == "Pod":
                admit_pod_in_tree(obj)
                account = self.store.get(
                    builtin("", "serviceaccounts").storage_key,
                    metadata["namespace"],
                    obj["spec"]["serviceAccountName"],
                )
                mount_service_account_token(obj, account)
        return Decoded(obj, tuple(warnings), schema_errors)

    def _require_namespace(self, namespace: str) -> None:
        if self.store.get(namespaces().storage_key, "", namespace) is None:
            raise errors.not_found("", "namespaces", namespace)

    def _validated(
        self,
        rtype: ResourceType,
        obj: Obj,
        problems: list[FieldError],
        schema_errors: tuple[FieldError, ...] | None,
    ) -> None:
        """Schema check (after admission a webhook may have added junk: dropped silently, as decoding
        into the typed object would) plus the semantic errors; 422 when anything is wrong."""
        if schema_errors is not None:
            problems = list(schema_errors) + problems
        elif self.schemas.has(rtype.schema):
            unknown, found = self.schemas.check(rtype.schema, obj)
            remove_paths(obj, unknown)
            problems = found + problems
        if problems:
            name = (obj.get("metadata") or {}).get("name") or ""
            # Both event APIs validate the internal core Event: its errors name the core kind, no group.
            group = "" if rtype.kind == "Event" else rtype.group
            raise errors.invalid(group, rtype.kind, name, problems)

    # ---------------------------------------------------------------------------------------- create

    def create(
        self,
        rtype: ResourceType,
        obj: Obj,
        *,
        now: float,
        dry_run: bool = False,
        schema_errors: tuple[FieldError, ...] | None = None,
    ) -> Obj:
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        namespace = (metadata.get("namespace") or "") if rtype.namespaced else ""
        if rtype.namespaced:
            self._require_namespace(namespace)
        if metadata.get("resourceVersion"):
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        storage = rtype.storage_key
        if not metadata.get("name") and metadata.get("generateName"):
            for _ in range(_NAME_ATTEMPTS):
                metadata["name"] = generate_name(metadata["generateName"])
                if self.store.get(storage, namespace, metadata["name"]) is None:
                    break
        # Defaulted again after the mutating webhooks, as the real server does: the dispatcher applies a
        # webhook's patch and runs the scheme's defaulter on the result (k8s.io/apiserver, admission/plugin/
        # webhook/mutating/dispatcher.go: `o.GetObjectDefaulter().Default(newVersionedObject)`). Without it an
        # injected init container lacks imagePullPolicy and terminationMessagePath, and the next update of
        # the pod (which is defaulted) looks like a forbidden spec change.
        apply_defaults(rtype, obj)
        uid = str(uuid.uuid4())
        prepare_for_create(rtype, obj, now=now, uid=uid)
        self._validated(rtype, obj, validate_create(rtype, obj), schema_errors)
        name = metadata["name"]
        if self.store.get(storage, namespace, name) is not None:
            raise errors.already_exists(rtype.group, rtype.name, name)
        stored = self.from_view(rtype, obj)
        if dry_run:
            return obj
        created = self.to_view(rtype, self.store.put(storage, stored))
        if rtype.kind == "Namespace":
            self._add_default_service_account(name, now=now)
        return created

    def _add_default_service_account(self, namespace: str, *, now: float) -> None:
        """kube-controller-manager's serviceaccounts controller gives every namespace a `default`
        ServiceAccount (only if missing); done here at once, where the real one follows a moment later."""
        rtype = builtin("", "serviceaccounts")
        if self.store.get(rtype.storage_key, namespace, "default") is None:
            account = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace},
            }
            self.create(rtype, account, now=now)

    # ---------------------------------------------------------------------------------------- update

    def update(
        self,
        rtype: ResourceType,
        new: Obj,
        *,
        base: Obj,
        subresource: str = "",
        now: float,
        dry_run: bool = False,
        schema_errors: tuple[FieldError, ...] | None = None,
    ) -> Obj:
        """Write `new` over the stored object, which must still be `base` (what the caller read before
        admission; else StaleRead). A resourceVersion in `new` is the client's precondition."""
        metadata = new.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "", metadata.get("name") or ""
        current = self.store.get(rtype.storage_key, namespace, name)
        if current is None:
            raise errors.not_found(rtype.group, rtype.name, name)
        current_rv = current["metadata"]["resourceVersion"]
        if current_rv != (base.get("metadata") or {}).get("resourceVersion"):
            raise StaleRead()
        current_view = self.to_view(rtype, current)
        wanted_rv = metadata.get("resourceVersion")
        if wanted_rv and wanted_rv != current_rv:
            raise errors.conflict(rtype.group, rtype.name, name, errors.MODIFIED_CONFLICT)
        if not wanted_rv and rtype.kind == "Lease":
            # Leases do not allow unconditional updates (leader election relies on it). The real store
            # names the resource where the kind would be (generic/registry/store.go Update).
            raise errors.invalid(
                rtype.group,
                rtype.name,
                name,
                [
                    FieldError(
                        "FieldValueInvalid", "metadata.resourceVersion", "must be specified for an update", 0
                    )
                ],
            )
        wanted_uid = metadata.get("uid")
        if wanted_uid and wanted_uid != current["metadata"].get("uid"):
            raise errors.conflict(
                rtype.group,
                rtype.name,
                name,
                f"Precondition failed: UID in precondition: {wanted_uid}, UID in object meta: "
                f"{current['metadata'].get('uid')}",
            )
        result = prepare_for_update(rtype, new, current_view, subresource=subresource)
        self._validated(rtype, result, validate_update(rtype, result, current_view), schema_errors)
        result["metadata"]["resourceVersion"] = current_rv
        if prune_nulls(result) == prune_nulls(current_view):
            return current_view  # a no-op write does not bump the resourceVersion (as in the real server)
        if dry_run:
            return result
        stored = self.from_view(rtype, result)
        if self._finished_deleting(rtype, result):
            self._forget_deadline(rtype, namespace, name)
            return self.to_view(rtype, self.store.remove(rtype.storage_key, namespace, name, last=stored))
        return self.to_view(rtype, self.store.put(rtype.storage_key, stored))

    @staticmethod
    def _finished_deleting(rtype: ResourceType, obj: Obj) -> bool:
        metadata = obj.get("metadata") or {}
        if not metadata.get("deletionTimestamp") or metadata.get("finalizers"):
            return False
        if metadata.get("deletionGracePeriodSeconds", 0) == 0:
            return True
        if rtype.kind == "Pod":
            phase = (obj.get("status") or {}).get("phase")
            return not (obj.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed")
        return False

    # ---------------------------------------------------------------------------------------- delete

    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        options: Obj,
        *,
        now: float,
        dry_run: bool = False,
    ) -> tuple[int, Obj | Status]:
        """DELETE: returns (HTTP status, body): the object while deletion is pending (grace period or
        finalizers), else the deleted object (pods, namespaces) or a Success Status (the others)."""
        storage = rtype.storage_key
        current = self.store.get(storage, namespace, name)
        if current is None:
            raise errors.not_found(rtype.group, rtype.name, name)
        self.check_preconditions(rtype, current, options)
        if rtype.kind == "Namespace":
            return self._delete_namespace(current, dry_run=dry_run)
        grace = options.get("gracePeriodSeconds")
        if isinstance(grace, int) and grace < 0:
            grace = 1
        metadata = current["metadata"]
        finalizers = bool(metadata.get("finalizers"))
        updated = copy.deepcopy(current)
        new_meta = updated["metadata"]
        if metadata.get("deletionTimestamp"):
            pending = metadata.get("deletionGracePeriodSeconds") or 0
            if rtype.kind != "Pod" or pending == 0:
                if finalizers:
                    return 200, self.to_view(rtype, current)
                return self._remove(rtype, current, dry_run=dry_run)
            if grace is None or grace >= pending:
                return 200, self.to_view(rtype, current)
            deadline = (parse_rfc3339(str(metadata["deletionTimestamp"])) or now) - pending + grace
            new_meta["deletionTimestamp"] = format_rfc3339(deadline, digits=0)
            new_meta["deletionGracePeriodSeconds"] = grace
            return self._graceful_write(rtype, updated, grace=grace, deadline=deadline, dry_run=dry_run)
        if rtype.kind == "Pod":
            period = self._pod_grace(current, grace)
            new_meta["deletionTimestamp"] = format_rfc3339(now + period, digits=0)
            new_meta["deletionGracePeriodSeconds"] = period
            if new_meta.get("generation"):
                new_meta["generation"] += 1
            return self._graceful_write(rtype, updated, grace=period, deadline=now + period, dry_run=dry_run)
        if finalizers:
            new_meta["deletionTimestamp"] = format_rfc3339(now, digits=0)
            new_meta["deletionGracePeriodSeconds"] = 0
            if new_meta.get("generation"):
                new_meta["generation"] += 1
            if dry_run:
                return 200, self.to_view(rtype, updated)
            return 200, self.to_view(rtype, self.store.put(storage, updated))
        return self._remove(rtype, current, dry_run=dry_run)

    @staticmethod
    def _pod_grace(pod: Obj, requested: int | None) -> int:
        """podStrategy.CheckGracefulDelete."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        period = requested if requested is not None else spec.get("terminationGracePeriodSeconds") or 0
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            period = 0
        return 1 if period < 0 else period

    def _graceful_write(
        self, rtype: ResourceType, updated: Obj, *, grace: int, deadline: float, dry_run: bool
    ) -> tuple[int, Obj | Status]:
        if grace == 0 and not updated["metadata"].get("finalizers"):
            if not dry_run:
                # The store writes the deletionTimestamp first (watchers see MODIFIED), then deletes at once
                # (generic/registry/store.go Delete: updateForGracefulDeletionAndFinalizers, deleteImmediately).
                updated = self.store.put(rtype.storage_key, updated)
            return self._remove(rtype, updated, dry_run=dry_run)
        if dry_run:
            return 200, self.to_view(rtype, updated)
        stored = self.store.put(rtype.storage_key, updated)
        if grace > 0:
            namespace, name = stored["metadata"].get("namespace") or "", stored["metadata"]["name"]
            self._deadlines[(namespace, name)] = _Deadline(
                stored["metadata"]["uid"], deadline + self.config.graceful_deletion_slack
            )
            self.on_deadline()
        return 200, self.to_view(rtype, stored)

    def _remove(self, rtype: ResourceType, obj: Obj, *, dry_run: bool) -> tuple[int, Obj | Status]:
        metadata = obj["metadata"]
        namespace, name = metadata.get("namespace") or "", metadata["name"]
        final = obj if dry_run else self.store.remove(rtype.storage_key, namespace, name, last=obj)
        self._forget_deadline(rtype, namespace, name)
        if rtype.kind in ("Pod", "Namespace"):
            return 200, self.to_view(rtype, final)
        details: errors.StatusDetails = {"name": name}
        if rtype.group:
            details["group"] = rtype.group
        details["kind"] = rtype.name
        details["uid"] = metadata.get("uid", "")
        return 200, errors.success(code=None, details=details)

    def _forget_deadline(self, rtype: ResourceType, namespace: str, name: str) -> None:
        if rtype.kind == "Pod":
            self._deadlines.pop((namespace, name), None)

    @staticmethod
    def check_preconditions(rtype: ResourceType, current: Obj, options: Obj) -> None:
        preconditions = options.get("preconditions") or {}
        metadata = current["metadata"]
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != metadata.get("uid"):
            raise errors.conflict(
                rtype.group,
                rtype.kind,
                metadata["name"],
                f"the UID in the precondition ({uid}) does not match the UID in record ({metadata.get('uid')}). "
                "The object might have been deleted and then recreated",
            )
        if rv and rv != metadata.get("resourceVersion"):
            raise errors.conflict(
                rtype.group,
                rtype.kind,
                metadata["name"],
                f"the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record "
                f"({metadata.get('resourceVersion')}). The object might have been modified",
            )

    def _delete_namespace(self, ns: Obj, *, dry_run: bool) -> tuple[int, Obj | Status]:
        """The namespace controller's work, done at once: everything in the namespace goes, then the
        namespace (the emulator does not keep it Terminating)."""
        name = ns["metadata"]["name"]
        if name in PROTECTED_NAMESPACES:
            raise errors.forbidden("", "namespaces", name, "this namespace may not be deleted")
        if dry_run:
            return 200, ns
        for rtype in {r.storage_key: r for r in RESOURCE_TYPES if r.namespaced}.values():
            for obj in list(self.store.objects(rtype.storage_key, name)):
                self.store.remove(rtype.storage_key, name, obj["metadata"]["name"])
                self._forget_deadline(rtype, name, obj["metadata"]["name"])
        return 200, self.store.remove(namespaces().storage_key, "", name)

    # ------------------------------------------------------------------------------- graceful expiry

    def next_deadline(self) -> float | None:
        return min((d.at for d in self._deadlines.values()), default=None)

    def expire(self, *, now: float) -> int:
        """Finish graceful pod deletions whose deadline passed, as a kubelet's final grace-0 delete would."""
        finished = 0
        rtype = pods()
        for (namespace, name), deadline in list(self._deadlines.items()):
            if deadline.at > now:
                continue
            del self._deadlines[(namespace, name)]
            pod = self.store.get(rtype.storage_key, namespace, name)
            if pod is None or pod["metadata"].get("uid") != deadline.uid:
                continue
            logger.debug("graceful deletion of pod %s/%s expired; finishing it", namespace, name)
            self.delete(rtype, namespace, name, {"gracePeriodSeconds": 0}, now=now)
            finished += 1
        return finished
