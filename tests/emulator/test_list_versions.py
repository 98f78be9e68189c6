"""Past states from the bounded watch history: an Exact list or a continue token older than what is kept
is 410 Expired, worded as etcd3's store words a compacted revision (a real server shows it only after
compaction, every 5 minutes: too slow for tests/conformance)."""

from __future__ import annotations

import base64
import json

import pytest

from sim.emulator.server import ApiServerSettings
from tests.emulator.conftest import Http, failure

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def settings() -> ApiServerSettings:
    return ApiServerSettings(watch_history=3)


def write(http: Http, name: str, value: str) -> str:
    body = {"metadata": {"name": name}, "data": {"v": value}}
    response = http.post(CMS, body)
    if response.status_code == 409:
        current = http.get(f"{CMS}/{name}").json()
        response = http.put(f"{CMS}/{name}", {**body, "metadata": current["metadata"]})
    assert response.status_code in (200, 201), response.json()
    return str(response.json()["metadata"]["resourceVersion"])


def test_an_exact_list_within_the_history(http: Http) -> None:
    first = write(http, "a", "1")
    write(http, "a", "2")
    response = http.get(CMS, params={"resourceVersion": first, "resourceVersionMatch": "Exact"})
    assert response.status_code == 200
    assert [i["data"]["v"] for i in response.json()["items"]] == ["1"]


def test_an_exact_list_older_than_the_history_is_expired(http: Http) -> None:
    first = write(http, "a", "1")
    for value in "2345":
        write(http, "a", value)
    response = http.get(CMS, params={"resourceVersion": first, "resourceVersionMatch": "Exact"})
    assert response.status_code == 410
    assert response.json() == failure(
        code=410, reason="Expired", message="The resourceVersion for the provided list is too old."
    )


def test_an_expired_continue_token_offers_one_for_the_current_state(http: Http) -> None:
    for name in ("a", "b", "c"):
        write(http, name, "1")
    page = http.get(CMS, params={"limit": "1"}).json()
    for value in "2345":
        write(http, "c", value)
    response = http.get(CMS, params={"continue": page["metadata"]["continue"]})
    assert response.status_code == 410
    body = response.json()
    assert body["message"].startswith(
        "The provided continue parameter is too old to display a consistent list"
    )
    token = body["metadata"]["continue"]
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded["rv"] == -1
    rest = http.get(CMS, params={"continue": token}).json()
    assert [(i["metadata"]["name"], i["data"]["v"]) for i in rest["items"]] == [("b", "1"), ("c", "5")]
