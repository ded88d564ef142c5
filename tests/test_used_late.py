"""Grants used later than they were made: the bound burst + rate * t holds where tasks use their grants.

A pass resolves a batch of grants; their tasks resume after it. Should the loop stall in between (the
interpreter given to another thread, a collection, a callback that blocks), the batch is used late, while
the rates refilled: without a reckoning, the next pass would grant that refill and its tasks would resume
beside the late batch, more than burst at once. On the virtual clock, a task of the batch stalls the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

RATE, BURST = 1000.0, 20.0


def most_over_the_bound(uses: list[float]) -> float:
    """The largest excess, over every interval of the use instants, of its uses over burst + rate * its length."""
    uses = sorted(uses)
    return max((k - i + 1) - BURST - RATE * (uses[k] - uses[i]) for k in range(len(uses)) for i in range(k + 1))


def uses_with_a_stall(lib: Any, vrun: Any, stall: float) -> list[float]:
    """Use instants of 60 tasks whose first batch (the burst, granted at once at 20 ms) is stalled by its
    first task for stall seconds before the others resume."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(RATE, 1, burst=BURST, initial=0)
        limiter.pause_until(loop.time() + 0.020)  # the bucket fills meanwhile: one pass grants the burst
        uses: list[float] = []

        async def task(i: int) -> None:
            await limiter.acquire()
            uses.append(loop.time())
            if i == 0:
                loop._now += stall  # type: ignore[attr-defined]  # the virtual clock: this step takes that long

        await asyncio.gather(*(task(i) for i in range(60)))
        return uses

    return vrun(main())


def test_a_batch_resumed_after_a_stall_spends_the_refill_it_waited_through(lib, vrun):
    uses = uses_with_a_stall(lib, vrun, 0.016)
    late = 0.020 + 0.016
    assert uses[0] == 0.020 and uses[1:20] == [late] * 19  # the batch: one task, the stall, the other 19
    assert uses[20] == late and min(uses[21:]) > late  # beside them, only the 1 token a full bucket has left
    assert most_over_the_bound(uses) <= 1e-9


def test_a_short_gap_reckons_nothing(lib, vrun):
    """A batch whose tasks resume within STALLED_AFTER of each other is used as granted: no token is spent."""
    uses = uses_with_a_stall(lib, vrun, 0.0005)
    assert uses[:20] == [0.020] + [0.020 + 0.0005] * 19
    assert max(uses) == pytest.approx(0.060)  # then a token a ms, the 40 others by 60 ms: none spent


def test_grants_given_back_before_their_tasks_resumed_are_not_reckoned(lib, vrun):
    """Of a stalled batch of 20, 10 are cancelled before they resume (their tokens come back, and each runs a
    pass as it leaves): the first pass after the stall reckons the batch first, so the bound holds, and what the
    cancelled give back is granted at once."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(RATE, 1, burst=BURST, initial=0)
        limiter.pause_until(loop.time() + 0.020)
        uses: list[float] = []
        tasks: list[asyncio.Task[None]] = []

        async def task(i: int) -> None:
            await limiter.acquire()
            uses.append(loop.time())
            if i == 0:
                for other in tasks[1:11]:
                    other.cancel()
                loop._now += 0.016  # type: ignore[attr-defined]

        tasks.extend(asyncio.ensure_future(task(i)) for i in range(60))
        await asyncio.gather(*tasks, return_exceptions=True)
        return uses

    uses = vrun(main())
    late = 0.020 + 0.016
    assert uses[0] == 0.020 and uses.count(late) == 20  # the 9 late, and the 11 a full bucket has left beside them
    assert most_over_the_bound(uses) <= 1e-9


def test_more_than_a_burst_used_late_leaves_the_rate_owing_the_rest(lib, vrun):
    """Grants other loops made for a loop that stalled (posted to it, pass after pass) can come to more than a
    burst: used at once, they stand beside the next second's refill, so the rate owes what is beyond its burst
    and the next grant waits until that has refilled too. Here 50 grants are used late, on a full rate of 20."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(RATE, 1, burst=BURST)
        await limiter.acquire()  # the limiter now reads this loop's clock; 19 of 20 left
        limiter._reckon_late(50)  # as the dispatcher does for a stalled loop's 50 unresumed grants
        start = loop.time()
        await limiter.acquire()
        return loop.time() - start

    assert vrun(main()) == pytest.approx(0.031)  # 30 owed, then 1 to take: 31 ms at 1,000/s
