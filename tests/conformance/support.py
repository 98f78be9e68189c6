"""What the conformance tests share: `Conn`, raw HTTP to one backend (status and parsed body, never an
exception for an error status), and small manifest builders."""

from __future__ import annotations

import asyncio
import inspect
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from sim.emulator.resources import KUBERNETES_VERSION

T = TypeVar("T")

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PAUSE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet runs on either backend
NO_SCHEDULER = "stagger-conformance-none"
EMULATED_MINOR = int(KUBERNETES_VERSION[1])
"""The Kubernetes minor whose answers the emulator gives where minors differ (v1.37, the test bed's default
release). A real server of an older minor (`make test-real KUBE_VERSION=1.34`) is held to its own minor's
answers there: the tests that differ branch on `kube.minor`."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the parsed JSON, or the text when it is not JSON

    @property
    def causes(self) -> list[tuple[str, str, str]]:
        """(reason, field, message) of each cause of a Status."""
        details = (self.body.get("details") or {}) if isinstance(self.body, dict) else {}
        return [
            (c.get("reason", ""), c.get("field", ""), c.get("message", "")) for c in details.get("causes", [])
        ]

    def status_fields(self) -> dict[str, Any]:
        """A Status without what only says where it came from, for whole-answer comparisons."""
        assert isinstance(self.body, dict) and self.body.get("kind") == "Status", self.body
        return {k: v for k, v in self.body.items() if k != "metadata"}


@dataclass
class Conn:
    backend: str  # "emulator" or "real"
    session: aiohttp.ClientSession
    base: str
    ssl: ssl.SSLContext | bool
    ns: str
    minor: int = EMULATED_MINOR  # the real server's, from its /version

    @property
    def real(self) -> bool:
        return self.backend == "real"

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Reply:
        data = None if body is None else json.dumps(body)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method,
            self.base + path,
            params=params,
            data=data,
            headers=headers,
            ssl=self.ssl,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            text = await response.text()
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        return Reply(response.status, parsed)

    async def get(self, path: str, *, params: Mapping[str, str] | None = None) -> Reply:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any, *, params: Mapping[str, str] | None = None) -> Reply:
        return await self.request("POST", path, body, params=params)

    async def put(self, path: str, body: Any) -> Reply:
        return await self.request("PUT", path, body)

    async def patch(self, path: str, body: Any, content_type: str = MERGE) -> Reply:
        return await self.request("PATCH", path, body, content_type=content_type)

    async def delete(self, path: str, body: Any = None) -> Reply:
        return await self.request("DELETE", path, body)

    async def ok(self, path: str) -> Any:
        """The object at `path`, or None when the GET is not a 200."""
        reply = await self.get(path)
        return reply.body if reply.status == 200 else None

    async def created(self, path: str, body: Any) -> Any:
        """POST that must answer 201; returns the created object."""
        reply = await self.post(path, body)
        assert reply.status == 201, (self.backend, reply.body)
        return reply.body

    async def eventually(
        self,
        probe: Callable[[], Awaitable[T | None] | T | None],
        *,
        within: float = 60.0,
        what: str,
        poll: float = 0.2,
    ) -> T:
        """Polls until `probe` returns something true (the real controllers work in their own time; the
        emulator's are synchronous, so there the first probe already succeeds)."""
        deadline = time.monotonic() + within
        while True:
            value = probe()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.backend}: timed out after {within:g}s waiting for {what}")
            await asyncio.sleep(poll)

    # --- paths in the test's namespace ---------------------------------------------------------------

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    @property
    def events(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/events"

    @property
    def new_events(self) -> str:
        return f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events"

    @property
    def leases(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases"

    @property
    def jobs(self) -> str:
        return f"/apis/batch/v1/namespaces/{self.ns}/jobs"

    @property
    def deployments(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/deployments"

    @property
    def replicasets(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/replicasets"

    @property
    def pdbs(self) -> str:
        return f"/apis/policy/v1/namespaces/{self.ns}/poddisruptionbudgets"

    @property
    def configmaps(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/configmaps"


def pod(name: str, *, labels: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal valid pod manifest. Its scheduler is one that does not exist, so that the real scheduler
    leaves it alone (no Unschedulable condition written behind the test's back)."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": PAUSE}], "schedulerName": NO_SCHEDULER, **spec},
    }


def invalid_message(kind: str, name: str, *errors: str) -> str:
    """The message of a 422 Invalid Status: one error as is, several in brackets."""
    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{kind} "{name}" is invalid: {listed}'
