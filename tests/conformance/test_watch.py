"""Watches as the cacher serves them (k8s.io/apiserver/pkg/storage/cacher v0.36): events replayed from a
resourceVersion, filtered by selectors (an object that stops matching is DELETED, one that starts
matching ADDED), a pod deletion as the store performs it (the deletionTimestamp written, then the delete:
generic/registry/store.go Delete), and the initial events of sendInitialEvents ending in an annotated
BOOKMARK."""

from __future__ import annotations

import json
from typing import Any

from tests.conformance.support import MERGE, Conn, pod


async def watched(kube: Conn, path: str, **params: str) -> list[dict[str, Any]]:
    """The events of a watch that the server ends after a second."""
    async with kube.session.get(
        kube.base + path, params={"watch": "1", "timeoutSeconds": "1", **params}, ssl=kube.ssl
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/json")
        text = await response.text()
    return [json.loads(line) for line in text.splitlines() if line]


async def test_a_watch_replays_from_a_version_through_its_selector(kube: Conn) -> None:
    version = (await kube.get(kube.pods)).body["metadata"]["resourceVersion"]
    await kube.created(kube.pods, pod("p", labels={"app": "x"}))
    for app in ("y", "x"):
        assert (
            await kube.patch(f"{kube.pods}/p", {"metadata": {"labels": {"app": app}}}, MERGE)
        ).status == 200
    assert (await kube.delete(f"{kube.pods}/p")).status == 200
    events = await watched(kube, kube.pods, labelSelector="app=x", resourceVersion=version)
    seen = [
        (e["type"], e["object"]["metadata"]["labels"]["app"], "deletionTimestamp" in e["object"]["metadata"])
        for e in events
    ]
    assert seen == [
        ("ADDED", "x", False),
        ("DELETED", "x", False),  # stopped matching: its last matching state
        ("ADDED", "x", False),
        ("MODIFIED", "x", True),  # an unscheduled pod: grace period 0, but the timestamp is written first
        ("DELETED", "x", True),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(e["object"]["kind"] == "Pod" and e["object"]["apiVersion"] == "v1" for e in events)


async def test_send_initial_events_ends_with_an_annotated_bookmark(kube: Conn) -> None:
    await kube.created(kube.configmaps, {"metadata": {"name": "a", "labels": {"w": "1"}}})
    events = await watched(
        kube,
        kube.configmaps,
        labelSelector="w=1",
        sendInitialEvents="true",
        resourceVersionMatch="NotOlderThan",
        allowWatchBookmarks="true",
    )
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["metadata"]["name"] == "a"
    bookmark = events[1]["object"]
    assert bookmark["kind"] == "ConfigMap" and bookmark["apiVersion"] == "v1"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )


async def test_a_watch_of_one_object_by_field_selector(kube: Conn) -> None:
    version = (await kube.get(kube.configmaps)).body["metadata"]["resourceVersion"]
    for name in ("a", "b"):
        await kube.created(kube.configmaps, {"metadata": {"name": name}})
    events = await watched(kube, kube.configmaps, fieldSelector="metadata.name=b", resourceVersion=version)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]
