"""Watch semantics: synthetic ADDED for rv unset/"0", resumption from a resourceVersion, 410 Expired as
an ERROR event once history is dropped (also as the official client sees it), bookmarks,
sendInitialEvents, timeoutSeconds, selectors (an object that stops matching is DELETED), no leaked
watches after a client disconnects, and hundreds of concurrent watches."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import requests
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from sim.emulator.selectors import parse_label_selector
from sim.emulator.server import ApiServer, ApiServerSettings, ApiServerThread
from sim.emulator.store import StoredEvent, Watcher
from tests.emulator.conftest import Core, Http, pod


def events(response: requests.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line:
            yield json.loads(line)


def open_watch(http: Http, path: str) -> requests.Response:
    response = http.get(path, stream=True)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return response


def new_watch() -> Any:
    return watch.Watch()  # type: ignore[no-untyped-call]


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": data}


def test_watch_without_resource_version_starts_with_the_current_state(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", configmap("a"))
    core.create_namespaced_config_map("default", configmap("b"))
    stream = events(open_watch(http, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=10"))
    first = [next(stream), next(stream)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in first] == [("ADDED", "a"), ("ADDED", "b")]
    core.create_namespaced_config_map("default", configmap("c"))
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("b", "default")
    later = [next(stream) for _ in range(3)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in later] == [
        ("ADDED", "c"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    assert later[1]["object"]["data"] == {"k": "v"}


def test_watch_resumes_after_a_resource_version(core: Core, http: Http) -> None:
    first = core.create_namespaced_config_map("default", configmap("a"))
    core.patch_namespaced_config_map("a", "default", {"data": {"n": "1"}})
    core.create_namespaced_config_map("default", configmap("b"))
    core.delete_namespaced_config_map("a", "default")
    rv = first.metadata.resource_version
    stream = events(
        open_watch(
            http, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=5"
        )
    )
    got = [next(stream) for _ in range(3)]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in got]
    assert versions == sorted(versions) and versions[0] > int(rv)


def test_deleted_event_carries_the_final_state_at_a_new_resource_version(core: Core, http: Http) -> None:
    created = core.create_namespaced_config_map("default", configmap("a", k="v"))
    rv = created.metadata.resource_version
    core.delete_namespaced_config_map("a", "default")
    stream = events(
        open_watch(
            http, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=5"
        )
    )
    deleted = next(stream)
    assert deleted["type"] == "DELETED" and deleted["object"]["data"] == {"k": "v"}
    assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(rv)


@pytest.mark.parametrize("settings", [pytest.param(ApiServerSettings(watch_history=3), id="history-3")])
def test_watch_from_a_dropped_version_gets_410_expired(core: Core, http: Http) -> None:
    first = core.create_namespaced_config_map("default", configmap("c0"))
    for i in range(1, 6):
        core.create_namespaced_config_map("default", configmap(f"c{i}"))
    rv = first.metadata.resource_version
    response = open_watch(http, f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}")
    got = list(events(response))  # the stream ends after the error
    assert len(got) == 1 and got[0]["type"] == "ERROR"
    status = got[0]["object"]
    assert status["code"] == 410 and status["reason"] == "Expired" and status["status"] == "Failure"
    oldest_kept = int(core.read_namespaced_config_map("c3", "default").metadata.resource_version)
    assert status["message"] == f"too old resource version: {rv} ({oldest_kept - 1})"
    with pytest.raises(ApiException) as caught:
        for _ in new_watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
        ):
            pass
    assert caught.value.status == 410
    recent = core.read_namespaced_config_map("c4", "default").metadata.resource_version
    stream = events(
        open_watch(
            http,
            f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={recent}&timeoutSeconds=5",
        )
    )
    assert next(stream)["object"]["metadata"]["name"] == "c5"


@pytest.mark.parametrize(
    "settings", [pytest.param(ApiServerSettings(watch_bookmark_interval=0.2), id="bookmarks")]
)
def test_bookmarks_carry_only_the_resource_version(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", configmap("a"))
    current = core.list_namespaced_config_map("default").metadata.resource_version
    response = open_watch(
        http,
        f"/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion={current}&timeoutSeconds=10",
    )
    bookmark = next(events(response))
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"resourceVersion": current}},
    }
    response.close()


@pytest.mark.parametrize(
    "settings", [pytest.param(ApiServerSettings(watch_bookmark_interval=0.2), id="bookmarks")]
)
def test_official_client_follows_bookmarks(core: Core) -> None:
    core.create_namespaced_config_map("default", configmap("a"))
    current = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("kube-system", configmap("elsewhere"))
    w = new_watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=current,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    ):
        if event["type"] == "BOOKMARK":
            w.stop()
    assert int(w.resource_version) > int(current)


def test_send_initial_events_ends_with_an_annotated_bookmark(core: Core, http: Http) -> None:
    core.create_namespaced_config_map("default", configmap("a"))
    response = open_watch(
        http,
        "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=10",
    )
    stream = events(response)
    assert next(stream)["type"] == "ADDED"
    end = next(stream)
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    response.close()


def test_timeout_seconds_ends_the_stream_cleanly(http: Http) -> None:
    started = time.monotonic()
    response = open_watch(http, "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1")
    assert list(events(response)) == []
    assert time.monotonic() - started < 8


def test_label_selector_watch_sends_deleted_when_an_object_stops_matching(core: Core, http: Http) -> None:
    response = open_watch(
        http, "/api/v1/namespaces/default/pods?watch=true&labelSelector=app%3Dweb&timeoutSeconds=10"
    )
    stream = events(response)
    core.create_namespaced_pod("default", pod("other", labels={"app": "db"}))
    core.create_namespaced_pod("default", pod("p", labels={"app": "web"}))
    assert (next(stream)["type"], "p") == ("ADDED", "p")
    moved = core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"app": "db"}}})
    gone = next(stream)
    assert gone["type"] == "DELETED"
    assert gone["object"]["metadata"]["labels"] == {"app": "web"}  # the last matching state...
    assert (
        gone["object"]["metadata"]["resourceVersion"] == moved.metadata.resource_version
    )  # ...at the new rv
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"app": "web"}}})
    back = next(stream)
    assert back["type"] == "ADDED" and back["object"]["metadata"]["labels"] == {"app": "web"}
    response.close()


def test_field_selector_watch_on_node_name(core: Core, http: Http) -> None:
    core.create_namespaced_pod("default", pod("p"))
    response = open_watch(http, "/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=10")
    stream = events(response)
    core.create_namespaced_pod_binding(
        "p",
        "default",
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    added = next(stream)
    assert added["type"] == "ADDED" and added["object"]["spec"]["nodeName"] == "n1"
    response.close()


def wait_until(condition: Any, *, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_disconnected_watches_are_released(server: ApiServerThread) -> None:
    port = server.server.port
    sockets = []
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sockets.append(sock)
    wait_until(lambda: server.call(lambda: server.server.watch_count) == 5)
    for sock in sockets:
        sock.close()  # a client that vanishes: the idle watches must not linger
    wait_until(lambda: server.call(lambda: server.server.watch_count) == 0)


async def test_hundreds_of_concurrent_watches_all_see_an_event() -> None:
    count = 200
    async with (
        ApiServer(ApiServerSettings()) as server,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        ready = 0
        all_ready = asyncio.Event()

        async def watch_one() -> str:
            nonlocal ready
            url = (
                f"{server.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion=1&timeoutSeconds=30"
            )
            async with session.get(url) as response:
                ready += 1
                if ready == count:
                    all_ready.set()
                line = await response.content.readline()
                return str(json.loads(line)["object"]["metadata"]["name"])

        tasks = [asyncio.create_task(watch_one()) for _ in range(count)]
        async with asyncio.timeout(20):
            await all_ready.wait()
            # A watch is subscribed before its response headers go out, so every watch is live now.
            assert server.watch_count == count
            async with session.post(f"{server.url}/api/v1/namespaces/default/pods", json=pod("p")) as created:
                assert created.status == 201
            names = await asyncio.gather(*tasks)
        assert names == ["p"] * count
        async with asyncio.timeout(10):
            # Nothing signals that the server noticed the clients leaving: poll, bounded by the timeout.
            while server.watch_count:  # noqa: ASYNC110
                await asyncio.sleep(0.01)


def labelled(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": str(rv), "labels": labels}}


def test_watcher_classifies_transitions_and_cuts_off_slow_readers() -> None:
    web = parse_label_selector("app=web")
    watcher = Watcher(
        namespace="default", predicate=lambda o: web.matches(o["metadata"]["labels"]), queue_limit=3
    )
    events = [
        StoredEvent("ADDED", 1, labelled("a", 1, app="db"), None),
        StoredEvent("MODIFIED", 2, labelled("a", 2, app="web"), labelled("a", 1, app="db")),
        StoredEvent("MODIFIED", 3, labelled("a", 3, app="web", x="1"), labelled("a", 2, app="web")),
        StoredEvent("MODIFIED", 4, labelled("a", 4, app="db"), labelled("a", 3, app="web", x="1")),
    ]
    for event in events:
        watcher.offer(event)
    assert [(d.type, d.event.rv) for d in watcher.pending] == [("ADDED", 2), ("MODIFIED", 3), ("DELETED", 4)]
    gone = watcher.pending[-1].object()
    assert (
        gone["metadata"]["labels"] == {"app": "web", "x": "1"} and gone["metadata"]["resourceVersion"] == "4"
    )
    assert not watcher.overflowed
    watcher.offer(StoredEvent("ADDED", 5, labelled("b", 5, app="web"), None))
    assert watcher.overflowed and len(watcher.pending) == 3
    other = Watcher(namespace="elsewhere", predicate=lambda o: True, queue_limit=3)
    other.offer(events[0])
    assert not other.pending
