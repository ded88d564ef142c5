"""The users' jobs again, on real loops (stock asyncio and uvloop) and both engines: order, counts,
cancellation, fairness and the clock fast path. Real time here only bounds how long a run may take;
exact timing is checked on the virtual clock (test_scenarios.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest


async def order_of_grants(limiter: Any, amounts: list[float], *, stagger: bool = False) -> list[int]:
    grants: list[int] = []

    async def one(index: int, amount: float) -> None:
        await limiter.acquire(amount)
        grants.append(index)

    tasks = []
    for index, amount in enumerate(amounts):
        tasks.append(asyncio.create_task(one(index, amount)))
        if stagger:
            await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return grants


def test_burst_then_fifo(lib, run):
    async def main() -> tuple[list[int], int, int]:
        limiter = lib.Limiter(2000, 1, burst=40)
        order = await order_of_grants(limiter, [1] * 44)
        return order, limiter.waiting, limiter.stats().granted

    order, waiting, granted = run(main())
    assert order == list(range(44)) and waiting == 0 and granted == 44


def test_big_request_keeps_its_place(lib, run):
    async def main() -> list[int]:
        limiter = lib.Limiter(2000, 1, burst=5, initial=0)
        return await order_of_grants(limiter, [5] + [1] * 8, stagger=True)

    assert run(main()) == list(range(9))


def test_a_newcomer_resumes_after_the_grants_before_it(lib, run):
    """A grant made late (the loop held) resumes its task through the loop's queue; a newcomer whose step was
    queued first, finding tokens left, waits behind that grant instead of taking them and running first."""
    async def main() -> list[str]:
        limiter = lib.Limiter(1000, 1, burst=10, initial=0)
        order: list[str] = []

        async def one(name: str) -> None:
            await limiter.acquire()
            order.append(name)

        first = asyncio.create_task(one("first"))
        await asyncio.sleep(0)  # queued: granted 1 ms from now
        time.sleep(0.03)  # the loop held past its grant and ten more tokens (a blocking call, as a slow loop)
        await asyncio.sleep(0)  # this task's step is queued ahead of the timer that grants it
        newcomer = asyncio.create_task(one("newcomer"))
        await asyncio.gather(first, newcomer)
        return order

    assert run(main()) == ["first", "newcomer"]


def failing_limiter(lib: Any) -> Any:
    """A Limiter class of lib whose grant passes raise StoreCorrupt, as a store fought over past its bound does,
    once its class attribute failing is set."""
    class Failing(lib.Limiter):  # type: ignore[misc, name-defined]
        failing = False

        def _grant_due(self, at: Any, owner: Any) -> Any:
            if Failing.failing:
                raise lib.package.StoreCorrupt("the store is corrupt")
            return super()._grant_due(at, owner)

    return Failing


def test_a_store_failing_in_the_loops_pass_fails_the_waiters(lib, run):
    """A pass run by the loop's timer that meets a store it cannot trust (a shared segment fought over past its
    bound raises StoreCorrupt there) fails the loop's waiters with that error: before, it went to the loop's
    exception handler and the waiter waited forever."""
    Failing = failing_limiter(lib)

    async def main() -> None:
        limiter = Failing(100, 1, burst=1)
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())  # due in 10 ms, on the loop's timer
        await asyncio.sleep(0)
        Failing.failing = True
        with pytest.raises(lib.package.StoreCorrupt, match="corrupt"):
            await asyncio.wait_for(waiter, 5)
        assert limiter.waiting == 0

    run(main())


def test_a_store_failing_in_a_cancelled_waiters_pass_fails_the_others_and_keeps_the_cancel(lib, run):
    """The pass a cancelled waiter runs on its way out meets a store it cannot trust: the waiter still ends
    cancelled (not with the store's error in place of its CancelledError), and the waiter behind it fails with
    the store's error at once, not when a timer set for the cancelled one fires."""
    Failing = failing_limiter(lib)

    async def main() -> float:
        limiter = Failing(1, 60, burst=1)  # a token a minute: nothing is granted while this runs
        await limiter.acquire()
        first = asyncio.ensure_future(limiter.acquire())
        second = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        Failing.failing = True
        first.cancel()
        started = asyncio.get_running_loop().time()
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(lib.package.StoreCorrupt, match="corrupt"):
            await asyncio.wait_for(second, 5)
        assert limiter.waiting == 0
        return asyncio.get_running_loop().time() - started

    assert run(main()) < 5


def test_asynclimiter_wakes_smallest_first(lib, run):
    async def main() -> list[int]:
        limiter = lib.AsyncLimiter(3, 0.03)  # 10 ms per unit: nothing frees up while the four queue
        await limiter.acquire(3)  # empty
        return await order_of_grants(limiter, [3, 1, 2, 1], stagger=True)

    assert run(main()) == [1, 3, 2, 0]


@pytest.mark.parametrize("which", ["head", "middle", "after grant"])
def test_cancellations_lose_nothing(lib, run, which):
    async def main() -> tuple[list[str], list[str], int]:
        limiter = lib.Limiter(200, 1, burst=1, initial=0)  # one every 5 ms
        done: list[str] = []

        async def ask(name: str) -> None:
            await limiter.acquire()
            done.append(name)

        tasks = {name: asyncio.create_task(ask(name)) for name in "ABC"}
        await asyncio.sleep(0)
        target = {"head": "A", "middle": "B", "after grant": "A"}[which]
        if which == "after grant":
            while not limiter.has_capacity() and limiter.waiting == 3:
                await asyncio.sleep(0.001)
            tasks[target].cancel()
        else:
            tasks[target].cancel()
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        cancelled = [n for n, r in zip("ABC", results) if isinstance(r, asyncio.CancelledError)]
        await limiter.acquire()  # the bucket still works, nothing is owed
        return done, cancelled, limiter.waiting

    done, cancelled, waiting = run(main())
    assert waiting == 0 and sorted(done + cancelled) == ["A", "B", "C"]
    assert done == [n for n in "ABC" if n not in cancelled]


def test_timeouts_fail_at_once(lib, run):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(2, 1, burst=1)  # the next token is 500 ms away, however slow the build
        await limiter.acquire()
        start = loop.time()
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=0.05)
        return [loop.time() - start < 0.05, limiter.waiting, limiter.tokens < 1]

    assert run(main()) == [True, 0, True]


def test_uncontended_fast_path_many_times(lib, run):
    async def main() -> tuple[int, int]:
        limiter = lib.Limiter(1e12, 1)
        for _ in range(20_000):
            async with limiter:
                pass
        stats = limiter.stats()
        return stats.granted, stats.waits

    assert run(main()) == (20_000, 0)


def test_reservation_and_window(lib, run):
    async def main() -> list[object]:
        limiter = lib.WindowLimiter(50, 0.1)  # 50 per 100 ms window
        order = await order_of_grants(limiter, [1] * 120)
        reserve = lib.Limiter(1000, 1, burst=1, initial=0).reserve()
        await reserve
        return [order == list(range(120)), limiter.waiting, reserve.done()]

    assert run(main()) == [True, 0, True]
