"""The wake-up of one pod's long poll in lockd's queue."""

from __future__ import annotations

import asyncio

__all__ = ["Wakeup"]


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Wakeup:
    """Level-triggered wake-up of one pod's long poll: a `notify` that comes while the poll is busy (asking,
    finishing a grant) is not lost; the next `wait` returns at once.

    One exists per waiter, so it is lean: a flag, and while waiting a bare future and its timer. An
    `asyncio.Event` waited on with `asyncio.timeout` cost 1.6 KiB more a waiter (the Event's deque, the
    timeout context and two more coroutine frames; tests/benchmarks/waiter_memory_bench.py). Each wait has its
    own future (two long polls of one pod may wait at once): a cancelled wait cancels only its own.
    (No __slots__: tests replace `notify` on an instance to see who is woken.)"""

    def __init__(self) -> None:
        self._notified = False
        self._waiting: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        self._notified = True
        for future in self._waiting:
            _settle(future)

    async def wait(self, seconds: float) -> None:
        if not self._notified:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            timer = loop.call_later(max(0.0, seconds), _settle, future)
            self._waiting.append(future)
            try:
                await future
            finally:
                timer.cancel()
                self._waiting.remove(future)
        self._notified = False
