"""The API emulator over real HTTP, a client for it, the controller replicas' pods, and a TCP proxy that can
cut one replica off the API server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from sim.emulator.server import ApiServer, ApiServerSettings
from sim.kubeclient import client_for_url
from stagger.kube import PODS, ApiError, ClusterConfig, RestClient

NAMESPACE = "default"


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(ApiServerSettings(port=0)) as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def client(api: ApiServer, session: aiohttp.ClientSession) -> RestClient:
    return client_for_url(session=session, base_url=api.url, request_timeout=10.0)


async def create_pod(client: RestClient, name: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "stagger-controller"}},
        "spec": {"containers": [{"name": "controller", "image": "stagger:test"}]},
    }
    await client.create(PODS, pod, namespace=NAMESPACE)


async def pod_labels(client: RestClient, name: str) -> dict[str, str]:
    pod = await client.get(PODS, name=name, namespace=NAMESPACE)
    return dict(pod["metadata"].get("labels") or {})


class RecordingClient(RestClient):
    """A RestClient that records every request (method, path, status) in `log`, which the tests share
    with the hooks, and can run `before_put` once before the next PUT (a write by someone else between
    the elector's read and its write)."""

    def __init__(self, *, base_url: str, session: aiohttp.ClientSession, log: list[tuple[Any, ...]]) -> None:
        super().__init__(session=session, config=ClusterConfig(server=base_url), request_timeout=10.0)
        self.log = log
        self.before_put: Any = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        if method == "PUT" and self.before_put is not None:
            interfere, self.before_put = self.before_put, None
            await interfere()
        try:
            answer = await super().request(method, path, params=params, body=body, content_type=content_type)
        except ApiError as err:
            self.log.append((method, path, str(err.status)))
            raise
        self.log.append((method, path, "200"))
        return answer


class Proxy:
    """A TCP proxy to the API server that can black-hole its traffic (`cut`): requests sent through it
    then get no answer at all, as in a network partition, until `restore`."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.cut = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            try:
                await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))
            finally:
                upstream_writer.close()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            if self.cut:
                continue  # dropped: no error, no answer
            writer.write(chunk)
            with contextlib.suppress(ConnectionError):
                await writer.drain()


@pytest.fixture
async def proxy(api: ApiServer) -> AsyncIterator[Proxy]:
    proxy = Proxy("127.0.0.1", api.port)
    await proxy.start()
    yield proxy
    await proxy.stop()
