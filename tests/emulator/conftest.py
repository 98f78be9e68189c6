"""Fixtures: an API server emulator in a background thread, and the official (synchronous) client on it;
helpers: a minimal pod manifest, and the Status body of a failed request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client, config

from sim.emulator.server import ApiServerSettings, ApiServerThread


@pytest.fixture
def settings() -> ApiServerSettings:
    """Tests override this fixture (or use `server_with`) for other settings."""
    return ApiServerSettings()


@pytest.fixture
def server(settings: ApiServerSettings) -> Iterator[ApiServerThread]:
    with ApiServerThread(settings) as running:
        yield running


@pytest.fixture
def kubeconfig(server: ApiServerThread, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(path)
    return path


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    with client.ApiClient(configuration) as api_client:
        yield api_client


# The official client is driven with plain-dict manifests, which it accepts at run time but its typed
# signatures do not describe; tests hold its API objects as Any.
Core = Any


@pytest.fixture
def core(api: client.ApiClient) -> Core:
    return client.CoreV1Api(api)


@pytest.fixture
def http(server: ApiServerThread) -> Iterator[Http]:
    with requests.Session() as session:
        yield Http(server.url, session)


class Http:
    """Raw HTTP to the emulator, for asserting exact wire behaviour."""

    def __init__(self, base: str, session: requests.Session) -> None:
        self.base = base
        self.session = session

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 10)
        if body is not None and "data" not in kwargs:
            kwargs["json"] = body
        return self.session.request(method, self.base + path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        return self.request("POST", path, body, **kwargs)

    def put(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        return self.request("PUT", path, body, **kwargs)

    def patch(self, path: str, body: Any, content_type: str, **kwargs: Any) -> requests.Response:
        return self.request(
            "PATCH", path, data=json.dumps(body), headers={"Content-Type": content_type}, **kwargs
        )

    def delete(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self.request("DELETE", path, body, **kwargs)


def pod(name: str = "", *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal valid pod manifest."""
    metadata: dict[str, Any] = {"name": name} if name else {"generateName": "pod-"}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }


def failure(*, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Status body the API server answers a failed request with (metav1.Status, `status: Failure`);
    `details` is left out when None, as the API server leaves it out. Stated here, not taken from
    sim/emulator/errors.py: the tests check the emulator's bodies against it."""
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    status.update(message=message, reason=reason, code=code)
    if details is not None:
        status["details"] = details
    return status
