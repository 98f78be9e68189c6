"""The informer against the API emulator: it lists then follows a watch; a restarted informer resumes
from the last resourceVersion; and when that version has fallen out of the server's watch history
(410 Gone) it relists and reports what changed meanwhile, deletions included."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from sim.emulator.server import ApiServer, ApiServerSettings
from stagger.informer import Informer, InformerSettings
from stagger.kube import CONFIGMAPS, RestClient, WatchEventType
from tests.waiting import eventually


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    # A short watch history, so that a paused informer falls out of it quickly.
    async with ApiServer(ApiServerSettings(port=0, watch_history=5)) as server:
        yield server


@pytest.fixture
async def client(api: ApiServer) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield RestClient.for_url(session=session, base_url=api.url)


def configmap(name: str, value: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


async def test_lists_then_follows_the_watch(client: RestClient) -> None:
    await client.create(CONFIGMAPS, configmap("before"), namespace="default")
    informer = Informer(client=client, resource=CONFIGMAPS, settings=InformerSettings(), namespace="default")
    seen: list[tuple[WatchEventType, str]] = []
    informer.add_handler(lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        await client.create(CONFIGMAPS, configmap("after"), namespace="default")
        await client.delete(CONFIGMAPS, name="before", namespace="default")

        async def caught_up() -> bool:
            return set(informer.store) == {"default/after"}

        await eventually(caught_up, what="the watch events")
        assert seen == [("ADDED", "before"), ("ADDED", "after"), ("DELETED", "before")]
        assert informer.relists == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_resumes_and_relists_when_its_version_is_gone(client: RestClient) -> None:
    for name in ("keep", "drop", "change"):
        await client.create(CONFIGMAPS, configmap(name), namespace="default")
    informer = Informer(
        client=client, resource=CONFIGMAPS, settings=InformerSettings(retry_seconds=0.1), namespace="default"
    )
    seen: list[tuple[WatchEventType, str]] = []
    informer.add_handler(lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    await informer.synced.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    paused_at = informer.resource_version

    # Meanwhile, more changes than the server keeps in its watch history.
    await client.delete(CONFIGMAPS, name="drop", namespace="default")
    for i in range(10):
        await client.patch(CONFIGMAPS, name="change", namespace="default", patch={"data": {"v": str(i)}})
    seen.clear()

    task = asyncio.create_task(informer.run())
    try:

        async def relisted() -> bool:
            return informer.relists == 2 and set(informer.store) == {"default/keep", "default/change"}

        await eventually(relisted, what="a relist after 410 Gone")
        assert informer.resource_version != paused_at
        assert informer.store["default/change"]["data"] == {"v": "9"}
        assert ("DELETED", "drop") in seen
        assert ("MODIFIED", "change") in seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_restarted_informer_resumes_without_relisting(client: RestClient) -> None:
    informer = Informer(client=client, resource=CONFIGMAPS, settings=InformerSettings(), namespace="default")
    task = asyncio.create_task(informer.run())
    await informer.synced.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await client.create(CONFIGMAPS, configmap("while-paused"), namespace="default")
    task = asyncio.create_task(informer.run())
    try:

        async def caught_up() -> bool:
            return "default/while-paused" in informer.store

        await eventually(caught_up, what="the event missed while paused")
        assert informer.relists == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
