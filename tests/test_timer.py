"""One timer per limiter, no polling, and no spinning on a loop that fires timers early."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_scenarios import most_in_window

from aiotb._bucket_py import LATE_CREDIT_TOKENS  # the C engine's is checked equal below, through lib
from virtual_loop import VirtualClockLoop, run_virtually


class CountingLoop(VirtualClockLoop):
    """Records every timer it is asked for, to check how many a limiter keeps alive."""

    def __init__(self) -> None:
        super().__init__()
        self.timers: list[asyncio.TimerHandle] = []
        self.most_alive = 0

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        handle = super().call_at(when, callback, *args, context=context)
        if getattr(callback, "__name__", "") == "_on_timer":
            self.timers.append(handle)
            alive = [t for t in self.timers if not t.cancelled() and t.when() >= self.time() and t in self._scheduled]
            self.most_alive = max(self.most_alive, len(alive))
        return handle


class EarlyLoop(CountingLoop):
    """Fires timers up to 0.8 ms before their time, as uvloop does when it rounds to whole milliseconds."""

    def __init__(self) -> None:
        super().__init__()
        self._clock_resolution = 0.001  # asyncio runs timers due before now + resolution

    def advance_to_next_timer(self) -> None:
        scheduled = self._scheduled
        if scheduled and scheduled[0].when() > self._now:
            self._now = max(self._now, scheduled[0].when() - 0.0008)


def run_waiters(lib: Any, loop: CountingLoop, count: int) -> list[float]:
    async def main() -> list[float]:
        limiter = lib.Limiter(100, 1, burst=1)
        times: list[float] = []

        async def one() -> None:
            async with limiter:
                times.append(loop.time())

        await asyncio.gather(*(one() for _ in range(count)))
        return times

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_one_timer_for_many_waiters(lib):
    loop = CountingLoop()
    times = run_waiters(lib, loop, 200)
    assert len(times) == 200
    assert loop.most_alive == 1
    assert len(loop.timers) == 199  # one per wake-up, none per waiter or per poll


def test_early_timers_are_rearmed_not_polled(lib):
    loop = EarlyLoop()
    times = run_waiters(lib, loop, 50)
    late = [t - k / 100 for k, t in enumerate(times)]
    assert min(late) >= -1e-12  # never granted before its time
    assert max(late) <= 0.0012  # re-armed once, a millisecond later at most
    assert len(loop.timers) <= 2 * 49  # at most one extra timer per early wake
    assert loop.most_alive == 1


class LateLoop(CountingLoop):
    """Fires every timer `late` seconds late, as asyncio does when epoll rounds a timeout up to whole ms
    (0.7 ms), or a busy 2-core machine at worst (5.4 ms seen)."""

    def __init__(self, late: float = 0.0007) -> None:
        super().__init__()
        self.late = late

    def advance_to_next_timer(self) -> None:
        scheduled = self._scheduled
        if scheduled and scheduled[0].when() > self._now:
            self._now = scheduled[0].when() + self.late


def test_late_timers_do_not_slow_the_rate(lib):
    times = run_waiters(lib, LateLoop(), 200)
    spacing = (times[-1] - times[1]) / 198
    assert spacing == pytest.approx(0.01, abs=1e-12)  # 100/s exactly, not 1 / (10.7 ms)
    assert all(0 <= t - k / 100 <= 0.0007 + 1e-12 for k, t in enumerate(times))


def test_a_long_stall_is_not_made_up_with_a_burst(lib):
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(100, 1, burst=1)
        times: list[float] = []

        async def one() -> None:
            async with limiter:
                times.append(loop.time())

        tasks = [asyncio.create_task(one()) for _ in range(20)]
        await asyncio.sleep(0)
        loop._now += 0.1  # the loop is blocked for 100 ms: ten waiters' turns pass
        await asyncio.gather(*tasks)
        return times

    times = [round(t * 1e9) for t in run_virtually(main())]
    # at most the late credit (under a token) of a token's time is made up: never a whole token over 1 + 100/s * t
    assert times[0] == 0 and times[1] == 100_000_000  # one grant, not ten, when the stall ends
    for window in (1, 50_000, 9_999_999, 10_000_000, 100_000_000, 1_000_000_000):
        assert most_in_window(times, window) <= 1 + 100 * window / 1e9 + LATE_CREDIT_TOKENS


def test_lateness_under_a_token_does_not_slow_the_rate(lib):
    times = run_waiters(lib, LateLoop(0.0054), 100)
    assert (times[-1] - times[1]) / 98 == pytest.approx(0.01, abs=1e-12)  # still exactly 100/s


@pytest.mark.parametrize("amount", [1, 2])
def test_waiters_granted_in_one_pass_resume_in_grant_order(lib, amount):
    """A loop that ran late lets a newcomer's own enqueue grant the waiter ahead of it and then the
    newcomer itself, in one pass: the one granted first must also resume first."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(1000, 1, burst=2 * amount, initial=0)  # a token a millisecond
        resumed: list[int] = []

        async def one(index: int) -> None:
            await limiter.acquire(amount)
            resumed.append(index)

        ahead = asyncio.create_task(one(0))
        await asyncio.sleep(0)  # queued; its timer is for 1 ms (or 2 ms)
        loop._now += 0.002 * amount  # the loop was busy: both turns have come before the timer ran
        behind = asyncio.create_task(one(1))
        await asyncio.gather(ahead, behind)
        assert limiter.stats().waits == 2 and limiter.waiting == 0
        return resumed

    assert run_virtually(main()) == [0, 1]


