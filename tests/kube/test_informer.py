"""The informer against the API emulator: it lists then follows a watch; a restarted informer resumes
from the last resourceVersion; and when that version has fallen out of the server's watch history
(410 Gone) it relists and reports what changed meanwhile, deletions included. Lists are read in pages
(`list_page_size`), and a page token that expired mid-list (410) makes it read the list again whole."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sim.emulator.server import ApiServer, ApiServerSettings
from sim.kubeclient import client_for_url
from stagger.informer import Informer, InformerSettings
from stagger.kube import CONFIGMAPS, ClusterConfig, Resource, RestClient, WatchEventType
from tests.waiting import eventually


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    # A short watch history, so that a paused informer falls out of it quickly.
    async with ApiServer(ApiServerSettings(port=0, watch_history=5)) as server:
        yield server


@pytest.fixture
async def client(api: ApiServer) -> AsyncIterator[RestClient]:
    async with aiohttp.ClientSession() as session:
        yield client_for_url(session=session, base_url=api.url)


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


class CountingPages(RestClient):
    """The real client, counting its list requests; `writes_after_first_page` updates a ConfigMap that
    many times once the first page is in, so that the emulator's short history drops the list's version."""

    def __init__(self, *args: Any, writes_after_first_page: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pages: list[tuple[int | None, bool]] = []  # (limit, with a continue token)
        self._writes = writes_after_first_page

    async def list(self, resource: Resource, **kwargs: Any) -> dict[str, Any]:
        self.pages.append((kwargs.get("limit"), bool(kwargs.get("continue_token"))))
        page = await super().list(resource, **kwargs)
        if len(self.pages) == 1:
            for i in range(self._writes):
                await self.patch(CONFIGMAPS, name="cm-0", namespace="default", patch={"data": {"v": str(i)}})
        return page


@pytest.mark.parametrize(
    ("writes", "pages"),
    [
        pytest.param(0, [(3, False), (3, True), (3, True)], id="three-pages"),
        pytest.param(6, [(3, False), (3, True), (0, False)], id="expired-token-lists-whole"),
    ],
)
async def test_lists_in_pages(
    api: ApiServer, writes: int, pages: list[tuple[int, bool]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stagger.informer")
    async with aiohttp.ClientSession() as session:
        plain = client_for_url(session=session, base_url=api.url)
        for i in range(7):
            await plain.create(CONFIGMAPS, configmap(f"cm-{i}"), namespace="default")
        client = CountingPages(
            session=session, config=ClusterConfig(server=api.url), writes_after_first_page=writes
        )
        informer = Informer(
            client=client,
            resource=CONFIGMAPS,
            settings=InformerSettings(list_page_size=3),
            namespace="default",
        )
        task = asyncio.create_task(informer.run())
        try:
            await informer.synced.wait()
            assert client.pages == pages
            assert sorted(informer.store) == [f"default/cm-{i}" for i in range(7)]
            expected = str(writes - 1) if writes else "1"
            assert informer.store["default/cm-0"]["data"] == {"v": expected}
            assert any("continue token expired" in r.getMessage() for r in caplog.records) == bool(writes)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
