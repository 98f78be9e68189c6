"""Mutating admission webhooks, as k8s.io/apiserver/pkg/admission/plugin/webhook does them.

Pure parts: which webhooks a request matches (rules, scope, matchPolicy, namespaceSelector,
objectSelector; not matchConditions, see `hook_matches`), the AdmissionReview v1 request, and reading the response (uid check, JSONPatch,
warnings, denial Status). The shell: `WebhookDispatcher` calls the webhooks over HTTPS with the app's
one ClientSession, verifying the configuration's caBundle, in the real order (configurations by
name, webhooks in order) with `reinvocationPolicy: IfNeeded` re-invoking once.

Service references: the emulator has no Services, so `clientConfig.service` {namespace, name, port}
is looked up as "namespace/name:port" in a resolver mapping to "host:port"; the TLS server name
stays `name.namespace.svc`, so the webhook's certificate is verified as a real server would.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import ssl
import time
import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import jsonpatch

from sim.emulator import errors
from sim.emulator.errors import ApiError
from sim.emulator.resources import ResourceType
from sim.emulator.selectors import SelectorError, selector_from_object
from stagger.objects import Obj

logger = logging.getLogger(__name__)

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
_NOT_INTERCEPTED = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]


@dataclass(frozen=True)
class Attributes:
    """One admission request: what is done (operation, resource, subresource) to which object."""

    operation: Operation
    rtype: ResourceType
    subresource: str
    kind: GroupVersionKind  # the kind of `obj` (policy/v1 Eviction for pods/eviction)
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    options: Obj | None
    dry_run: bool
    user: UserInfo


@dataclass(frozen=True)
class Webhook:
    configuration: str
    spec: Obj

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def uid(self) -> str:
        return f"{self.configuration}/{self.name}"


class CallFailed(Exception):
    """The webhook could not be called or answered nonsense: failurePolicy decides (ErrCallingWebhook)."""


class _ClosedConnection(Exception):
    """A kept-alive connection the webhook server had closed: the call is sent once more."""


# ------------------------------------------------------------------------------------------------ matching


def webhooks_in_order(configurations: list[Obj]) -> list[Webhook]:
    ordered = sorted(configurations, key=lambda c: (c.get("metadata") or {}).get("name", ""))
    return [
        Webhook((c.get("metadata") or {}).get("name", ""), hook)
        for c in ordered
        for hook in c.get("webhooks") or []
    ]


def _rule_matches(rule: Obj, attrs: Attributes, *, exact: bool) -> bool:
    operations = rule.get("operations") or []
    if "*" not in operations and attrs.operation not in operations:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.rtype.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    # Equivalent matching: the emulator serves one version per resource, so any version rule of the
    # same group/resource is equivalent to it.
    if exact and "*" not in versions and attrs.rtype.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and attrs.rtype.namespaced) or (
        scope == "Namespaced" and not attrs.rtype.namespaced
    ):
        return False
    for entry in rule.get("resources") or []:
        resource, _, sub = str(entry).partition("/")
        if resource in ("*", attrs.rtype.name) and sub in ("*", attrs.subresource):
            return True
    return False


def hook_matches(hook: Obj, attrs: Attributes, *, namespace_labels: Mapping[str, str] | None) -> bool:
    """Rules, then namespaceSelector, then objectSelector (object or old object labels).
    Raises ApiError for a selector the real server would fail on.

    `matchConditions` (CEL) are not evaluated: a webhook is called as if each held. The real server skips
    the call when one is false (Kubernetes docs, "Dynamic Admission Control", "Matching requests:
    matchConditions"); here the webhook is sent more, which is right for a webhook that checks what its
    conditions say itself, as stagger's controller does (a Job's pod template label, a pod's
    schedulerName). Not a CEL evaluator."""
    if attrs.rtype.name in _NOT_INTERCEPTED:
        return False
    exact = hook.get("matchPolicy") == "Exact"
    if not any(_rule_matches(rule, attrs, exact=exact) for rule in hook.get("rules") or []):
        return False
    try:
        namespace_selector = selector_from_object(hook.get("namespaceSelector"), nil_selects=True)
        object_selector = selector_from_object(hook.get("objectSelector"), nil_selects=True)
    except SelectorError as err:
        raise errors.internal_error(f"invalid label selector: {err}") from err
    if not namespace_selector.empty:
        if attrs.rtype.name == "namespaces":
            labels = ((attrs.obj or attrs.old or {}).get("metadata") or {}).get("labels") or {}
            if not namespace_selector.matches(labels):
                return False
        elif attrs.rtype.namespaced and not namespace_selector.matches(namespace_labels or {}):
            return False
    if not object_selector.empty:
        # As in the real server: both the object and the old object sent to the webhook are tried (for
        # pods/eviction the object is the Eviction, whose labels rarely match).
        candidates = [o for o in (attrs.obj, attrs.old) if o is not None]
        if not any(object_selector.matches((o.get("metadata") or {}).get("labels")) for o in candidates):
            return False
    return True


# ---------------------------------------------------------------------------------------- review wire format


def review_request(attrs: Attributes, *, uid: str, obj: Obj | None) -> Obj:
    resource = {"group": attrs.rtype.group, "version": attrs.rtype.version, "resource": attrs.rtype.name}
    request: Obj = {
        "uid": uid,
        "kind": dict(attrs.kind),
        "resource": resource,
        "requestKind": dict(attrs.kind),
        "requestResource": dict(resource),
    }
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    request.update(
        {
            "operation": attrs.operation,
            "userInfo": dict(attrs.user),
            "object": obj,
            "oldObject": attrs.old,
            "dryRun": attrs.dry_run,
            "options": attrs.options,
        }
    )
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    patch: list[Obj] | None
    warnings: tuple[str, ...]
    status: Obj | None


def read_response(body: Any, *, uid: str) -> Verdict:
    """webhookrequest.VerifyAdmissionResponse; CallFailed for a malformed answer."""
    if not isinstance(body, dict):
        raise CallFailed("received invalid webhook response: the response is not a JSON object")
    if body.get("apiVersion") != "admission.k8s.io/v1" or body.get("kind") != "AdmissionReview":
        raise CallFailed(
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, "
            f"Kind=AdmissionReview, got {body.get('apiVersion')}, Kind={body.get('kind')}"
        )
    response = body.get("response")
    if not isinstance(response, dict):
        raise CallFailed("received invalid webhook response: response is missing")
    if response.get("uid") != uid:
        raise CallFailed(
            f'received invalid webhook response: expected response.uid="{uid}", got "{response.get("uid")}"'
        )
    patch: list[Obj] | None = None
    if response.get("patch"):
        if response.get("patchType") != "JSONPatch":
            raise CallFailed(f'unsupported patch type "{response.get("patchType", "")}"')
        try:
            decoded = json.loads(base64.b64decode(response["patch"], validate=True))
        except (binascii.Error, ValueError) as err:
            raise CallFailed(f"received undecodable patch in webhook response: {err}") from err
        if not isinstance(decoded, list):
            raise CallFailed("received undecodable patch in webhook response: not a JSON patch array")
        patch = decoded
    warnings = tuple(str(w) for w in response.get("warnings") or [])
    return Verdict(bool(response.get("allowed")), patch, warnings, response.get("status"))


def denial(webhook_name: str, attrs: Attributes, result: Obj | None) -> ApiError:
    """webhookerrors.ToStatusErr: the webhook's Status, prefixed the way the real server words it."""
    result = dict(result or {})
    code = int(result.get("code") or 403)
    message = f'admission webhook "{webhook_name}" denied the request'
    if result.get("message"):
        message += f": {result['message']}"
    elif result.get("reason"):
        message += f": {result['reason']}"
    else:
        message += " without explanation"
    details: errors.StatusDetails
    if isinstance(result.get("details"), dict):
        details = result["details"]
    elif code == 500:
        details = {"causes": [{"message": message}]}
    else:
        details = {"name": attrs.name or "Unknown"}
        if attrs.rtype.group:
            details["group"] = attrs.rtype.group
        details["kind"] = attrs.rtype.name
    if code == 500:
        prefix = "Internal error occurred"
    else:
        prefix = f'{errors.qualified(attrs.rtype.group, attrs.rtype.name)} "{attrs.name or "Unknown"}" is forbidden'
    status: errors.Status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"{prefix}: {message}",
        "reason": result.get("reason") or ("InternalError" if code == 500 else "Forbidden"),
        "details": details,
        "code": code,
    }
    return ApiError(status)


