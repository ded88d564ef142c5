"""Reservations, several rates at once, rate changes, pauses and strict windows, on both engines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_scenarios import grant_times, most_in_window, ns

# ---- reservations ----

def test_reservation_says_when_and_waits_until_then(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1, initial=0)
        first, second = limiter.reserve(), limiter.reserve(2 / 2)
        told = [first.ready_at, first.delay, second.ready_at, second.delay, limiter.waiting]
        await first
        at_first = ns(loop.time())
        await second
        return told + [at_first, ns(loop.time())]

    assert vrun(main()) == [0.1, 0.1, 0.2, 0.2, 2, ns(0.1), ns(0.2)]


def test_cancelled_reservation_retimes_those_behind(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1, initial=0)
        first, second = limiter.reserve(), limiter.reserve()
        assert first.cancel() and not first.cancel()
        await second
        return [ns(loop.time()), limiter.waiting]

    assert vrun(main()) == [ns(0.1), 0]


def test_granted_reservation_gives_tokens_back_when_cancelled(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(5, 1)
        reservation = limiter.reserve(3)  # granted at once: tokens available, nobody waits
        before = [reservation.delay, reservation.done(), limiter.tokens]
        assert reservation.cancel()
        return before + [limiter.tokens, limiter.stats().granted]

    assert vrun(main()) == [0.0, True, 2.0, 5.0, 0]


def test_cancelling_the_awaiting_task_cancels_the_reservation(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1, initial=0)
        doomed = limiter.reserve()
        waiter = asyncio.create_task(doomed.__await__().__next__() if False else _await(doomed))
        await asyncio.sleep(0.05)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await limiter.acquire()
        return [ns(loop.time()), limiter.waiting]

    assert vrun(main()) == [ns(0.1), 0]


async def _await(reservation: Any) -> None:
    await reservation


def test_newcomers_do_not_jump_a_reservation_in_unfair_mode(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, initial=2, fair=False)
        big = limiter.reserve(5)  # promised at 0.3 s
        took = limiter.try_acquire(1)
        await big
        return [big.ready_at, took, ns(loop.time())]

    assert vrun(main()) == [0.3, False, ns(0.3)]


def test_asynclimiter_has_no_reservations(lib):
    async def main() -> None:
        with pytest.raises(TypeError, match="no reservations"):
            lib.AsyncLimiter(1).reserve()

    asyncio.run(main())


# ---- several rates at once ----

def test_two_rates_checked_atomically(lib, vrun):
    async def main() -> tuple[list[int], list[float]]:
        limiter = lib.Limiter(rates=[(10, 1), (20, 60)])  # 10 per second and 20 per minute
        times = await grant_times(limiter, 24)
        return times, [round(limiter.tokens, 9)]

    times, _ = vrun(main())
    assert times == [0] * 10 + [ns(k / 10) for k in range(1, 11)] + [ns(3.0 * k) for k in range(1, 5)]


def test_no_tokens_held_in_one_rate_while_waiting_for_another(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(rates=[(10, 1), (6, 60)], fair=False)  # 10/s and 1 every 10 s
        await limiter.acquire(5)  # the per-second rate holds 5, the per-minute rate 1
        waiter = asyncio.create_task(limiter.acquire(3))  # waits for the per-minute rate only
        await asyncio.sleep(1)
        seen = [round(limiter.tokens, 9), limiter.try_acquire(1)]  # nothing of the 10/s rate is held for it
        await waiter
        return seen + [ns(loop.time()), limiter.rates]

    assert vrun(main()) == [1.1, True, ns(30), ((10.0, 1.0, 10.0), (6.0, 60.0, 6.0))]


def test_amount_is_bounded_by_the_smallest_burst(lib):
    limiter = lib.Limiter(rates=[(100, 1), (1000, 3600, 20)])
    assert limiter.burst == 20
    with pytest.raises(ValueError, match=r"amount must not exceed burst \(20.0\)"):
        limiter.try_acquire(21)


@pytest.mark.parametrize("rates, error, text", [
    ([], ValueError, "rates must hold 1 to 4 rates"),
    ([(1, 1)] * 5, ValueError, "rates must hold 1 to 4 rates"),
    ([(10, 1), (0, 60)], ValueError, r"rates\[1\] max_rate must be finite and > 0, got 0"),
    ([(10, 1), (5, "60")], TypeError, r"rates\[1\] time_period must be a real number"),
    ([(10, 1, 0.5)], ValueError, r"rates\[0\] burst must be >= 1"),
    ([(10, 1, 5, 6)], ValueError, r"rates\[0\] initial must be between 0 and burst"),
    ([(10,)], TypeError, r"rates\[0\] must be a tuple"),
    ([[10, 1]], TypeError, r"rates\[0\] must be a tuple"),
    ("10/s", TypeError, "rates must be a list or tuple"),
    ({(10, 1): 1}, TypeError, "rates must be a list or tuple"),
])
def test_bad_rates(lib, rates, error, text):
    with pytest.raises(error, match=text):
        lib.Limiter(rates=rates)


def test_rates_replace_the_single_rate_arguments(lib):
    with pytest.raises(TypeError, match="rates= takes the place"):
        lib.Limiter(10, 1, rates=[(10, 1)])


# ---- rate changes and pauses ----

def test_set_rate_retimes_the_queue_at_once(lib, vrun):
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1, initial=0)
        times: list[int] = []

        async def one() -> None:
            await limiter.acquire()
            times.append(ns(loop.time()))

        tasks = [asyncio.create_task(one()) for _ in range(5)]
        await asyncio.sleep(0.25)  # granted at 0.1 and 0.2; half a token held
        limiter.set_rate(2)  # now one every 0.5 s, the half token kept
        await asyncio.gather(*tasks)
        return times

    assert vrun(main()) == [ns(0.1), ns(0.2), ns(0.5), ns(1.0), ns(1.5)]


def test_set_rate_clamps_to_a_smaller_burst(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(10, 1)
        limiter.set_rate(10, burst=3)
        return [limiter.tokens, limiter.burst, limiter.rates]

    assert vrun(main()) == [3.0, 3.0, ((10.0, 1.0, 3.0),)]


def test_set_rate_fails_waiters_it_strands(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(10, 1, burst=10, initial=0)
        late = asyncio.create_task(limiter.acquire(1, timeout=0.5))  # admitted for 0.1 s
        big = asyncio.create_task(limiter.acquire(8))
        await asyncio.sleep(0)
        limiter.set_rate(1, burst=5)  # 1 per second: `late` cannot make 0.5 s; 8 > burst 5
        results = await asyncio.gather(late, big, return_exceptions=True)
        return [type(r).__name__ for r in results] + [limiter.waiting]

    assert vrun(main()) == ["TimeoutError", "ValueError", 0]


def test_penalize_grants_nothing_until_then(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1)
        await limiter.acquire()
        limiter.penalize(2)  # Retry-After: 2
        during = [limiter.try_acquire(), limiter.has_capacity(), limiter.tokens]
        limiter.pause_until(1)  # earlier than the penalty: no effect
        await limiter.acquire()
        return during + [ns(loop.time()), limiter.tokens]

    assert vrun(main()) == [False, False, 0.0, ns(2), 9.0]


@pytest.mark.parametrize("seconds, error", [(-1, ValueError), (float("nan"), ValueError),
                                            (float("inf"), ValueError), ("1", TypeError), (True, TypeError)])
def test_bad_penalties(lib, vrun, seconds, error):
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        with pytest.raises(error, match="seconds"):
            limiter.penalize(seconds)
        return limiter.tokens

    assert vrun(main()) == 10.0


def test_bad_rate_changes_change_nothing(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(10, 1)
        with pytest.raises(ValueError, match="max_rate"):
            limiter.set_rate(0)
        with pytest.raises(ValueError, match="burst must be >= 1"):
            limiter.set_rate(5, burst=0.5)
        with pytest.raises(IndexError, match="index"):
            limiter.set_rate(5, index=1)
        with pytest.raises(TypeError, match="index"):
            limiter.set_rate(5, index="0")
        return [limiter.rates, limiter.tokens]

    assert vrun(main()) == [((10.0, 1.0, 10.0),), 10.0]


# ---- strict windows ----

def test_window_allows_the_limit_in_any_window_and_no_more(lib, vrun):
    times = vrun(grant_times(lib.WindowLimiter(100, 1), 250))
    assert times == [0] * 100 + [ns(1)] * 100 + [ns(2)] * 50
    assert most_in_window(times, ns(1) - 1) == 100  # any [t, t + 1 s)


def test_a_bucket_allows_burst_plus_rate_where_a_window_does_not(lib, vrun):
    bucket = vrun(grant_times(lib.Limiter(100, 1), 250))
    window = vrun(grant_times(lib.WindowLimiter(100, 1), 250))
    assert most_in_window(bucket, ns(1) - 1) == 199
    assert most_in_window(window, ns(1) - 1) == 100


def test_window_with_weighted_amounts_and_a_change(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.WindowLimiter(10, 1)
        await limiter.acquire(6)
        await limiter.acquire(4)
        await limiter.acquire(6)  # waits for the first 6 to leave the window
        first = ns(loop.time())
        limiter.set_rate(10, 2)  # a 2 s window now
        await limiter.acquire(5)
        return [first, ns(loop.time()), limiter.tokens, (limiter.max_rate, limiter.time_period)]

    # the grants at 0 s had left the 1 s window's log; the 6 of 1 s counts for 2 s now
    assert vrun(main()) == [ns(1), ns(3), 5.0, (10.0, 2.0)]


def test_window_refuses_burst_and_initial(lib):
    with pytest.raises(TypeError):
        lib.WindowLimiter(10, 1, burst=5)
    with pytest.raises(ValueError, match="time_period"):
        lib.WindowLimiter(10, 1e-12)
