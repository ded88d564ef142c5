"""The public surface of Limiter and AsyncLimiter, on both engines."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import sys
import time
from fractions import Fraction

import aiotb
import pytest
from test_scenarios import ns

MODULE_LIMITER = aiotb.Limiter(1, 1)  # made at import time, outside any loop


def test_c_engine_is_the_default():
    expected = "python" if os.environ.get("AIOTB_NO_EXTENSIONS", "") not in ("", "0") else "c"
    assert aiotb.IMPLEMENTATION == expected
    assert aiotb.Limiter.__mro__[-2].__module__ == ("aiotb._tokenbucket" if expected == "c" else "aiotb._bucket_py")


def test_attributes_and_defaults(lib):
    limiter = lib.Limiter(100, 2)
    assert (limiter.max_rate, limiter.time_period, limiter.burst, limiter.rate, limiter.fair) == (100, 2, 100, 50, True)
    assert lib.Limiter(100).time_period == 60
    assert lib.Limiter(0.5, 1).burst == 1  # a burst below the default amount of 1 would never grant it
    assert lib.Limiter(2, 1, burst=40, initial=7).tokens == 7
    assert lib.Limiter(100, 1, fair=False).fair is False
    assert lib.AsyncLimiter(0.5, 1).burst == 0.5  # aiolimiter's capacity is max_rate, whatever it is
    assert lib.AsyncLimiter(42, 81).fair is False
    text = repr(lib.Limiter(2, 1, burst=40))
    assert "Limiter(max_rate=2.0, time_period=1.0, burst=40.0, fair=True)" in text and "waiting=0" in text


def test_try_acquire_never_jumps_the_queue_in_fair_mode(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(10, 1, initial=2)
        waiter = asyncio.create_task(limiter.acquire(5))
        await asyncio.sleep(0)
        seen = [limiter.waiting, limiter.try_acquire(1), limiter.has_capacity(1), limiter.tokens]
        await waiter
        unfair = lib.Limiter(10, 1, initial=2, fair=False)
        waiter = asyncio.create_task(unfair.acquire(5))
        await asyncio.sleep(0)
        seen += [unfair.has_capacity(1), unfair.try_acquire(1), unfair.tokens]
        waiter.cancel()
        return seen

    assert vrun(main()) == [1, False, False, 2.0, True, True, 1.0]


def test_has_capacity_consumes_nothing(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(1, 1)
        return [limiter.has_capacity(), limiter.has_capacity(), limiter.tokens,
                limiter.try_acquire(), limiter.has_capacity(), limiter.tokens]

    assert vrun(main()) == [True, True, 1.0, True, False, 0.0]


def test_timeout_fails_at_once_and_takes_nothing(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, initial=0)
        queued = asyncio.create_task(limiter.acquire(5))  # granted at 0.5 s
        await asyncio.sleep(0)
        before = (limiter.tokens, limiter.waiting)
        with pytest.raises(TimeoutError):
            await limiter.acquire(3, timeout=0.799)  # would be granted at 0.8 s
        after = (limiter.tokens, limiter.waiting, ns(loop.time()))
        await limiter.acquire(3, timeout=0.8)  # exactly in time
        granted_at = ns(loop.time())
        await queued
        return [before, after, granted_at]

    assert vrun(main()) == [(0.0, 1), (0.0, 1, 0), ns(0.8)]


def test_zero_timeout_is_try_or_fail(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(1, 1)
        await limiter.acquire(1, timeout=0)
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=0)
        return [limiter.tokens, limiter.waiting]

    assert vrun(main()) == [0.0, 0]


def test_acquire_takes_tokens_only_when_awaited(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(1, 1)
        never_awaited = limiter.acquire()
        never_awaited.close()
        task = asyncio.create_task(limiter.acquire())
        task.cancel()  # before it ever ran
        with pytest.raises(asyncio.CancelledError):
            await task
        tokens = limiter.tokens
        result = await asyncio.wait_for(limiter.acquire(), 1)
        async with limiter as entered:
            pass
        gathered = await asyncio.gather(limiter.acquire(), asyncio.ensure_future(limiter.acquire()))
        return [tokens, result, entered, gathered, limiter.waiting]

    assert vrun(main()) == [1.0, None, None, [None, None], 0]


def test_exception_in_body_keeps_the_grant(lib, vrun):
    async def main() -> float:
        limiter = lib.Limiter(5, 1)
        with pytest.raises(ZeroDivisionError):
            async with limiter:
                1 / 0
        return limiter.tokens

    assert vrun(main()) == 4.0


def test_subclasses_keep_their_overrides(lib, vrun):
    entered: list[str] = []

    class Counting(lib.Limiter):
        async def __aenter__(self) -> None:
            entered.append(type(self).__name__)
            await super().__aenter__()

    class Deeper(Counting):  # inherits the override, not the engine's method
        pass

    class Plain(lib.Limiter):
        def try_acquire(self, amount: float = 1) -> bool:
            return False

    async def main() -> list[float]:
        limiters = [Counting(5, 1), Deeper(5, 1), Plain(5, 1)]
        for limiter in limiters:
            async with limiter:
                pass
        return [limiter.tokens for limiter in limiters] + [limiters[2].try_acquire()]

    assert vrun(main()) == [4.0, 4.0, 4.0, False]
    assert entered == ["Counting", "Deeper"]


def test_methods_still_check_their_instance(lib):
    with pytest.raises((TypeError, AttributeError)):
        lib.Limiter.__aenter__(object())  # type: ignore[arg-type]
    with pytest.raises((TypeError, AttributeError)):
        lib.AsyncLimiter.try_acquire(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        type("Keyword", (lib.Limiter,), {}, extra=1)  # class keywords still reach object.__init_subclass__


def test_limiter_reused_across_runs_and_clocks(lib, vrun, run):
    limiter = lib.Limiter(100, 1, burst=1)  # one token every 10 ms

    async def take_two() -> int:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await limiter.acquire()
        await limiter.acquire()
        return round((loop.time() - start) * 1000)

    assert vrun(take_two()) == 10  # virtual clock from 0: a full bucket, then one token later
    assert vrun(take_two()) == 20  # a new virtual clock: the 10 ms of debt carries over, exactly
    assert 19 <= run(take_two()) <= 200  # a real loop: the same, late by the loop's lateness at most


def test_module_level_limiter(lib, vrun):
    async def main() -> tuple[bool, bool]:
        return MODULE_LIMITER.try_acquire(), MODULE_LIMITER.try_acquire()

    if lib.name == aiotb.IMPLEMENTATION:
        assert vrun(main()) == (True, False)


def test_a_second_loop_queues_behind_the_waiters_of_the_first(lib):
    """Two open loops share one queue (here in one thread, taking turns): the second loop's request
    is behind the first loop's waiter, so a timeout it cannot meet fails at once; once that waiter
    leaves, the second loop is served in its place."""
    limiter = lib.Limiter(1, 0.2, initial=0)  # a token every 0.2 s
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()
    try:
        waiter = first.create_task(limiter.acquire())
        first.run_until_complete(asyncio.sleep(0))
        assert limiter.waiting == 1
        with pytest.raises(TimeoutError):
            second.run_until_complete(limiter.acquire(timeout=0.3))  # due at 0.4 s, behind it
        assert limiter.waiting == 1 and limiter.stats().timeouts == 1
        waiter.cancel()
        first.run_until_complete(asyncio.gather(waiter, return_exceptions=True))
        assert limiter.waiting == 0
        second.run_until_complete(limiter.acquire(timeout=0.3))  # due at 0.2 s now
        assert limiter.stats().granted == 1 and limiter.stats().cancelled == 1
    finally:
        first.close()
        second.close()


def test_waiters_of_a_closed_loop_are_dropped(lib, vrun):
    limiter = lib.Limiter(1, 1, initial=0)
    dead = asyncio.new_event_loop()
    dead.create_task(limiter.acquire())
    dead.run_until_complete(asyncio.sleep(0))
    dead.close()
    assert limiter.waiting == 1

    async def main() -> int:
        await limiter.acquire()
        return limiter.waiting

    assert vrun(main()) == 0


def test_memory_follows_live_waiters(lib, vrun):
    async def main() -> list[int]:
        limiter = lib.Limiter(1, 3600, initial=0)
        sizes = []
        for _ in range(3):
            tasks = [asyncio.create_task(limiter.acquire()) for _ in range(2000)]
            await asyncio.sleep(0)
            sizes.append(limiter.waiting)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            sizes.append(limiter.waiting)
        return sizes

    assert vrun(main()) == [2000, 0] * 3


def test_garbage_collected_with_waiters_pending(lib, vrun):
    async def main() -> None:
        limiter = lib.Limiter(1, 3600, initial=0)
        tasks = [asyncio.create_task(limiter.acquire()) for _ in range(10)]
        await asyncio.sleep(0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    vrun(main())
    gc.collect()



def test_a_waiter_collected_in_one_cycle_with_its_limiter_says_nothing(lib, run):
    """A suspended acquire and its limiter, garbage in one cycle: the collector clears the limiter's weak
    references before it closes the coroutine, whose clean-up then finds the limiter gone. Nothing to give
    back (the queue goes with the limiter), and nothing to report either."""
    reported: list[object] = []

    async def main() -> None:
        limiter = lib.Limiter(1, 3600, burst=1)
        await limiter.acquire()
        waiting = limiter.acquire()
        waiting.send(None)  # run by hand up to its wait (this task never awaits it)
        cycle: list[object] = [limiter, waiting]
        cycle.append(cycle)
        del limiter, waiting, cycle
        hook, sys.unraisablehook = sys.unraisablehook, reported.append
        try:
            gc.collect()
        finally:
            sys.unraisablehook = hook

    run(main())
    assert [getattr(r, "exc_value", r) for r in reported] == []


# ---- bad input: exact exception, the parameter named, nothing changed ----

NOT_NUMBERS = [True, "1", None, [1], b"1"]
BAD_POSITIVE = [0, -1, -0.5, math.nan, math.inf, -math.inf, 10**400, -(10**400)]


@pytest.mark.parametrize("name", ["max_rate", "time_period", "burst"])
@pytest.mark.parametrize("value", NOT_NUMBERS + BAD_POSITIVE)
def test_bad_constructor_numbers(lib, name, value):
    args = {"max_rate": 10, "time_period": 1, "burst": None}
    args[name] = value
    if value is None and name == "burst":
        return  # None stands for the default
    expected = TypeError if value in NOT_NUMBERS and not (isinstance(value, int) and value is not True) else ValueError
    with pytest.raises(expected, match=name):
        lib.Limiter(args["max_rate"], args["time_period"], burst=args["burst"])


@pytest.mark.parametrize("kwargs, error, text", [
    ({"burst": 0.5}, ValueError, "burst must be >= 1"),
    ({"initial": 11}, ValueError, "initial must be between 0 and burst"),
    ({"initial": -1}, ValueError, "initial"),
    ({"initial": math.nan}, ValueError, "initial"),
    ({"initial": "1"}, TypeError, "initial"),
    ({"fair": 1}, TypeError, "fair must be a bool"),
    ({"fair": None}, TypeError, "fair"),
])
def test_bad_constructor_options(lib, kwargs, error, text):
    with pytest.raises(error, match=text):
        lib.Limiter(10, 1, **kwargs)


def test_rates_out_of_range(lib):
    with pytest.raises(ValueError, match="max_rate / time_period is out of range"):
        lib.Limiter(1e-308, 1e300)
    with pytest.raises(ValueError, match="burst 1e\\+300 would take over 9 years"):
        lib.Limiter(1, 1, burst=1e300)
    assert lib.Limiter(Fraction(1, 3), 1).max_rate == pytest.approx(1 / 3)


@pytest.mark.parametrize("method", ["acquire", "try_acquire", "has_capacity"])
@pytest.mark.parametrize("amount, error, text", [
    (0, ValueError, "amount must be finite and > 0, got 0"),
    (-1, ValueError, "amount must be finite and > 0, got -1"),
    (math.nan, ValueError, "amount must be finite and > 0, got nan"),
    (math.inf, ValueError, r"amount must not exceed burst \(10.0\), got inf"),
    (11, ValueError, r"amount must not exceed burst \(10.0\), got 11"),
    (1e308, ValueError, "amount must not exceed burst"),
    (1e-308, ValueError, r"amount must be at least burst / 2\*\*50 to be counted exactly, got 1e-308"),
    (True, TypeError, "amount must be a real number, got True"),
    ("1", TypeError, "amount must be a real number, got '1'"),
    (None, TypeError, "amount must be a real number, got None"),
])
def test_bad_amounts_change_nothing(lib, vrun, method, amount, error, text):
    async def main() -> tuple[float, int]:
        limiter = lib.Limiter(10, 1, initial=5)
        waiter = asyncio.create_task(limiter.acquire(8))
        await asyncio.sleep(0)
        before = (limiter.tokens, limiter.waiting)
        with pytest.raises(error, match=text):
            result = getattr(limiter, method)(amount)
            if method == "acquire":
                await result
        assert (limiter.tokens, limiter.waiting) == before
        waiter.cancel()
        return before

    assert vrun(main()) == (5.0, 1)


def test_smallest_countable_amount(lib, vrun):
    async def main() -> list[object]:
        limiter = lib.Limiter(10, 1, initial=0)
        smallest = math.ldexp(10.0, -50)
        return [limiter.has_capacity(smallest), limiter.try_acquire(smallest)]

    assert vrun(main()) == [False, False]  # the bucket is empty: even the smallest amount waits


@pytest.mark.parametrize("timeout, error", [(-1, ValueError), (math.nan, ValueError), ("1", TypeError), (True, TypeError)])
def test_bad_timeouts(lib, vrun, timeout, error):
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        with pytest.raises(error, match="timeout"):
            limiter.acquire(1, timeout=timeout)
        return limiter.tokens

    assert vrun(main()) == 10.0


def test_areserve_is_reserve_over_every_store(lib, vrun):
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1)
        await limiter.acquire()
        first, second = await limiter.areserve(), await limiter.areserve()
        seen: list[object] = [type(first).__name__, round(first.ready_at, 9), round(second.ready_at, 9)]
        seen.append(await first.acancel())  # the place given back: the second moves up
        seen.append(await first.acancel())
        await second
        seen.append(round(loop.time(), 9))
        with pytest.raises(TypeError, match="AsyncLimiter has no reservations"):
            await lib.AsyncLimiter(10, 1).areserve()
        return seen

    assert vrun(main()) == ["Reservation", 0.1, 0.2, True, False, 0.1]


def test_asynclimiter_waits_its_timeout_out_and_takes_nothing(lib, vrun):
    """Smallest first cannot project a grant: AsyncLimiter's timeout ends the wait when it runs out,
    leaving the queue with nothing taken, and a request granted in time is granted as without one."""

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        limiter = lib.AsyncLimiter(2, 1)  # capacity 2, a token each 0.5 s
        await limiter.acquire(2)
        seen: list[object] = []
        try:
            await limiter.acquire(2, timeout=0.3)
        except TimeoutError as error:
            seen += [round(loop.time(), 9), str(error), limiter.waiting]
        await limiter.acquire(1, timeout=0.5)  # its token came at 0.5 s: the timed-out request took none
        seen.append(round(loop.time(), 9))
        await limiter.acquire(0, timeout=0)  # aiolimiter's amount 0: through at once, timeout or not
        seen.append(limiter.stats().cancelled)
        return seen

    assert vrun(main()) == [0.3, "2.0 tokens were not granted within 0.3 s", 0, 0.5, 1]


def test_asynclimiter_blocking_timeout_runs_out_taking_nothing(lib):
    limiter = lib.AsyncLimiter(1, 3600)
    limiter.acquire_blocking(1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"^1\.0 tokens were not granted within 0\.2 s$"):
        limiter.acquire_blocking(1, timeout=0.2)
    waited = time.monotonic() - started
    assert 0.2 <= waited < 5  # a real thread: the bound is loose above, never early
    assert limiter.waiting == 0 and limiter.stats().granted == 1
    with pytest.raises(ValueError, match="^timeout must be None or >= 0, got -1$"):
        limiter.acquire_blocking(1, timeout=-1)
    limiter.acquire_blocking(0, timeout=0)  # through at once
    assert limiter.waiting == 0 and limiter.stats().granted == 1


def test_asynclimiter_keeps_aiolimiters_error_and_signature(lib):
    limiter = lib.AsyncLimiter(1)
    with pytest.raises(ValueError, match="^Amount must be a number between 0 and the maximum capacity$"):
        limiter.acquire(42)
    with pytest.raises(TypeError):
        lib.AsyncLimiter(1, 1, 1)


# ---- real loops: stock asyncio and uvloop ----

def test_real_loop_order_and_counts(lib, run):
    async def main() -> tuple[list[int], int]:
        limiter = lib.Limiter(1000, 1, burst=10)
        order: list[int] = []

        async def one(i: int) -> None:
            async with limiter:
                order.append(i)

        await asyncio.gather(*(one(i) for i in range(60)))
        return order, limiter.waiting

    order, waiting = run(main())
    assert order == list(range(60)) and waiting == 0


def test_real_loop_timeout_and_cancel(lib, run):
    async def main() -> list[object]:
        limiter = lib.Limiter(2, 1, burst=1)  # the next token is 500 ms away, however slow the build
        await limiter.acquire()
        with pytest.raises(TimeoutError):
            await limiter.acquire(1, timeout=0.001)
        slow = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)
        return [slow.cancelled(), limiter.waiting]

    assert run(main()) == [True, 0]


def test_acquire_never_awaited_warns_and_takes_nothing(lib):
    """``limiter.acquire()`` without ``await`` is a bug in the caller: it warns as a coroutine does."""
    limiter = lib.Limiter(1, 1, burst=1)
    with pytest.warns(RuntimeWarning, match="was never awaited"):
        limiter.acquire()
        gc.collect()
    assert limiter.try_acquire()  # the token was never taken


def test_asynclimiter_subclass_with_its_own_init(lib):
    """aiolimiter users subclass AsyncLimiter with an __init__ of their own (a byte-rate downloader)."""

    class ByteRate(lib.AsyncLimiter):
        def __init__(self, bytes_per_second: float, label: str) -> None:
            super().__init__(bytes_per_second, 1)
            self.label = label

    limiter = ByteRate(1000, "downloads")
    assert (limiter.max_rate, limiter.time_period, limiter.label) == (1000, 1, "downloads")
    assert limiter.try_acquire(600) and not limiter.try_acquire(600)
    with pytest.raises(RuntimeError, match="configured already"):
        lib.AsyncLimiter.__init__(limiter, 5, 1)


def test_a_subclass_that_forgets_init_says_so(lib):
    class Forgetful(lib.Limiter):
        def __init__(self) -> None:
            pass

    limiter = Forgetful()
    with pytest.raises(RuntimeError, match=r"__init__\(\) was not called"):
        limiter.try_acquire()
    with pytest.raises(RuntimeError, match=r"__init__\(\) was not called"):
        asyncio.run(limiter.__aenter__())
    assert limiter.waiting == 0


def test_errors_name_the_public_class(lib):
    with pytest.raises(TypeError) as caught:
        lib.Limiter(1, 2, 3)  # burst is keyword-only
    assert "Limiter.__init__()" in str(caught.value) and "<locals>" not in str(caught.value)
    with pytest.raises(TypeError) as caught:
        lib.WindowLimiter(10, 1, burst=2)  # a window has no burst
    assert "WindowLimiter.__init__()" in str(caught.value) and "<locals>" not in str(caught.value)
