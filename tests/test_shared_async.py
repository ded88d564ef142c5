"""``AsyncLimiter(max_rate, time_period, store=SharedMemoryStore(name))``: aiolimiter's limiter over one capacity
that the processes of a host share. Real loops on CLOCK_MONOTONIC (a shared segment has no virtual clock); two
limiters on one name stand for two processes (tests/test_shared_store.py runs real ones on the same engine). C
engine only: the pure-Python engine has no shared store."""

from __future__ import annotations

import asyncio
import time

import pytest

import aiotb
from aiotb import AsyncLimiter, SharedMemoryStore

pytestmark = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python engine has no shared store")


def test_it_is_aiolimiters_limiter_over_the_store(name: str) -> None:
    store = SharedMemoryStore(name)
    limiter = AsyncLimiter(4, 2, store=store)
    assert isinstance(limiter, AsyncLimiter) and type(limiter).__name__ == "SharedAsyncLimiter"
    assert (limiter.max_rate, limiter.time_period, limiter.store) == (4, 2, store)
    assert limiter.has_capacity(4) and not limiter.has_capacity(5)  # above the capacity: False, as aiolimiter
    with pytest.raises(ValueError, match="Amount must be a number between 0 and the maximum capacity"):
        asyncio.run(limiter.acquire(5))

    async def zero() -> float:
        await limiter.acquire(4)
        await limiter.acquire(0)  # at once, taking nothing
        return limiter.tokens

    assert asyncio.run(zero()) < 0.1


def test_two_limiters_on_one_name_share_one_capacity(name: str) -> None:
    a = AsyncLimiter(4, 1, store=SharedMemoryStore(name))
    b = AsyncLimiter(4, 1, store=SharedMemoryStore(name))

    async def main() -> float:
        for _ in range(4):
            await a.acquire()
        assert not b.has_capacity()  # a took the capacity they share
        start = time.monotonic()
        await b.acquire()
        return time.monotonic() - start

    waited = asyncio.run(main())
    assert 0.2 <= waited < 2.0, waited  # one token comes back in 0.25 s; a loaded machine may be late


def test_the_waiters_of_a_process_wake_smallest_first(name: str) -> None:
    """A newcomer smaller than the waiter whose reservation is not due yet takes its place, as aiolimiter wakes
    the smallest first: 1 (at 0.1 s), then 3 (0.4 s), then 5 (0.9 s), not 5 first because it came first."""
    limiter = AsyncLimiter(10, 1, store=SharedMemoryStore(name))

    async def main() -> list[float]:
        await limiter.acquire(10)  # empty: 10 a second from now on
        order: list[float] = []

        async def take(amount: float) -> None:
            await limiter.acquire(amount)
            order.append(amount)

        tasks = []
        for amount in (5, 1, 3):
            tasks.append(asyncio.ensure_future(take(amount)))
            await asyncio.sleep(0)  # queued in this order
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        return order

    assert asyncio.run(main()) == [1, 3, 5]


def test_a_newcomer_takes_free_capacity_ahead_of_a_waiter(name: str) -> None:
    limiter = AsyncLimiter(10, 1, store=SharedMemoryStore(name))

    async def main() -> tuple[bool, bool]:
        await limiter.acquire(10)
        big = asyncio.ensure_future(limiter.acquire(10))  # a second away
        await asyncio.sleep(0.25)  # two tokens back
        newcomer = limiter.has_capacity(1)
        big.cancel()
        await asyncio.gather(big, return_exceptions=True)
        return newcomer, big.cancelled()

    assert asyncio.run(main()) == (True, True)


def test_threads_and_tasks_share_it(name: str) -> None:
    """Blocked threads and a loop's tasks take from one shared capacity: 4 + 6 grants of 1 from a capacity of 4
    refilled at 20 a second take at least (10 - 4) / 20 s."""
    import threading

    limiter = AsyncLimiter(4, 0.2, store=SharedMemoryStore(name))
    start = time.monotonic()
    threads = [threading.Thread(target=limiter.acquire_blocking) for _ in range(5)]
    for thread in threads:
        thread.start()

    async def main() -> None:
        for _ in range(5):
            async with limiter:
                pass

    asyncio.run(main())
    for thread in threads:
        thread.join(10)
    elapsed = time.monotonic() - start
    assert not any(thread.is_alive() for thread in threads)
    assert 0.29 <= elapsed < 5.0, elapsed
    assert limiter.stats().granted == 10


def test_a_redis_store_is_refused_with_the_way_to_go() -> None:
    with pytest.raises(TypeError, match=r"over Redis needs a round trip; use Limiter\(max_rate, time_period, "
                                        r"burst=max_rate, fair=False\), or AsyncLimiter over a SharedMemoryStore"):
        AsyncLimiter(10, 1, store=aiotb.RedisStore("redis://127.0.0.1:1", "k"))  # type: ignore[call-overload]
