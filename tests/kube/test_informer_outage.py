"""The informer through an API server outage (the emulator stopped, then started again on the same port):
one warning when the outage starts, retries spaced by a jittered backoff that doubles up to its cap, and
one info line when the server answers again, with how long it was down and how many attempts failed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest

from sim.emulator.server import ApiServer, ApiServerSettings
from sim.kubeclient import client_for_url
from stagger.informer import Informer, InformerSettings, retry_delay
from stagger.kube import CONFIGMAPS
from tests.processes import free_port
from tests.waiting import eventually


@dataclass
class Backoff:
    """The informer's sleep and clock: a sleep records its delay and moves the clock on by it; the
    `hold_at`-th sleep waits until the test lets it go."""

    hold_at: int
    now: float = 1000.0
    delays: list[float] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    resume: asyncio.Event = field(default_factory=asyncio.Event)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.now += seconds
        if len(self.delays) == self.hold_at:
            self.held.set()
            await self.resume.wait()
        await asyncio.sleep(0)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}


def test_the_delay_doubles_to_its_cap_and_jitter_only_shortens_it() -> None:
    settings = InformerSettings()
    assert [retry_delay(n, settings=settings, jitter=0.0) for n in range(1, 9)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
        30.0,
    ]
    assert retry_delay(3, settings=settings, jitter=0.999) == pytest.approx(4.0 * (1 - 0.5 * 0.999))
    assert retry_delay(10_000, settings=settings, jitter=0.0) == 30.0


async def test_one_warning_per_outage_and_one_line_on_recovery(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    api = ApiServer(ApiServerSettings(port=port))
    await api.start()
    client = client_for_url(session=session, base_url=api.url)
    backoff = Backoff(hold_at=7)
    informer = Informer(
        client=client,
        resource=CONFIGMAPS,
        settings=InformerSettings(),
        namespace="default",
        sleep=backoff.sleep,
        clock=backoff.clock,
        rng=lambda: 0.5,
    )
    task = asyncio.create_task(informer.run())
    restarted: ApiServer | None = None
    try:
        await informer.synced.wait()
        caplog.set_level(logging.DEBUG, logger="stagger.informer")
        await api.stop()
        await asyncio.wait_for(backoff.held.wait(), timeout=10)

        # 1s doubling to 30s, each shortened by a quarter (jitter 0.5 of the 0.5 maximum).
        assert backoff.delays == [0.75, 1.5, 3.0, 6.0, 12.0, 22.5, 22.5]
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert warnings[0].getMessage().startswith("configmaps watch failed (")
        assert "Cannot connect" in warnings[0].getMessage()
        assert not [r for r in caplog.records if r.levelno == logging.INFO]

        restarted = ApiServer(ApiServerSettings(port=port))
        await restarted.start()
        backoff.resume.set()
        # A fresh server: the resumed watch answers with the next change.
        await client_for_url(session=session, base_url=restarted.url).create(
            CONFIGMAPS, configmap("after"), namespace="default"
        )

        def recovery_lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]

        async def recovered() -> bool:
            return bool(recovery_lines())

        await eventually(recovered, what="the recovery line")
        assert recovery_lines() == ["configmaps list/watch works again after 68.2s down (7 failed attempts)"]
        assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
        assert "default/after" in informer.store

        # The backoff starts over with the next outage, which gets its own warning.
        await restarted.stop()

        async def warned_again() -> bool:
            return len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 2

        await eventually(warned_again, what="the next outage's warning")
        assert backoff.delays[7] == 0.75
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.stop()
        if restarted is not None:
            await restarted.stop()