class CountingPasses:
    """A limiter class on lib that counts its grant passes."""

    @staticmethod
    def of(base: Any) -> Any:
        class Counted(base):  # type: ignore[misc, valid-type]
            passes = 0

            def _grant_due(self, at: float | None, owner: object) -> Any:
                type(self).passes += 1
                return super()._grant_due(at, owner)

        return Counted


def test_queueing_behind_a_waiter_not_yet_due_runs_no_grant_pass(lib):
    Counted = CountingPasses.of(lib.Limiter)
    loop = CountingLoop()

    async def main() -> list[float]:
        limiter = Counted(100, 1, burst=1)
        times: list[float] = []

        async def one() -> None:
            async with limiter:
                times.append(loop.time())

        await asyncio.gather(*(one() for _ in range(200)))
        return times

    try:
        times = loop.run_until_complete(main())
    finally:
        loop.close()
    assert times == pytest.approx([k / 100 for k in range(200)], abs=1e-9)
    assert Counted.passes == 1 + 199  # the first waiter's, then one per timer: none per newcomer behind


def test_a_newcomer_leaves_an_overdue_timer_to_grant_when_the_loop_gets_to_it(lib):
    """The loop was busy past the timer's instant: a newcomer's pass there would grant the overdue
    waiter at once, though its task can only resume after the loop's current iteration, with every
    other grant made meanwhile (a burst where the server sees it). The timer grants it instead."""
    loop = VirtualClockLoop()
    passes: list[tuple[float, float | None, int]] = []  # (loop time, the timer's instant, grants)

    class Logged(lib.Limiter):  # type: ignore[misc, name-defined]
        def _grant_due(self, at: float | None, owner: object) -> Any:
            result = super()._grant_due(at, owner)
            passes.append((round(loop.time(), 9), at, len(result[0])))
            return result

    async def main() -> list[float]:
        limiter = Logged(100, 1, burst=1)
        await limiter.acquire()
        granted: list[float] = []

        async def take() -> None:
            await limiter.acquire()
            granted.append(round(loop.time(), 9))

        first = asyncio.ensure_future(take())
        await asyncio.sleep(0)  # queued, its timer at 0.01
        loop._now += 0.05  # the loop was busy past the timer
        second = asyncio.ensure_future(take())
        await asyncio.gather(first, second)
        return granted

    try:
        granted = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [n for now, at, n in passes if at is None and now == 0.05] == []  # no newcomer's pass
    assert (0.05, 0.01, 1) in passes  # the timer's pass grants the overdue waiter, alone
    # one late wake-up: the first booked the late credit early (under a token), the second one
    # interval after that, never two together
    assert granted[0] == 0.05 and granted[1] - granted[0] == pytest.approx(0.01 * (1 - LATE_CREDIT_TOKENS), abs=1e-9)


def test_a_smaller_newcomer_of_asynclimiter_is_timed_ahead_of_the_waiters(lib):
    loop = VirtualClockLoop()

    async def main() -> list[str]:
        limiter = lib.AsyncLimiter(10, 1)
        await limiter.acquire(10)
        order: list[str] = []

        async def take(name: str, amount: float) -> None:
            await limiter.acquire(amount)
            order.append(f"{name}@{loop.time():.2f}")

        big = asyncio.ensure_future(take("big", 8))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(take("small", 1))
        await asyncio.gather(big, small)
        return order

    try:
        assert loop.run_until_complete(main()) == ["small@0.10", "big@0.90"]
    finally:
        loop.close()
