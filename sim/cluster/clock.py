"""Simulated time: ``time_scale`` simulated seconds pass per wall second."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable


class SimClock:
    """Simulated seconds since the clock was made, and the simulated wall time they stand for.

    Everything the start-up model does is in simulated seconds; lockd and the init client are real
    processes and run in wall time.
    """

    def __init__(
        self,
        *,
        time_scale: float,
        monotonic: Callable[[], float] = time.monotonic,
        wall_start: dt.datetime | None = None,
        start: float | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self._monotonic = monotonic
        self._start = monotonic() if start is None else start
        """``monotonic()`` at simulated second 0. Given, it makes a clock in another process read the same
        simulated time (Linux's CLOCK_MONOTONIC is one clock for every process on the machine)."""
        self.base = wall_start or dt.datetime.now(dt.UTC)
        """The wall time of simulated second 0 (timestamps are ``base + now()``)."""

    @property
    def start(self) -> float:
        return self._start

    def now(self) -> float:
        return (self._monotonic() - self._start) * self.time_scale

    def wall_delay(self, sim_seconds: float) -> float:
        """Wall seconds until ``sim_seconds`` from now."""
        return max(0.0, sim_seconds) / self.time_scale

    def datetime_at(self, sim_t: float) -> dt.datetime:
        return self.base + dt.timedelta(seconds=sim_t)

    def datetime_now(self) -> dt.datetime:
        return self.datetime_at(self.now())

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(self.wall_delay(sim_seconds))
