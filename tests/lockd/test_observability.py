"""lockd's read-only endpoints: /status (JSON and text), /metrics, /healthz, /readyz."""

from __future__ import annotations

from tests.policies import limit_policy


async def test_status_json_has_the_documented_sections(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    await lockd.lock("holder", uid="u-1")
    await lockd.lock("waiter")
    status = await lockd.status()
    assert set(status) >= {"node", "mode", "policy", "load", "slots", "queue", "counters"}
    assert status["node"] == "test-node"
    assert status["load"]["source"].startswith("file:")
    assert set(status["slots"][0]) >= {"namespace", "name", "uid", "grantedAt", "ageSeconds"}
    assert status["queue"][0]["position"] == 1
    assert set(status["queue"][0]) >= {"namespace", "name", "position", "waitingSeconds"}
    assert status["counters"] == {"granted": 1, "denied": 1, "released": 0, "expired": 0}


async def test_status_text_is_a_table(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    await lockd.lock("holder")
    await lockd.lock("waiter")
    response = await lockd.client.get("/status", params={"format": "text"})
    assert response.status == 200
    text = await response.text()
    assert "slots in use: 1 of 1" in text
    assert "NAMESPACE" in text and "holder" in text and "waiter" in text
    assert "1 of 1 slots in use (maxConcurrent)" in text
    assert (await lockd.client.get("/status", params={"format": "xml"})).status == 400


async def test_metrics_are_prometheus_text(start_lockd) -> None:
    lockd = await start_lockd(limit_policy(1))
    await lockd.lock("a")
    await lockd.lock("b")
    await lockd.client.get("/v1/lock")
    response = await lockd.client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = await response.text()
    assert 'stagger_lockd_requests_total{result="granted"} 1.0' in text
    assert 'stagger_lockd_requests_total{result="denied"} 1.0' in text
    assert 'stagger_lockd_requests_total{result="bad_request"} 1.0' in text
    assert "stagger_lockd_slots_in_use 1.0" in text
    assert "stagger_lockd_queue_length 1.0" in text
    assert "stagger_lockd_wait_seconds_bucket" in text
    assert "stagger_lockd_cpu_busy_ratio 0.05" in text
    assert 'stagger_lockd_build_info{version="' in text
    assert "process_resident_memory_bytes " in text and "process_cpu_seconds_total " in text


async def test_health_endpoints(start_lockd) -> None:
    lockd = await start_lockd(None)
    assert (await lockd.client.get("/healthz")).status == 200
    assert (await lockd.client.get("/readyz")).status == 200


async def test_every_json_answer_ends_with_a_newline(start_lockd) -> None:
    """`curl` prints answers as they come: without the newline two of them ran together on one line."""
    lockd = await start_lockd(limit_policy(1))
    asks = [
        ("/v1/lock?namespace=default&name=a", 200),  # granted, with its token
        ("/v1/lock?namespace=default&name=a", 200),  # asked again: the cached body
        ("/v1/lock?namespace=default&name=b", 423),
        ("/v1/lock?namespace=default", 400),
        ("/status", 200),
        ("/healthz", 200),
        ("/nowhere", 404),
    ]
    for path, status in asks:
        response = await lockd.client.get(path)
        assert response.status == status, path
        assert response.content_type == "application/json", path
        assert (await response.read()).endswith(b"}\n"), path
