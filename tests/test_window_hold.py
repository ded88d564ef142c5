"""A window holds the grants of ``async with``, ``slot()``, the decorators and ``with`` until the block
exits: each counts in every window from its grant until ``time_period`` after the exit, so a request
sent anywhere inside the block is counted wherever the server sees it. A bare ``acquire()`` counts
from its grant. Exact times on the virtual clock, for both engines; ``retry_after`` alongside."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import random
import threading
import time
from typing import Any

import pytest
from test_scenarios import ns


async def _enter_for(limiter: Any, seconds: float, log: list[tuple[int, int]]) -> None:
    """``async with limiter:`` around a body of seconds; logs (grant, exit) in ns."""
    loop = asyncio.get_running_loop()
    async with limiter:
        granted = ns(loop.time())
        await asyncio.sleep(seconds)
    log.append((granted, ns(loop.time())))


def test_a_window_counts_an_async_with_until_a_period_after_its_exit(lib, vrun):
    async def main() -> list[tuple[int, int]]:
        limiter, log = lib.WindowLimiter(2, 1), []
        await asyncio.gather(_enter_for(limiter, 0.5, log), _enter_for(limiter, 0.25, log),
                             _enter_for(limiter, 0, log))
        return sorted(log)

    # the third waits for the first exit (0.25 s) plus the period, not for the grants' period
    assert vrun(main()) == [(0, ns(0.25)), (0, ns(0.5)), (ns(1.25), ns(1.25))]


def test_a_block_longer_than_the_period_holds_its_grant_throughout(lib, vrun):
    async def main() -> list[object]:
        limiter, log, tokens = lib.WindowLimiter(1, 1), [], []
        first = asyncio.create_task(_enter_for(limiter, 3, log))
        await asyncio.sleep(2)
        tokens.append(limiter.tokens)  # a grant of 0 s, still in use at 2 s
        await _enter_for(limiter, 0, log)
        await first
        await asyncio.sleep(1)
        tokens.append(limiter.tokens)
        return [sorted(log), tokens]

    assert vrun(main()) == [[(0, ns(3)), (ns(4), ns(4))], [0.0, 1.0]]


def test_a_bare_acquire_counts_from_its_grant(lib, vrun):
    async def main() -> list[int]:
        loop, limiter = asyncio.get_running_loop(), lib.WindowLimiter(1, 1)
        await limiter.acquire()
        await asyncio.sleep(0.5)
        await limiter.acquire()
        return [ns(loop.time())]

    assert vrun(main()) == [ns(1)]


def test_a_slot_holds_its_amount_and_can_end_its_hold_early(lib, vrun):
    async def main() -> list[int]:
        loop, limiter, times = asyncio.get_running_loop(), lib.WindowLimiter(10, 1), []
        async with limiter.slot(6):
            await asyncio.sleep(0.5)
        await limiter.acquire(5)  # the 6 leave at 1.5 s
        times.append(ns(loop.time()))

        async def all_ten() -> None:
            await limiter.acquire(10)
            times.append(ns(loop.time()))

        slot = limiter.slot(5)  # 5 + 5 in the window from 1.5 s: full
        async with slot:
            waiter = asyncio.create_task(all_ten())
            await asyncio.sleep(0.25)
            slot.release()  # say, the response was read: the rest of the block is not a request
            slot.release()  # once only
            await asyncio.sleep(5)
        await waiter  # the 5 of 1.5 s leave at 2.5 s, the released 5 at 2.75 s
        return times

    assert vrun(main()) == [ns(1.5), ns(2.75)]


def test_a_block_that_raises_or_is_cancelled_ends_its_hold(lib, vrun):
    async def main() -> list[int]:
        loop, limiter = asyncio.get_running_loop(), lib.WindowLimiter(2, 1)
        with pytest.raises(KeyError):
            async with limiter:
                await asyncio.sleep(0.25)
                raise KeyError("request failed")
        task = asyncio.create_task(_enter_for(limiter, 10, []))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await limiter.acquire(2)
        return [ns(loop.time())]

    assert vrun(main()) == [ns(1.75)]  # the cancelled one entered at 0.25 s and left its block at 0.75 s


def test_a_waiter_of_async_with_that_is_cancelled_leaves_no_hold(lib, vrun):
    async def main() -> list[float]:
        limiter = lib.WindowLimiter(1, 1)
        await limiter.acquire()
        task = asyncio.create_task(_enter_for(limiter, 0, []))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)
        return [limiter.tokens, limiter.waiting]

    assert vrun(main()) == [1.0, 0]


def test_the_decorator_of_a_window_holds_until_the_call_returns(lib, vrun):
    async def main() -> list[int]:
        loop, window, bucket = asyncio.get_running_loop(), lib.WindowLimiter(1, 1), lib.Limiter(1, 1, burst=1)
        starts: list[int] = []

        @window.limit(lambda seconds: 1)
        async def held(seconds: float) -> None:
            starts.append(ns(loop.time()))
            await asyncio.sleep(seconds)

        @bucket
        async def paced(seconds: float) -> None:
            starts.append(ns(loop.time()))
            await asyncio.sleep(seconds)

        await held(0.5)
        await held(0)  # 0.5 s + 1 s
        await paced(0.5)
        await paced(0)  # a bucket paces starts: 1 s after the first
        return starts

    assert vrun(main()) == [0, ns(1.5), ns(1.5), ns(2.5)]


def test_a_bucket_holds_nothing(lib, vrun):
    async def main() -> list[tuple[int, int]]:
        limiter, log = lib.Limiter(2, 1, burst=2), []
        await asyncio.gather(_enter_for(limiter, 5, log), _enter_for(limiter, 5, log), _enter_for(limiter, 0, log))
        return sorted(log)

    assert vrun(main()) == [(0, ns(5)), (0, ns(5)), (ns(0.5), ns(0.5))]


@pytest.mark.parametrize("seed", range(12))
def test_requests_sent_anywhere_inside_their_blocks_keep_every_window(lib, vrun, seed):
    """Random bodies, each request sent at a random instant of its block (the server's arrival):
    no window of the period sees more than the limit, and every grant that waited came at the first
    instant the rule allowed: as a held grant left (its exit plus the period) or behind the one before."""
    rng = random.Random(seed)
    limit, period = rng.choice([(1, 1.0), (3, 1.0), (5, 0.5)])
    bodies = [rng.choice([0, 0.001, 0.1, 0.3, 0.7, 1.3, 2.5]) for _ in range(40)]

    async def main() -> tuple[list[tuple[int, int]], list[int]]:
        limiter, log, sent = lib.WindowLimiter(limit, period), [], []

        async def one(body: float, delay: float) -> None:
            loop = asyncio.get_running_loop()
            await asyncio.sleep(delay)
            async with limiter:
                granted = ns(loop.time())
                at = rng.uniform(0, body)
                await asyncio.sleep(at)
                sent.append(ns(loop.time()))
                await asyncio.sleep(body - at)
            log.append((granted, ns(loop.time())))

        await asyncio.gather(*(one(b, rng.choice([0, 0, 0.2, 1.1])) for b in bodies))
        return log, sorted(sent)

    log, sent = vrun(main())
    span = ns(period)
    for i, t in enumerate(sent):
        inside = sum(1 for s in sent[i:] if s < t + span)
        assert inside <= limit, (t, inside)
    grants = sorted(g for g, _ in log)
    leaves = {exit + span for _, exit in log}
    arrivals = {0, ns(0.2), ns(1.1)}
    for i, g in enumerate(grants):
        assert g in arrivals or g in leaves or (i > 0 and g == grants[i - 1]), g


def test_with_in_a_thread_holds_a_windows_token_until_the_block_exits(lib):
    limiter, period = lib.WindowLimiter(1, 0.2), 0.2
    exited: list[float] = []

    def first() -> None:
        with limiter:
            time.sleep(0.3)
        exited.append(time.monotonic())

    thread = threading.Thread(target=first)
    thread.start()
    thread.join()
    limiter.acquire_blocking()
    granted = time.monotonic()
    assert granted >= exited[0] + period - 0.002  # the clock's and the lock's granularity, never later than due


# ---- Retry-After ----

def test_retry_after_pauses_for_delta_seconds_or_a_number(lib, vrun):
    async def main() -> list[float]:
        loop, limiter = asyncio.get_running_loop(), lib.Limiter(100, 1)
        paused = [limiter.retry_after("2"), limiter.retry_after(b" 1.5 "), limiter.retry_after(0.5)]
        await limiter.acquire()
        return [*paused, loop.time()]

    assert vrun(main()) == [2.0, 1.5, 0.5, 2.0]


def test_retry_after_takes_an_http_date_on_the_wall_clock(lib, vrun):
    async def main() -> list[float]:
        loop, limiter = asyncio.get_running_loop(), lib.Limiter(100, 1)
        soon = email.utils.format_datetime(datetime.datetime.now(datetime.timezone.utc)
                                           + datetime.timedelta(seconds=30), usegmt=True)
        paused = limiter.retry_after(soon)
        past = limiter.retry_after("Sun, 06 Nov 1994 08:49:37 GMT")
        await limiter.acquire()
        return [paused, past, loop.time()]

    paused, past, granted = vrun(main())
    assert 28 < paused <= 30 and past == 0 and granted == paused  # the date has whole seconds


@pytest.mark.parametrize("value, error", [
    ("soon", ValueError), ("-1", ValueError), ("", ValueError), ("1e3", ValueError), (-1, ValueError),
    (float("nan"), ValueError), (float("inf"), ValueError), (None, TypeError), (True, TypeError), ([1], TypeError),
])
def test_retry_after_refuses_bad_values_and_changes_nothing(lib, vrun, value, error):
    async def main() -> list[float]:
        limiter = lib.Limiter(100, 1)
        with pytest.raises(error, match="value"):
            limiter.retry_after(value)
        return [limiter.tokens]

    assert vrun(main()) == [100.0]


def test_a_timeout_holds_while_grants_stay_in_use_longer_than_projected(lib, vrun):
    async def main() -> list[object]:
        loop, limiter = asyncio.get_running_loop(), lib.WindowLimiter(1, 1)
        holder = asyncio.create_task(_enter_for(limiter, 5, []))
        await asyncio.sleep(0.125)
        with pytest.raises(TimeoutError):  # even were the hold to end now, not within 0.5 s
            await limiter.acquire(timeout=0.5)
        refused_at = loop.time()
        try:  # were the hold to end now, at 1.125 s: accepted; it stays in use, so it fails at its deadline
            await limiter.acquire(timeout=2)
        except TimeoutError:
            failed_at = loop.time()
        await holder
        await limiter.acquire(timeout=1)
        return [refused_at, failed_at, loop.time(), limiter.stats().timeouts, limiter.stats().cancelled]

    assert vrun(main()) == [0.125, 2.125, 6.0, 1, 1]


def test_a_slot_says_whether_it_holds(lib, vrun):
    async def main() -> list[bool]:
        window, bucket = lib.WindowLimiter(2, 1), lib.Limiter(2, 1)
        seen = []
        slot = window.slot()
        seen.append(slot.held)
        async with slot:
            seen.append(slot.held)
        seen.append(slot.held)
        paced = bucket.slot()
        async with paced:
            seen.append(paced.held)  # a bucket holds nothing
        return seen

    assert vrun(main()) == [False, True, False, False]


@pytest.mark.parametrize("call", ["penalize", "retry_after"])
def test_a_pause_beyond_the_engines_range_names_its_parameter(lib, vrun, call):
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        name = "seconds" if call == "penalize" else "value"
        with pytest.raises(ValueError, match=f"^{name} must be below"):
            getattr(limiter, call)(3e8)
        if call == "retry_after":
            with pytest.raises(ValueError, match="^value must be below"):
                limiter.retry_after("999999999999")
        return limiter.tokens

    assert vrun(main()) == 10.0
