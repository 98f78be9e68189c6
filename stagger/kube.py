"""Thin async Kubernetes REST helpers on aiohttp: where the API server is and how to authenticate
(kubeconfig through the official client's loader, or in-cluster service account), JSON requests, and
watch streams. No generated models: objects stay the JSON dicts the API serves, which is what the pure
parts of stagger read."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict
from urllib.parse import quote

import aiohttp

logger = logging.getLogger(__name__)

PatchType = Literal["merge", "strategic", "json"]
WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]

_PATCH_CONTENT_TYPES: dict[PatchType, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class WatchEvent(TypedDict):
    type: WatchEventType
    object: dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [base]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


PODS = Resource("", "v1", "pods", "Pod")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
EVENTS = Resource("", "v1", "events", "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
JOBS = Resource("batch", "v1", "jobs", "Job")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
TOKENREVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)

BY_KIND: dict[str, Resource] = {
    r.kind: r
    for r in (
        PODS,
        NODES,
        NAMESPACES,
        EVENTS,
        CONFIGMAPS,
        DEPLOYMENTS,
        REPLICASETS,
        DAEMONSETS,
        JOBS,
        PDBS,
        LEASES,
    )
}


class ApiError(Exception):
    """A non-2xx answer; `status` is the HTTP code, `reason` the Status reason (e.g. NotFound)."""

    def __init__(
        self, *, status: int, reason: str, message: str, body: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = dict(body or {})


class ConfigError(ValueError):
    """No usable cluster configuration; the message says what was looked at."""


@dataclass(frozen=True)
class ClusterConfig:
    """How to reach and authenticate to one API server."""

    server: str
    token: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    ca_data: str | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    verify: bool = True
    # Bound service account tokens rotate (about hourly); re-reading the file this often keeps us current.
    token_refresh_seconds: float = 60.0
    # Built once where the files it was built from are gone since (a kubeconfig's embedded key).
    tls: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if not self.verify:
            return False
        if self.tls is not None:
            return self.tls
        context = ssl.create_default_context(
            cafile=str(self.ca_file) if self.ca_file else None, cadata=self.ca_data or None
        )
        if self.client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key) if self.client_key else None)
        return context


def in_cluster_config(
    *, environ: Mapping[str, str] = os.environ, directory: Path = SERVICE_ACCOUNT_DIR
) -> ClusterConfig:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    token_file = directory / "token"
    if not host or not port or not token_file.exists():
        raise ConfigError(
            "not running in a cluster (no KUBERNETES_SERVICE_HOST/PORT or no service account token at "
            f"{token_file}); pass --kubeconfig"
        )
    host = f"[{host}]" if ":" in host else host
    ca = directory / "ca.crt"
    return ClusterConfig(
        server=f"https://{host}:{port}", token_file=token_file, ca_file=ca if ca.exists() else None
    )


# What `_plain_kubeconfig` reads itself; a kubeconfig with anything else goes to the official loader.
_PLAIN_CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify"}
)
_PLAIN_USER_KEYS = frozenset({"token", "tokenFile"})


def _named(entries: object, name: object) -> dict[str, Any] | None:
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return None


def _plain_kubeconfig(path: Path, *, context: str | None) -> ClusterConfig | None:
    """A kubeconfig whose context names a server, optionally a CA, and a bearer token (or none), read
    without the official client (about 20 MiB once imported); None for anything else, which the
    official loader then reads (client certificates, exec and auth-provider plugins, proxies...)."""
    import base64

    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    chosen = _named(doc.get("contexts"), context or doc.get("current-context"))
    spec = chosen.get("context") if chosen is not None else None
    if not isinstance(spec, dict):
        return None
    cluster_entry = _named(doc.get("clusters"), spec.get("cluster"))
    cluster = cluster_entry.get("cluster") if cluster_entry is not None else None
    user: object = {}
    if spec.get("user"):
        user_entry = _named(doc.get("users"), spec.get("user"))
        user = user_entry.get("user") if user_entry is not None else None
    if not isinstance(cluster, dict) or not isinstance(user, dict):
        return None
    if not set(cluster) <= _PLAIN_CLUSTER_KEYS or not set(user) <= _PLAIN_USER_KEYS:
        return None
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        return None
    try:
        ca_data = (
            base64.b64decode(cluster["certificate-authority-data"]).decode()
            if cluster.get("certificate-authority-data")
            else None
        )
    except (ValueError, TypeError):
        return None
    ca_file = cluster.get("certificate-authority")
    token_file = user.get("tokenFile")
    return ClusterConfig(
        server=server.rstrip("/"),
        token=str(user["token"]) if user.get("token") else None,
        token_file=path.parent / str(token_file) if token_file and not user.get("token") else None,
        ca_file=path.parent / str(ca_file) if ca_file else None,
        ca_data=ca_data,
        verify=not cluster.get("insecure-skip-tls-verify", False),
    )


def kubeconfig_config(path: Path, *, context: str | None = None) -> ClusterConfig:
    """Reads a kubeconfig: a plain one (server, CA, token) directly, any other with the official client's
    loader (it knows every auth form a kubeconfig can hold)."""
    plain = _plain_kubeconfig(path, context=context) if path.exists() else None
    return plain if plain is not None else official_kubeconfig_config(path, context=context)


def official_kubeconfig_config(path: Path, *, context: str | None = None) -> ClusterConfig:
    """A kubeconfig read by the official client's loader."""
    # Imported here: the official client is heavy (about 20 MiB) and only its kubeconfig loader is needed;
    # in a pod lockd reads its service account directly and never imports it.
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
    except ImportError as err:
        raise ConfigError(
            "reading a kubeconfig needs the official kubernetes client: pip install 'stagger[kubeconfig]'"
        ) from err

    if not path.exists():
        raise ConfigError(f"kubeconfig {path} does not exist")
    configuration = k8s_client.Configuration()
    # The loader writes a kubeconfig's embedded CA, certificate and key to files, by default in /tmp,
    # removed only when the interpreter exits normally: a killed lockd or controller left its client key
    # behind (found in /tmp after the real-control-plane tests). They go in a private folder instead,
    # read once into the TLS context, and the folder is removed before this returns.
    with tempfile.TemporaryDirectory(prefix="stagger-kubeconfig-") as private:
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(path),
                context=context,
                client_configuration=configuration,
                temp_file_path=private,
            )
        except Exception as err:  # the loader raises a variety of types for a bad file
            raise ConfigError(f"kubeconfig {path}: {err}") from err
        authorization = (configuration.api_key or {}).get("authorization") or configuration.api_key.get(
            "BearerToken"
        )
        token = None
        if authorization:
            token = str(authorization).removeprefix("Bearer ").strip()
        loaded = ClusterConfig(
            server=str(configuration.host).rstrip("/"),
            token=token,
            ca_file=Path(configuration.ssl_ca_cert) if configuration.ssl_ca_cert else None,
            client_cert=Path(configuration.cert_file) if configuration.cert_file else None,
            client_key=Path(configuration.key_file) if configuration.key_file else None,
            verify=bool(configuration.verify_ssl),
        )
        written = [
            each for each in (loaded.ca_file, loaded.client_cert, loaded.client_key) if each is not None
        ]
        if not any(each.is_relative_to(private) for each in written):
            return loaded  # files of the user's, named by the kubeconfig: read as usual
        try:
            tls = loaded.ssl_context()
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(f"kubeconfig {path}: cannot use its certificates: {err}") from err
    if not isinstance(tls, ssl.SSLContext):  # plain HTTP, or verification off: no TLS context to keep
        return dataclasses.replace(loaded, ca_file=None, client_cert=None, client_key=None)
    return dataclasses.replace(loaded, ca_file=None, client_cert=None, client_key=None, tls=tls)


