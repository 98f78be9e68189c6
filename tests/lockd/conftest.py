"""Fixtures: a real lockd app served by aiohttp's test server on loopback, with its load read from a file."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from lockd import app as lockd_app
from lockd import daemon, server
from lockd.settings import Settings
from stagger.options import grouped, regrouped


@dataclass
class Lockd:
    client: TestClient
    app: web.Application
    policy_path: Path
    load_path: Path
    # Release tokens of the grants this test was given, by pod name.
    tokens: dict[str, str] = field(default_factory=dict)

    def set_load(self, *, cpu: float | None = None, io: float | None = None) -> None:
        self.load_path.write_text(json.dumps({"cpuPercent": cpu, "ioPercent": io}))

    async def status(self) -> dict:
        response = await self.client.get("/status")
        assert response.status == 200
        return await response.json()

    async def lock(self, name: str, *, namespace: str = "default", **extra: str):
        response = await self.client.get("/v1/lock", params={"namespace": namespace, "name": name, **extra})
        if response.status == 200 and "X-Stagger-Release-Token" in response.headers:
            self.tokens[name] = response.headers["X-Stagger-Release-Token"]
        return response

    async def release(self, name: str, *, namespace: str = "default", token: str | None = None):
        """DELETE with the release token this test was given for `name` (or `token`)."""
        token = self.tokens.get(name, "") if token is None else token
        return await self.client.delete(
            "/v1/lock",
            params={"namespace": namespace, "name": name},
            headers={"X-Stagger-Release-Token": token},
        )


StartLockd = Callable[..., Awaitable[Lockd]]


class LockdTestServer(TestServer):
    """aiohttp's test server, serving through lockd's own runner (JSON errors for malformed HTTP, handler
    cancellation, the header timeout) so the tests see what a real lockd serves."""

    def __init__(self, app: web.Application, settings: Settings) -> None:
        super().__init__(app, host="127.0.0.1")
        self.settings = settings

    async def _make_runner(self, **kwargs: object) -> server.Runner:
        return server.make_runner(
            self.app, settings=self.settings.server, metrics=self.app[lockd_app.METRICS], access_log=None
        )


@pytest.fixture
def start_lockd(aiohttp_client, tmp_path: Path) -> StartLockd:
    async def start(policy_yaml: str | None = None, **overrides: object) -> Lockd:
        policy_path = tmp_path / "policies.yaml"
        load_path = tmp_path / "load.json"
        load_path.write_text(json.dumps({"cpuPercent": 5.0, "ioPercent": 0.0}))
        settings = grouped(
            Settings,
            {
                "standalone": True,
                "node_name": "test-node",
                "cores": 4,
                "load_file": load_path,
                "sample_interval": 0.05,
                "reload_interval": 0.1,
            },
        )
        if policy_yaml is not None:
            policy_path.write_text(policy_yaml)
            settings = regrouped(settings, policies=policy_path)
        settings = regrouped(settings, **overrides)
        app = daemon.make_app(settings)
        client = await aiohttp_client(LockdTestServer(app, settings))
        return Lockd(client=client, app=app, policy_path=policy_path, load_path=load_path)

    return start
