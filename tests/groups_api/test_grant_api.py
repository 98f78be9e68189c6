"""The controller's group grant API over HTTPS, on the API emulator: pods created through the API are
mutated by the controller's admission, seen by its watch, and paced by the seed's image-pull policy
(exponential 4/4/16).

Covers: the oldest four of a group are granted and the fifth is not, with the pacer in the reason; a
grant is idempotent; the node's long poll (`/v1/groups/wait`) answers as soon as the group gains room
(two pods turn Ready) and names only pods that may go; with `grant: true` it grants them in its answer,
reserved (the room they take is gone for the next ask), and never to a pod named by another uid; every refusal of a bad caller (401 without or with
a wrong token, 400 naming the bad field); and `/status` lists the group with its counts and limit, and
`/metrics` has them too."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.groups_api.controller import Api, Controller, controller_on_emulator
from tests.webhook.reviews import NAMES, enabled, image_policy, pod

pytestmark = pytest.mark.e2e


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[Api, Controller]]:
    async with controller_on_emulator(tmp_path=tmp_path, policies=image_policy("lock")) as setup:
        yield setup


async def _herd(api: Api, controller: Controller, count: int) -> list[str]:
    names = [f"web-{i}" for i in range(count)]
    for name in names:
        created = await api.create_pod(pod(name, labels=enabled(staggerimages="1")))
        assert created["metadata"]["labels"][NAMES.staggered_label] == "1"
    await controller.until(lambda groups: groups["pods"] == count)
    return names


async def test_the_oldest_four_go_first_and_the_fifth_waits(setup: tuple[Api, Controller]) -> None:
    api, controller = setup
    names = await _herd(api, controller, 6)
    answers = [await controller.grant(name) for name in names]
    assert [a["granted"] for a in answers] == [True, True, True, True, False, False]
    assert "exponential 4/4/16" in answers[4]["reason"] and "image-pull[nginx:1.25]" in answers[4]["reason"]
    assert answers[4]["retryAfter"] > 0
    again = await controller.grant(names[0])
    assert again["granted"] is True  # idempotent: not counted twice
    assert (await controller.grant(names[4]))["granted"] is False
    groups = await controller.until(lambda groups: groups["groups"][0]["starting"] == 4)
    [row] = groups["groups"]
    assert row == {
        "policy": "image-pull",
        "key": "nginx:1.25",
        "mode": "lock",
        "ready": 0,
        "starting": 4,
        "held": 2,
        "limit": 4,
        "pacer": row["pacer"],
    }
    async with controller.session.get(controller.process.probe_url + "/metrics") as response:
        metrics = await response.text()
    for line in (
        'stagger_controller_group_pods{state="starting"} 4.0',
        'stagger_controller_group_pods{state="held"} 2.0',
        "stagger_controller_groups 1.0",
        'stagger_controller_grants_total{basis="paced"} 4.0',
        'stagger_controller_grants_total{basis="reserved"} 1.0',
        "stagger_controller_leader 1.0",
    ):
        assert line in metrics, line


async def test_the_wait_answers_as_soon_as_the_group_gains_room(setup: tuple[Api, Controller]) -> None:
    api, controller = setup
    names = await _herd(api, controller, 6)
    for name in names[:4]:
        assert (await controller.grant(name))["granted"]
    held = [{"namespace": "default", "name": name} for name in names[4:]]
    waiting = asyncio.create_task(
        controller.post("/v1/groups/wait", {"node": "n1", "wait": 20, "pods": held})
    )
    await controller.until(lambda groups: groups["waits"] == 1)
    assert not waiting.done()
    started = time.monotonic()
    # Two Ready: 2 x 4 = 8 may be started, 4 are: both held pods may go.
    await api.make_ready(names[0])
    await api.make_ready(names[1])
    status, answer = await waiting
    elapsed = time.monotonic() - started
    assert status == 200, answer
    assert answer == {"grantable": held}
    assert elapsed < 5.0  # generous: the benchmark measures it (milliseconds)
    assert [(await controller.grant(name))["granted"] for name in names[4:]] == [True, True]


async def test_the_wait_names_only_the_pods_that_may_go_and_times_out_empty(
    setup: tuple[Api, Controller],
) -> None:
    api, controller = setup
    names = await _herd(api, controller, 7)
    held = [{"namespace": "default", "name": name} for name in names[4:]]
    status, answer = await controller.post("/v1/groups/wait", {"node": "n1", "wait": 5, "pods": held})
    assert status == 200 and answer == {"grantable": []}  # the four oldest go first, not these
    status, answer = await controller.post(
        "/v1/groups/wait", {"node": "n1", "wait": 5, "pods": [{"namespace": "default", "name": names[3]}]}
    )
    assert answer == {"grantable": [{"namespace": "default", "name": names[3]}]}
    started = time.monotonic()
    status, answer = await controller.post("/v1/groups/wait", {"node": "n1", "wait": 0.3, "pods": held})
    assert (status, answer) == (200, {"grantable": []})
    assert 0.25 <= time.monotonic() - started < 5.0


async def test_a_wait_with_grant_grants_in_its_answer_and_the_room_is_taken(
    setup: tuple[Api, Controller],
) -> None:
    api, controller = setup
    names = await _herd(api, controller, 6)
    held = [{"namespace": "default", "name": name} for name in names[3:]]
    status, answer = await controller.post(
        "/v1/groups/wait", {"node": "n1", "wait": 5, "pods": held, "grant": True}
    )
    # Of the three named, only the fourth oldest is among the four that may start: granted, and reserved
    # for as long as a POST /v1/groups/grant's grant is.
    assert status == 200, answer
    assert answer == {"grantable": [], "granted": [held[0]], "grantedFor": 60.0}
    # A wait naming it again (the node never read that answer: it replaced the wait as the answer came)
    # is answered at once with the same grant, for what is left of its reservation.
    status, again = await controller.post(
        "/v1/groups/wait", {"node": "n1", "wait": 5, "pods": held, "grant": True}
    )
    assert (status, again["granted"]) == (200, [held[0]]) and 0 < again["grantedFor"] <= 60.0, again
    assert (await controller.grant(names[3]))["granted"]  # the same grant, asked again
    # The three oldest are held, not granted: with the fourth reserved, the fifth may not go.
    assert not (await controller.grant(names[4]))["granted"]
    # A wait naming a pod by another uid (a pod of that name the controller has not seen) grants nothing.
    stranger = {"namespace": "default", "name": names[0], "uid": "not-its-uid"}
    status, answer = await controller.post(
        "/v1/groups/wait", {"node": "n1", "wait": 0.3, "pods": [stranger], "grant": True}
    )
    assert (status, answer) == (200, {"grantable": [], "granted": [], "grantedFor": 60.0})


@pytest.mark.parametrize(
    ("path", "body", "token", "status", "needle"),
    [
        pytest.param(
            "/v1/groups/grant", {"namespace": "d", "name": "p"}, None, 401, "Bearer", id="grant-no-token"
        ),
        pytest.param(
            "/v1/groups/grant",
            {"namespace": "d", "name": "p"},
            "wrong",
            401,
            "Bearer",
            id="grant-wrong-token",
        ),
        pytest.param(
            "/v1/groups/wait", {"node": "n", "pods": []}, "wrong", 401, "Bearer", id="wait-wrong-token"
        ),
        pytest.param("/v1/groups/grant", {"name": "p"}, "ok", 400, "namespace", id="grant-no-namespace"),
        pytest.param(
            "/v1/groups/grant", {"namespace": "d", "name": 7}, "ok", 400, "name", id="grant-name-not-string"
        ),
        pytest.param("/v1/groups/grant", [1], "ok", 400, "JSON object", id="grant-not-object"),
        pytest.param(
            "/v1/groups/wait", {"node": "n", "wait": 61, "pods": []}, "ok", 400, "wait", id="wait-too-long"
        ),
        pytest.param(
            "/v1/groups/wait",
            {"node": "n", "pods": [{"name": "x"}]},
            "ok",
            400,
            "pods[0].namespace",
            id="wait-bad-pod",
        ),
        pytest.param("/v1/groups/wait", {"pods": []}, "ok", 400, "node", id="wait-no-node"),
        pytest.param(
            "/v1/groups/wait",
            {"node": "n", "pods": [], "grant": "yes"},
            "ok",
            400,
            "grant",
            id="wait-bad-grant",
        ),
        pytest.param(
            "/v1/groups/wait",
            {"node": "n", "pods": [{"namespace": "d", "name": "x", "uid": 7}]},
            "ok",
            400,
            "pods[0].uid",
            id="wait-bad-uid",
        ),
    ],
)
async def test_bad_callers_are_refused_with_a_reason(
    setup: tuple[Api, Controller], path: str, body: object, token: str | None, status: int, needle: str
) -> None:
    _, controller = setup
    from tests.groups_api.controller import TOKEN

    got, answer = await controller.post(path, body, token=TOKEN if token == "ok" else token)
    assert got == status, answer
    assert needle in answer["error"]


async def test_an_unknown_pod_is_told_to_ask_again(setup: tuple[Api, Controller]) -> None:
    _, controller = setup
    answer = await controller.grant("never-created")
    assert answer["granted"] is False and "not seen" in answer["reason"]