def load_config(*, kubeconfig: Path | None) -> ClusterConfig:
    return kubeconfig_config(kubeconfig) if kubeconfig is not None else in_cluster_config()


@dataclass
class _Token:
    config: ClusterConfig
    value: str | None = None
    read_at: float = field(default=-1e18)

    def get(self) -> str | None:
        if self.config.token_file is None:
            return self.config.token
        now = time.monotonic()
        if now - self.read_at >= self.config.token_refresh_seconds:
            try:
                self.value = self.config.token_file.read_text().strip()
                self.read_at = now
            except OSError as err:
                logger.warning("cannot read service account token %s: %s", self.config.token_file, err)
        return self.value


class RestClient:
    """JSON requests against one API server; the caller owns the `aiohttp.ClientSession`."""

    def __init__(
        self, *, session: aiohttp.ClientSession, config: ClusterConfig, request_timeout: float = 30.0
    ) -> None:
        self._session = session
        self._base = config.server.rstrip("/")
        self._ssl = config.ssl_context()
        self._token = _Token(config)
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)

    @property
    def base_url(self) -> str:
        return self._base

    def _headers(self, *, content_type: str | None, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept}
        token = self._token.get()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        """A JSON answer; `accept` for a JSON document of another media type (the API server answers
        `/openid/v1/jwks` only as `application/jwk-set+json`, else 406)."""
        data = None if body is None else json.dumps(body)
        async with self._session.request(
            method,
            self._base + path,
            params=params,
            data=data,
            headers=self._headers(content_type=content_type if data is not None else None, accept=accept),
            timeout=self._timeout,
            ssl=self._ssl,
        ) as resp:
            text = await resp.text()
            parsed = _parse_json(text)
            if resp.status >= 400:
                raise ApiError(
                    status=resp.status,
                    reason=str(parsed.get("reason") or resp.reason or ""),
                    message=str(parsed.get("message") or text[:300]),
                    body=parsed,
                )
            return parsed

    async def get(self, resource: Resource, *, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self.request("GET", resource.path(namespace=namespace, name=name))

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        """One list request; with `limit`, one page of at most that many items, and `metadata.continue`
        in the answer names the next page (empty on the last one)."""
        params = _selectors(label_selector=label_selector, field_selector=field_selector)
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        return await self.request("GET", resource.path(namespace=namespace), params=params)

    async def create(
        self, resource: Resource, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.request("POST", resource.path(namespace=namespace), body=body)

    async def patch(
        self,
        resource: Resource,
        *,
        name: str,
        patch: object,
        namespace: str | None = None,
        subresource: str | None = None,
        patch_type: PatchType = "merge",
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH",
            resource.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        resource: Resource,
        *,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation: Literal["Background", "Foreground", "Orphan"] | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation is not None:
            options["propagationPolicy"] = propagation
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        return await self.request("DELETE", resource.path(namespace=namespace, name=name), body=options)

    async def evict(self, *, namespace: str, name: str, uid: str | None = None) -> dict[str, Any]:
        """POST pods/NAME/eviction. With `uid`, only that pod: another of the same name gets 409 Conflict."""
        eviction: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid is not None:
            eviction["deleteOptions"] = {"preconditions": {"uid": uid}}
        return await self.request(
            "POST", PODS.path(namespace=namespace, name=name, subresource="eviction"), body=eviction
        )

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str,
        timeout_seconds: int,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Watch events from `resource_version`; ends when the server closes the stream.

        A `410 Gone` comes either as an HTTP error or as an `ERROR` event: both raise `ApiError`.
        """
        params = _selectors(label_selector=label_selector, field_selector=field_selector)
        params.update(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(timeout_seconds),
            }
        )
        # The server ends the stream after timeout_seconds; the client bound is only a safety net.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_seconds + 30)
        async with self._session.get(
            self._base + resource.path(namespace=namespace),
            params=params,
            timeout=timeout,
            headers=self._headers(content_type=None),
            ssl=self._ssl,
        ) as resp:
            if resp.status >= 400:
                parsed = _parse_json(await resp.text())
                raise ApiError(
                    status=resp.status,
                    reason=str(parsed.get("reason") or resp.reason or ""),
                    message=str(parsed.get("message") or ""),
                    body=parsed,
                )
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = _parse_event(line)
                    if event is not None:
                        yield event
            event = _parse_event(buffer)
            if event is not None:
                yield event


def _parse_event(line: bytes) -> WatchEvent | None:
    line = line.strip()
    if not line:
        return None
    raw = json.loads(line)
    obj = raw.get("object") or {}
    if raw.get("type") == "ERROR":
        raise ApiError(
            status=int(obj.get("code") or 500),
            reason=str(obj.get("reason") or ""),
            message=str(obj.get("message") or ""),
            body=obj,
        )
    return WatchEvent(type=raw["type"], object=obj)


def _parse_json(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _selectors(*, label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params
