"""The controller process with group pacing on for the tests: `python -m webhook` with a kubeconfig for the
API emulator, a token file and a policy file, and a small client of its grant API and `/status`; and the
two together on a fresh emulator (`controller_on_emulator`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from sim.emulator.server import ApiServer
from sim.kubeconfig import write_kubeconfig
from stagger.timestamps import format_rfc3339
from tests.emulator.webhook_server import configuration, hook
from tests.webhook.process import BANNER, Certs, Webhook, start_webhook, tls_args
from tests.webhook.reviews import ENABLE, NAMES

TOKEN = "s3cret-token-for-the-tests"
PODS = "/api/v1/namespaces/{namespace}/pods"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@dataclass
class Controller:
    process: Webhook
    certs: Certs
    session: aiohttp.ClientSession

    async def post(self, path: str, body: Any, *, token: str | None = TOKEN) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with self.session.post(
            self.process.url + path, json=body, headers=headers, ssl=self.certs.client_context()
        ) as response:
            return response.status, await response.json()

    async def grant(self, name: str, *, namespace: str = "default", uid: str = "") -> dict[str, Any]:
        body: dict[str, str] = {"namespace": namespace, "name": name}
        if uid:
            body["uid"] = uid
        status, answer = await self.post("/v1/groups/grant", body)
        assert status == 200, answer
        return dict(answer)

    async def status(self) -> dict[str, Any]:
        async with self.session.get(
            self.process.url + "/status", ssl=self.certs.client_context()
        ) as response:
            return dict(await response.json())

    async def until(self, check: Any, *, within: float = 20.0) -> dict[str, Any]:
        """The `groups` section of /status once `check(section)` is true (asked every 50 ms)."""
        deadline = time.monotonic() + within
        while True:
            section = (await self.status())["groups"]
            if check(section):
                return dict(section)
            assert time.monotonic() < deadline, f"/status never got there: {section}"
            await asyncio.sleep(0.05)


class Api:
    def __init__(self, server: ApiServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def call(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": "Bearer sim"}
        data = None
        if content_type is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
            body = None
        async with self.session.request(
            method, self.server.url + path, json=body, data=data, headers=headers
        ) as response:
            return response.status, await response.json()

    async def create_pod(self, obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        status, created = await self.call("POST", PODS.format(namespace=namespace), obj)
        assert status == 201, created
        return dict(created)

    async def get_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        status, found = await self.call("GET", PODS.format(namespace=namespace) + f"/{name}")
        assert status == 200, found
        return dict(found)

    async def record_grant(self, name: str, namespace: str = "default") -> None:
        """What lockd does after a group grant: granted-at on the pod, the staggered label off."""
        patch = {
            "metadata": {
                "annotations": {NAMES.granted_at_annotation: format_rfc3339(time.time())},
                "labels": {NAMES.staggered_label: None},
            }
        }
        status, body = await self.call(
            "PATCH",
            PODS.format(namespace=namespace) + f"/{name}",
            patch,
            content_type="application/merge-patch+json",
        )
        assert status == 200, body

    async def make_ready(self, name: str, namespace: str = "default") -> None:
        patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        status, body = await self.call(
            "PATCH",
            PODS.format(namespace=namespace) + f"/{name}/status",
            patch,
            content_type="application/merge-patch+json",
        )
        assert status == 200, body


async def register_pod_webhook(
    api: Api, *, url: str, certs: Certs, failure_policy: str = "Ignore", timeout_seconds: int = 5
) -> None:
    """Register the controller at `url` as the API server's mutating webhook for enabled pods."""
    hooked = configuration(
        "stagger",
        hook(
            "pods.stagger.example.com",
            {"url": f"{url}/mutate/pods", "caBundle": certs.ca_bundle},
            objectSelector={"matchLabels": {ENABLE: "1"}},
            failurePolicy=failure_policy,
            timeoutSeconds=timeout_seconds,
            sideEffects="None",
            reinvocationPolicy="IfNeeded",
        ),
    )
    status, body = await api.call("POST", WEBHOOKS, hooked)
    assert status == 201, body


@contextlib.asynccontextmanager
async def running_controller(
    *,
    server: ApiServer,
    tmp_path: Path,
    policies: str,
    extra: tuple[str, ...] = (),
    register: bool = True,
    granting: bool | None = True,
    api_url: str | None = None,
    failure_policy: str = "Ignore",
    timeout_seconds: int = 5,
) -> AsyncIterator[Controller]:
    """The controller on `server`: its MutatingWebhookConfiguration registered (unless `register` is
    false; with `failure_policy` and `timeout_seconds`), and granting (unless `granting` is false: a second
    replica follows; None: not waited for). With `api_url` the controller reaches the API server there
    (a proxy in front of `server`) instead of directly."""
    certs = Certs.write(tmp_path / "tls")
    kubeconfig = tmp_path / "kubeconfig"
    if api_url is None:
        server.write_kubeconfig(kubeconfig)
    else:
        write_kubeconfig(kubeconfig, api_url, token=server.settings.token)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    policy_file = tmp_path / "policies.yaml"
    policy_file.write_text(policies)
    process = start_webhook(
        *tls_args(certs),
        "--policies",
        str(policy_file),
        "--kubeconfig",
        str(kubeconfig),
        "--token-file",
        str(token),
        # Grants the tests never record on their pods need not hold the shutdown for the default 5 s.
        "--grant-drain",
        "0.5s",
        *extra,
    )
    try:
        match = await asyncio.to_thread(process.wait_for_line, BANNER)
        process.url = f"{match[1]}://127.0.0.1:{match[2]}"
        process.probe_url = f"http://127.0.0.1:{match[3]}"
        async with aiohttp.ClientSession() as session:
            api = Api(server, session)
            if register:
                await register_pod_webhook(
                    api,
                    url=process.url,
                    certs=certs,
                    failure_policy=failure_policy,
                    timeout_seconds=timeout_seconds,
                )
            controller = Controller(process=process, certs=certs, session=session)
            if granting is not None:
                await controller.until(
                    lambda groups: groups.get("granting") == granting and groups.get("leader")
                )
            yield controller
    finally:
        await asyncio.to_thread(process.stop)


@contextlib.asynccontextmanager
async def controller_on_emulator(
    *, tmp_path: Path, policies: str, extra: tuple[str, ...] = ()
) -> AsyncIterator[tuple[Api, Controller]]:
    """A fresh API emulator and the controller on it (see running_controller): (the emulator's client on
    the controller's session, the controller)."""
    async with (
        ApiServer() as server,
        running_controller(server=server, tmp_path=tmp_path, policies=policies, extra=extra) as controller,
    ):
        yield Api(server, controller.session), controller
