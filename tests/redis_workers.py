"""What the processes of tests/test_redis_store.py run (importable by a spawned process).

Each worker builds ``Limiter(..., store=RedisStore(url, key))`` with a log of its grants: the
instant the script counted each one (on the server's clock) and the instant its task resumed
(CLOCK_MONOTONIC, which the processes of one host share). Its tasks take tokens for a span from a
common start, and it puts its log on a queue."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiotb
from aiotb import RedisStore
from aiotb._redis_limiter import RedisLimiter
from aiotb._store_redis import Reserved

READY_WAIT = 60.0  # s: the longest a worker waits for the others to be ready


class LoggedLimiter(RedisLimiter):
    """A limiter over a RedisStore that logs, for each grant, the server's instant of it."""

    __slots__ = ("counted",)

    def _count_grant(self, amount: float, enqueued: float | None, reserved: Reserved) -> None:
        super()._count_grant(amount, enqueued, reserved)
        self.counted.append(reserved.at)


def logged(url: str, key: str, *args: Any, **kwargs: Any) -> LoggedLimiter:
    limiter = LoggedLimiter(*args, store=RedisStore(url, key), **kwargs)
    limiter.counted = []
    return limiter


async def used_for(limiter: Any, tasks: int, span_ns: int, ready: Any) -> list[int]:
    """Once every worker is ready (the barrier ready), tasks tasks take one token at a time from limiter for
    span_ns: the CLOCK_MONOTONIC ns as each task resumed with a grant."""
    used: list[int] = []
    ready.wait(READY_WAIT)
    stop_ns = time.monotonic_ns() + span_ns

    async def task() -> None:
        while time.monotonic_ns() < stop_ns:
            async with limiter:
                used.append(time.monotonic_ns())

    await asyncio.gather(*(task() for _ in range(tasks)))
    return used


def take_for(url: str, key: str, limiter_args: tuple[Any, ...], limiter_kwargs: dict[str, Any], tasks: int,
             span_ns: int, ready: Any, results: Any) -> None:
    """used_for over a RedisStore; puts (counted, used) on results: the server's instants, and the instants used."""

    async def main() -> tuple[list[int], list[int]]:
        limiter = logged(url, key, *limiter_args, **limiter_kwargs)
        await limiter.read_tokens()  # connected, and the key made, before the start
        used = await used_for(limiter, tasks, span_ns, ready)
        await limiter.store.redis.aclose()
        return limiter.counted, used

    results.put(asyncio.run(main()))


def lease_take_for(url: str, key: str, limiter_args: tuple[Any, ...], limiter_kwargs: dict[str, Any], tasks: int,
                   span_ns: int, ready: Any, results: Any) -> None:
    """used_for over a store leased for 0.3 s at a time; puts the instants used on results."""

    async def main() -> list[int]:
        limiter = aiotb.Limiter(*limiter_args, store=aiotb.RedisStore(url, key, lease=0.3), **limiter_kwargs)
        await limiter.store.redis.ping()  # connected before the start
        used = await used_for(limiter, tasks, span_ns, ready)
        await limiter.aclose()
        await limiter.store.redis.aclose()
        return used

    results.put(asyncio.run(main()))
