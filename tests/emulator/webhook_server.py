"""A real HTTPS admission webhook for the tests (aiohttp + trustme certificates): each path answers with
a programmable behaviour and every AdmissionReview it receives is recorded."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trustme
from aiohttp import web

Review = dict[str, Any]
Behaviour = Callable[[Review], dict[str, Any]]


def allow(**extra: Any) -> Behaviour:
    return lambda review: {"allowed": True, **extra}


def patch(operations: list[dict[str, Any]], *, warnings: list[str] | None = None) -> Behaviour:
    encoded = base64.b64encode(json.dumps(operations).encode()).decode()
    extra: dict[str, Any] = {"patchType": "JSONPatch", "patch": encoded}
    if warnings:
        extra["warnings"] = warnings
    return allow(**extra)


def deny(status: dict[str, Any] | None = None) -> Behaviour:
    return lambda review: {"allowed": False, **({"status": status} if status is not None else {})}


@dataclass
class WebhookServer:
    ca: trustme.CA
    port: int = 0
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    reviews: dict[str, list[Review]] = field(default_factory=dict)
    queries: dict[str, list[str]] = field(default_factory=dict)
    hang: asyncio.Event = field(default_factory=asyncio.Event)  # /hang waits for this (never set by tests)
    bad_uid: bool = False
    # /drop-reused closes a kept-alive connection when a second request arrives on it, unanswered (a server
    # closing an idle connection just as the client sends on it); /drop closes every connection so.
    served: set[int] = field(default_factory=set)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem.bytes()).decode()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"

    def calls(self, path: str) -> list[Review]:
        return self.reviews.get(path, [])

    async def handle(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        connection = id(request.transport)
        if path == "drop" or (path == "drop-reused" and connection in self.served):
            self.dropped[path] = self.dropped.get(path, 0) + 1
            assert request.transport is not None
            request.transport.abort()
            raise web.HTTPServiceUnavailable()  # never sent: the connection is gone
        self.served.add(connection)
        review = await request.json()
        self.reviews.setdefault(path, []).append(review)
        self.queries.setdefault(path, []).append(request.query_string)
        if path == "hang":
            async with asyncio.timeout(30):  # bounded; the API server gives up long before
                await self.hang.wait()
        behaviour = self.behaviours.get(path, allow())
        uid = "wrong" if self.bad_uid else review["request"]["uid"]
        response = {"uid": uid, **behaviour(review)}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


@asynccontextmanager
async def webhook_server(ca: trustme.CA, *identities: str) -> AsyncIterator[WebhookServer]:
    server = WebhookServer(ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(identities or ("127.0.0.1",))).configure_cert(context)
    app = web.Application()
    app.router.add_post("/{path}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server.port = int(runner.addresses[0][1])
    try:
        yield server
    finally:
        server.hang.set()
        await runner.cleanup()


def configuration(name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def hook(
    name: str,
    client_config: dict[str, Any],
    *,
    operations: tuple[str, ...] = ("CREATE",),
    resources: tuple[str, ...] = ("pods",),
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "operations": list(operations),
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": list(resources),
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **extra,
    }
