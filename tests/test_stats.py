"""``limiter.stats()``: what the limiter did, counted exactly, on both engines."""

from __future__ import annotations

import asyncio

import pytest


def test_stats_count_grants_waits_cancellations_and_timeouts(lib, vrun):
    async def main() -> tuple[object, ...]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(2, 1, burst=2)  # a token every 0.5 s
        fresh = limiter.stats()
        async with limiter:  # fast path
            pass
        assert limiter.try_acquire(1)
        assert not limiter.try_acquire(1)  # refused: not a grant, not a wait
        await limiter.acquire(1)  # waits 0.5 s
        slow = asyncio.create_task(limiter.acquire(2))  # would be granted at 1.5 s
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=0.1)
        await asyncio.sleep(0.2)
        slow.cancel()  # cancelled before its grant
        await asyncio.gather(slow, return_exceptions=True)
        during = limiter.stats()
        await limiter.acquire(0.5)  # waits until 0.75 s: the cancelled waiter took nothing
        return fresh, during, limiter.stats(), loop.time()

    fresh, during, after, end = vrun(main())
    assert tuple(fresh) == (0, 0.0, 0, 0.0, 0.0, 0, 0, 0)
    assert tuple(during) == (3, 3.0, 1, 0.5, 0.5, 1, 1, 0)
    assert end == 0.75
    assert after.granted == 4 and after.granted_tokens == 3.5 and after.waits == 2
    assert after.wait_time_total == pytest.approx(0.55, abs=1e-9) and after.wait_time_max == 0.5


def test_a_grant_given_back_is_not_counted(lib, vrun):
    async def main() -> tuple[int, float, int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(1, 1, burst=1, initial=0)
        waiter = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)
        loop.call_at(1.0, waiter.cancel)  # runs just after the grant at t=1, before the task resumes
        await asyncio.gather(waiter, return_exceptions=True)
        stats = limiter.stats()
        return stats.granted, stats.granted_tokens, stats.cancelled

    assert vrun(main()) == (0, 0.0, 1)


def test_stats_are_a_named_tuple():
    import aiotb

    limiter = aiotb.Limiter(5, 1)
    assert limiter.try_acquire(2)
    stats = limiter.stats()
    assert isinstance(stats, aiotb.LimiterStats)
    assert stats._asdict()["granted_tokens"] == 2.0
