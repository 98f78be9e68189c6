"""lockd applying the node policy's throttles: CPU and IO load from the sampler, rate limit, built-in default,
and policy reloads that keep held slots (and keep the last good policy when the file turns bad)."""

from __future__ import annotations

from lockd import app as lockd_app
from tests.policies import limit_policy
from tests.waiting import eventually


async def test_cpu_load_over_max_denies_with_numbers(start_lockd) -> None:
    lockd = await start_lockd("nodePolicies:\n- name: cpu\n  throttleConfig:\n    cpu: {maxLoad: 80}\n")
    lockd.set_load(cpu=93.0, io=0.0)

    async def denied() -> bool:
        response = await lockd.lock("p")
        if response.status != 423:
            await lockd.release("p")
            return False
        return (await response.json())["reason"].startswith("cpu 93% >= maxLoad 80%")

    await eventually(denied, what="the cpu throttle to deny")
    lockd.set_load(cpu=10.0, io=0.0)
    response = await lockd.lock("p", wait="10")
    assert response.status == 200


async def test_io_load_over_max_denies(start_lockd) -> None:
    lockd = await start_lockd("nodePolicies:\n- name: io\n  throttleConfig:\n    io: {maxLoad: 20}\n")
    lockd.set_load(cpu=0.0, io=35.0)

    async def denied() -> bool:
        response = await lockd.lock("p")
        if response.status == 200:
            await lockd.release("p")
            return False
        return (await response.json())["reason"].startswith("io 35% >= maxLoad 20%")

    await eventually(denied, what="the io throttle to deny")


async def test_rate_limit_hands_out_burst_then_waits(start_lockd) -> None:
    lockd = await start_lockd(
        "nodePolicies:\n- name: rate\n  throttleConfig:\n    rateLimit: {burst: 2, fillFactor: 1h}\n"
    )
    assert (await lockd.lock("a")).status == 200
    assert (await lockd.lock("b")).status == 200
    denied = await lockd.lock("c")
    assert denied.status == 423
    body = await denied.json()
    assert "rateLimit burst 2" in body["reason"]
    assert int(denied.headers["Retry-After"]) > 3000


async def test_builtin_default_policy_without_a_file(start_lockd) -> None:
    lockd = await start_lockd(None)
    status = await lockd.status()
    assert status["policy"]["name"] == "builtin-default"
    assert status["policy"]["maxConcurrent"] == 2  # perCore 0.5 x 4 cores
    assert status["policy"]["cpuMaxLoad"] == 90
    assert status["mode"] == "standalone"


async def test_reload_switches_policy_and_keeps_held_slots(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    assert (await lockd.lock("held")).status == 200
    lockd.policy_path.write_text(limit_policy(3).replace("name: test", "name: wider"))

    async def reloaded() -> bool:
        return (await lockd.status())["policy"]["name"] == "wider"

    await eventually(reloaded, what="the reload")
    status = await lockd.status()
    assert [s["name"] for s in status["slots"]] == ["held"]
    assert status["policy"]["maxConcurrent"] == 3
    assert (await lockd.lock("second")).status == 200


async def test_bad_reload_keeps_the_last_good_policy(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    lockd.policy_path.write_text(
        "nodePolicies:\n- name: broken\n  throttleConfig:\n    maxConcurent: {value: 9}\n"
    )
    assert lockd_app.reload_policy(lockd.app) is False
    status = await lockd.status()
    assert status["policy"]["name"] == "test"
    assert "maxConcurent" in status["policy"]["lastReloadError"]
    assert (await lockd.lock("a")).status == 200
    assert (await lockd.lock("b")).status == 423


async def test_node_labels_choose_the_node_policy(start_lockd) -> None:
    policies = (
        "nodePolicies:\n"
        "- name: general\n  throttleConfig: {maxConcurrent: {value: 1}}\n"
        "- name: big\n  priority: 10\n  nodeSelector: {size: big}\n  throttleConfig: {maxConcurrent: {value: 8}}\n"
    )
    small = await start_lockd(policies)
    assert (await small.status())["policy"]["name"] == "general"
    big = await start_lockd(policies, node_labels=(("size", "big"),))
    status = await big.status()
    assert status["policy"]["name"] == "big"
    assert "priority 10" in status["policy"]["why"]


async def test_unreadable_policy_file_keeps_the_last_good_policy(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    lockd.policy_path.unlink()
    assert lockd_app.reload_policy(lockd.app) is False
    status = await lockd.status()
    assert status["policy"]["name"] == "test"
    assert "cannot read the policy file" in status["policy"]["lastReloadError"]
