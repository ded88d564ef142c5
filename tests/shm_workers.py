"""What the processes of tests/test_shared_store.py run (importable by a spawned process).

Each worker builds ``Limiter(..., store=SharedMemoryStore(name))`` with a log of its engine's grant
decisions: the CLOCK_MONOTONIC instant each grant was made in this process, whether at once or when
its reservation came due. Its tasks take tokens until a common instant, and it puts its log on a
queue."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from aiotb import Limiter, SharedMemoryStore
from aiotb._shared import SharedLimiter
from aiotb._tokenbucket import SHM_OK

READY_WAIT = 60.0  # s: the longest a worker waits for the others to be ready


class LoggedLimiter(SharedLimiter):
    """A shared limiter that logs every grant it makes: the instant the segment counted it (a
    reservation's, or the clock reading a take was made at) and the instant this process made it. Its
    newcomers take from the segment here, as the engine's fast path does, to log the instant."""

    __slots__ = ("counted", "made")

    def _take_at_once(self, amount: float) -> bool:
        if self._fair and self._queue:
            return False
        now = self._segment.now()  # the engine's fast path reads the same clock itself; read here to log it
        if self._segment.take_now(amount, now) != SHM_OK:
            return False
        self.counted.append(now)
        self.made.append(now)
        return True

    def try_acquire(self, amount: float = 1) -> bool:
        return self._take_at_once(self._checked_amount(amount))

    async def __aenter__(self) -> None:
        if not self._take_at_once(1.0):
            await self._wait(1.0, None)

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def _granted(self, slot: Any, now: float) -> None:
        super()._granted(slot, now)
        self.counted.append(round(slot.at * 1e9))
        self.made.append(round(now * 1e9))


def logged(name: str, *args: Any, **kwargs: Any) -> LoggedLimiter:
    limiter = LoggedLimiter(*args, store=SharedMemoryStore(name), **kwargs)
    limiter.counted = []
    limiter.made = []
    return limiter


def take_until(name: str, limiter_args: tuple[Any, ...], limiter_kwargs: dict[str, Any], tasks: int, span_ns: int,
               ready: Any, results: Any) -> None:
    """Once every worker has its limiter (the barrier ready), tasks tasks take one token at a time for span_ns;
    puts (pid, counted, made) on results."""

    async def main() -> LoggedLimiter:
        limiter = logged(name, *limiter_args, **limiter_kwargs)
        ready.wait(READY_WAIT)
        stop_ns = time.monotonic_ns() + span_ns

        async def task() -> None:
            while time.monotonic_ns() < stop_ns:
                async with limiter:
                    pass

        await asyncio.gather(*(task() for _ in range(tasks)))
        return limiter

    limiter = asyncio.run(main())
    results.put((os.getpid(), limiter.counted, limiter.made))


def try_until(name: str, limiter_args: tuple[Any, ...], limiter_kwargs: dict[str, Any], span_ns: int, ready: Any,
              results: Any) -> None:
    """Once every worker has its limiter, calls try_acquire as fast as it can for span_ns; puts (pid, counted,
    made) on results."""
    limiter = logged(name, *limiter_args, **limiter_kwargs)
    ready.wait(READY_WAIT)
    stop_ns = time.monotonic_ns() + span_ns
    while time.monotonic_ns() < stop_ns:
        limiter.try_acquire()
    results.put((os.getpid(), limiter.counted, limiter.made))


def try_count(name: str, limiter_args: tuple[Any, ...], limiter_kwargs: dict[str, Any], count: int, ready: Any,
              results: Any) -> None:
    """Once every worker has its limiter (the engine's own, no log), calls try_acquire count times in a row and
    puts how many it granted on results."""
    limiter = Limiter(*limiter_args, store=SharedMemoryStore(name), **limiter_kwargs)
    ready.wait(READY_WAIT)
    results.put(sum(limiter.try_acquire() for _ in range(count)))