# -------------------------------------------------------------------------------------------------- shell


class WebhookDispatcher:
    """Calls the matching webhooks of the stored MutatingWebhookConfigurations for one request."""

    def __init__(
        self, *, session: aiohttp.ClientSession, service_endpoints: MutableMapping[str, str]
    ) -> None:
        self._session = session
        self.service_endpoints = service_endpoints
        self._ssl: dict[str, ssl.SSLContext] = {}

    def _ssl_context(self, ca_bundle: str) -> ssl.SSLContext:
        context = self._ssl.get(ca_bundle)
        if context is None:
            if ca_bundle:
                pem = base64.b64decode(ca_bundle).decode()
                context = ssl.create_default_context(cadata=pem)
            else:
                context = ssl.create_default_context()
            self._ssl[ca_bundle] = context
        return context

    def _target(self, hook: Obj, timeout: int) -> tuple[str, str, str | None]:
        """(URL to connect to, URL as the real server would name it, TLS server name override)."""
        client = hook.get("clientConfig") or {}
        query = f"timeout={timeout}s"
        if client.get("url"):
            parts = urlsplit(str(client["url"]))
            url = urlunsplit(
                (
                    parts.scheme,
                    parts.netloc,
                    parts.path,
                    (parts.query + "&" if parts.query else "") + query,
                    "",
                )
            )
            return url, url, None
        service = client.get("service") or {}
        host = f"{service.get('name')}.{service.get('namespace')}.svc"
        port = int(service.get("port") or 443)
        path = service.get("path") or ""
        shown = f"https://{host}:{port}{path}?{query}"
        key = f"{service.get('namespace')}/{service.get('name')}:{port}"
        address = self.service_endpoints.get(key)
        if address is None:
            raise CallFailed(
                f'failed to call webhook: Post "{shown}": service "{key}" has no endpoint (set one with the '
                "apiserver's service resolver)"
            )
        return f"https://{address}{path}?{query}", shown, host

    async def _call(self, hook: Obj, review: Obj) -> Any:
        """One webhook call, sent again once when a kept-alive connection turned out closed before the
        request was written. Go's http.Transport does the same for the real server's webhook client
        (net/http transport.go, shouldRetryRequest: a reused connection that fails with nothing written,
        or that the server closed while idle, is retried on a new one, POST included), so a webhook
        server closing an idle connection just as a request is sent on it is not a call failure there.
        aiohttp raises that as "Can not write request body" or "Server disconnected"."""
        try:
            return await self._call_once(hook, review)
        except _ClosedConnection:
            logger.info("webhook connection closed by the server before the request was sent; sending again")
        try:
            return await self._call_once(hook, review)
        except _ClosedConnection as err:
            raise CallFailed(str(err)) from err.__cause__

    async def _call_once(self, hook: Obj, review: Obj) -> Any:
        timeout = int(hook.get("timeoutSeconds") or 10)
        url, shown, server_name = self._target(hook, timeout)
        context = self._ssl_context(str((hook.get("clientConfig") or {}).get("caBundle") or ""))
        try:
            async with self._session.post(
                url,
                json=review,
                ssl=context,
                server_hostname=server_name,
                timeout=aiohttp.ClientTimeout(total=timeout),
                headers={"Accept": "application/json"},
            ) as response:
                text = await response.text()
                if response.status != 200:
                    raise CallFailed(
                        f'failed to call webhook: an error on the server ("{text[:200]}") has prevented the request '
                        "from succeeding"
                    )
                try:
                    return json.loads(text)
                except ValueError as err:
                    raise CallFailed(f"failed to call webhook: invalid JSON in the response: {err}") from err
        except TimeoutError as err:
            raise CallFailed(f'failed to call webhook: Post "{shown}": context deadline exceeded') from err
        except aiohttp.ClientConnectorCertificateError as err:
            raise CallFailed(
                f'failed to call webhook: Post "{shown}": tls: failed to verify certificate: {err.certificate_error}'
            ) from err
        except aiohttp.ClientConnectorError as err:
            raise CallFailed(
                f'failed to call webhook: Post "{shown}": dial tcp {err.host}:{err.port}: connect: '
                f"{err.os_error.strerror or err.os_error}"
            ) from err
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
            # (A connection that could not be made is ClientConnectorError, handled above: never retried.)
            raise _ClosedConnection(f'failed to call webhook: Post "{shown}": {err}') from err
        except aiohttp.ClientError as err:
            raise CallFailed(f'failed to call webhook: Post "{shown}": {err}') from err

    async def admit(
        self, attrs: Attributes, *, configurations: list[Obj], namespace_labels: Mapping[str, str] | None
    ) -> tuple[Obj | None, tuple[str, ...]]:
        """Run the mutating webhooks; returns the (possibly patched) object and the warnings, or raises
        the ApiError the real server answers (denial, or a Fail-policy call failure)."""
        hooks = webhooks_in_order(configurations)
        obj = attrs.obj
        warnings: list[str] = []
        previously_invoked: set[str] = set()
        to_reinvoke: set[str] = set()
        for round_ in (0, 1):
            if round_ == 1 and not to_reinvoke:
                break
            for hook in hooks:
                if round_ == 1 and hook.uid not in to_reinvoke:
                    continue
                current = dataclasses.replace(attrs, obj=obj)
                if not hook_matches(hook.spec, current, namespace_labels=namespace_labels):
                    continue
                patched = await self._invoke(hook, current, warnings)
                changed = patched is not None and patched != obj
                if changed:
                    obj = patched
                    if round_ == 0:
                        to_reinvoke |= previously_invoked
                        previously_invoked = set()
                if round_ == 0 and hook.spec.get("reinvocationPolicy") == "IfNeeded":
                    previously_invoked.add(hook.uid)
        return obj, tuple(warnings)

    async def _invoke(self, hook: Webhook, attrs: Attributes, warnings: list[str]) -> Obj | None:
        """Call one webhook; the patched object, None when it did not patch. Failure policy applied."""
        if attrs.dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        uid = str(uuid.uuid4())
        started = time.monotonic()
        review = review_request(attrs, uid=uid, obj=attrs.obj)
        ignore = hook.spec.get("failurePolicy") == "Ignore"
        outcome = "allowed"
        try:
            verdict = read_response(await self._call(hook.spec, review), uid=uid)
            warnings.extend(verdict.warnings)
            if not verdict.allowed:
                outcome = "denied"
                raise denial(hook.name, attrs, verdict.status)
            if not verdict.patch:
                return None
            if attrs.obj is None:
                raise errors.internal_error(
                    f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for '
                    "this operation"
                )
            try:
                patched = jsonpatch.apply_patch(attrs.obj, verdict.patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                raise errors.internal_error(str(err)) from err
            outcome = "patched"
            if not isinstance(patched, dict):
                raise errors.internal_error(
                    f'admission webhook "{hook.name}" patched the object into a non-object'
                )
            return patched
        except CallFailed as err:
            message = f'failed calling webhook "{hook.name}": {err}'
            outcome = "failed open" if ignore else "failed closed"
            if ignore:
                logger.warning("Failed calling webhook, failing open %s: %s", hook.name, message)
                return None
            raise errors.internal_error(message) from err
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            logger.info(
                "admission webhook %s %s %s%s %s/%s: %s in %.0f ms",
                hook.name,
                attrs.operation,
                attrs.rtype.name,
                f"/{attrs.subresource}" if attrs.subresource else "",
                attrs.namespace,
                attrs.name,
                outcome,
                (time.monotonic() - started) * 1000,
            )
