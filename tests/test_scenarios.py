"""Our users' jobs, as exact-time tests on a virtual clock, on both engines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


def ns(seconds: float) -> int:
    """A virtual time as integer nanoseconds, so schedules compare exactly."""
    return round(seconds * 1e9)


async def grant_times(limiter: Any, count: int, amount: float = 1) -> list[int]:
    """Starts count tasks together; each records when its acquire returned."""
    loop = asyncio.get_running_loop()
    times: list[int] = []

    async def one() -> None:
        if amount == 1:
            async with limiter:
                times.append(ns(loop.time()))
        else:
            await limiter.acquire(amount)
            times.append(ns(loop.time()))

    await asyncio.gather(*(one() for _ in range(count)))
    return times


def most_in_window(times: list[int], window: int) -> int:
    """The most grants inside any closed interval [t, t + window] (times sorted, in ns)."""
    best, first = 0, 0
    for last, t in enumerate(times):
        while times[first] < t - window:
            first += 1
        best = max(best, last - first + 1)
    return best


def test_burst_of_40_then_one_every_half_second(lib, vrun):
    times = vrun(grant_times(lib.Limiter(2, 1, burst=40), 44))
    assert times == [0] * 40 + [ns(0.5), ns(1.0), ns(1.5), ns(2.0)]


def test_asynclimiter_5_per_10s(lib, vrun):
    times = vrun(grant_times(lib.AsyncLimiter(5, 10), 15))
    assert times == [0] * 5 + [ns(2.0 * k) for k in range(1, 11)]


def test_asynclimiter_1_per_one_and_a_half_seconds(lib, vrun):
    times = vrun(grant_times(lib.AsyncLimiter(1, 1.5), 6))
    assert times == [ns(1.5 * k) for k in range(6)]


def test_500_requests_at_exactly_100_per_second(lib, vrun):
    times = vrun(grant_times(lib.Limiter(100, 1, burst=1), 500))
    assert times == [k * 10_000_000 for k in range(500)]
    for seconds in (0.01, 0.5, 1, 2.5):  # bound: burst + rate * t in any closed window of length t
        assert most_in_window(times, ns(seconds)) <= 1 + 100 * seconds


def test_burst_100_gives_at_most_burst_plus_rate_t(lib, vrun):
    times = vrun(grant_times(lib.Limiter(100, 1), 500))
    assert times[:100] == [0] * 100
    assert times[100:] == [k * 10_000_000 for k in range(1, 401)]
    for seconds in (0.01, 0.5, 1, 2.5):
        assert most_in_window(times, ns(seconds)) <= 100 + 100 * seconds


def test_initial_full_then_weighted_wait(lib, vrun):
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, initial=10)
        await limiter.acquire(10)
        first = ns(loop.time())
        await limiter.acquire(3)
        return [first, ns(loop.time())]

    assert vrun(main()) == [0, ns(0.3)]


def test_initial_tokens_below_burst(lib, vrun):
    async def main() -> tuple[bool, bool, int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(2, 1, burst=40, initial=4)
        took = limiter.try_acquire(4)
        more = limiter.try_acquire(1)
        await limiter.acquire(1)
        return took, more, ns(loop.time())

    assert vrun(main()) == (True, False, ns(0.5))


@pytest.mark.parametrize("fair", [True, False])
def test_big_request_is_not_overtaken_in_fair_mode(lib, vrun, fair):
    async def main() -> dict[str, list[int]]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, initial=0, fair=fair)
        log: dict[str, list[int]] = {"big": [], "small": []}

        async def ask(name: str, amount: float) -> None:
            await limiter.acquire(amount)
            log[name].append(ns(loop.time()))

        big = asyncio.create_task(ask("big", 5))
        await asyncio.sleep(0)  # the big request queues first
        smalls = []
        for _ in range(8):  # then a small one every 0.1 s, each as soon as a token is free
            smalls.append(asyncio.create_task(ask("small", 1)))
            await asyncio.sleep(0.1)
        await asyncio.gather(big, *smalls)
        return log

    log = vrun(main())
    if fair:
        assert log["big"] == [ns(0.5)]
        assert min(log["small"]) > ns(0.5)
    else:
        assert log["big"][0] > ns(0.5)  # aiolimiter-style newcomers took its tokens first
        assert log["small"][:4] == [ns(0.1), ns(0.2), ns(0.3), ns(0.4)]


def _cancel_case(lib, which: str):
    async def main() -> tuple[dict[str, Any], float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(1, 1, burst=1)
        assert limiter.try_acquire()  # the bucket is empty from t=0: A at 1, B at 2, C at 3
        granted: dict[str, Any] = {}

        async def ask(name: str) -> None:
            await limiter.acquire()
            granted[name] = ns(loop.time())

        tasks = {name: asyncio.create_task(ask(name)) for name in "ABC"}
        await asyncio.sleep(0)
        if which == "after grant":
            # Runs in the same loop iteration as the limiter's timer for t=1, after it:
            # A is granted but has not resumed yet when it is cancelled.
            loop.call_at(1.0, tasks["A"].cancel)
        else:
            await asyncio.sleep(0.5)
            tasks[which].cancel()
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        granted["cancelled"] = [n for n, r in zip("ABC", results) if isinstance(r, asyncio.CancelledError)]
        return granted, limiter.waiting

    return main()


def test_cancel_head_waiter_retimes_the_rest(lib, vrun):
    granted, waiting = vrun(_cancel_case(lib, "A"))
    assert granted == {"B": ns(1), "C": ns(2), "cancelled": ["A"]}
    assert waiting == 0


def test_cancel_middle_waiter(lib, vrun):
    granted, waiting = vrun(_cancel_case(lib, "B"))
    assert granted == {"A": ns(1), "C": ns(2), "cancelled": ["B"]}
    assert waiting == 0


def test_cancel_right_after_grant_gives_the_token_back(lib, vrun):
    granted, waiting = vrun(_cancel_case(lib, "after grant"))
    assert granted == {"B": ns(1), "C": ns(2), "cancelled": ["A"]}
    assert waiting == 0


def test_tokens_of_cancelled_waiters_are_not_consumed(lib, vrun):
    async def main() -> tuple[float, float]:
        limiter = lib.Limiter(10, 1, burst=10, initial=2)
        tasks = [asyncio.create_task(limiter.acquire(5)) for _ in range(20)]
        await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return limiter.tokens, limiter.waiting

    tokens, waiting = vrun(main())
    assert tokens == pytest.approx(2.5, abs=1e-9)  # 2 at start + 0.05 s * 10/s
    assert waiting == 0
