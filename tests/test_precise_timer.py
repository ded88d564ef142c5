"""The precise timer: a timerfd armed at absolute CLOCK_MONOTONIC instants (C: binding/timer.h; twin:
_timer_py, on os.timerfd_*), and the dispatcher's use of it for short waits on real loops, both
engines and both loops. Real time here only bounds how long a wait may take (the descriptor either
becomes readable or it does not); exact timing is checked on the virtual clock elsewhere."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import select
import subprocess
import sys
import time
import weakref
from typing import Any, Iterator

import pytest
from virtual_loop import VirtualClockLoop

import aiotb

TWIN_HAS_TIMERFD = hasattr(os, "timerfd_create")  # Python 3.13+
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def _timer_classes() -> list[Any]:
    from aiotb import _timer_py, _tokenbucket

    found = [pytest.param(_tokenbucket.PreciseTimer, id="c")]
    if TWIN_HAS_TIMERFD:
        found.append(pytest.param(_timer_py.PreciseTimer, id="py"))
    return found


def readable(fd: int, within: float) -> bool:
    return bool(select.select([fd], [], [], within)[0])


def precise_or_skip(lib: Any) -> Any:
    """The engine's precise timer class; the twin has one on Python 3.13+ only (os.timerfd_create)."""
    timer = lib.package._core.PRECISE_TIMER
    if timer is None and lib.name == "python" and not TWIN_HAS_TIMERFD:
        pytest.skip("the twin's precise timer is built on os.timerfd_create: Python 3.13+")
    assert timer is not None, "no precise timer on Linux"
    return timer


# ---- the timer itself ----

@pytest.fixture(params=_timer_classes())
def timer(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An open precise timer of each implementation at hand, closed after the test."""
    opened = request.param()
    yield opened
    opened.close()


def test_fires_at_its_instant_once_and_consumes_the_news(timer):
    fd = timer.fileno()
    at = time.monotonic() + 0.05
    timer.arm(at)
    assert not readable(fd, 0) and not timer.expired()
    assert readable(fd, 5.0)
    assert time.monotonic() >= at  # never before its instant
    assert timer.expired() is True
    assert not readable(fd, 0) and timer.expired() is False


def test_an_instant_past_fires_at_once_and_a_later_arming_replaces_the_earlier(timer):
    fd = timer.fileno()
    timer.arm(0.0)  # long past (0 itself would disarm a timerfd: it is armed 1 ns after)
    assert readable(fd, 5.0)
    timer.arm(time.monotonic() + 3600)  # re-arming clears what had fired
    assert not readable(fd, 0) and timer.expired() is False
    timer.arm(time.monotonic() - 1)
    assert readable(fd, 5.0)
    timer.disarm()
    assert not readable(fd, 0) and timer.expired() is False


@pytest.mark.parametrize("PreciseTimer", _timer_classes())
def test_bad_instants_and_a_closed_timer_are_clear_errors(PreciseTimer):
    timer = PreciseTimer()
    for bad in (math.nan, math.inf, -math.inf, 1e300):
        with pytest.raises(ValueError, match=r"at must be a finite CLOCK_MONOTONIC time in seconds, not"):
            timer.arm(bad)
    with pytest.raises(TypeError):
        timer.arm("soon")
    assert timer.expired() is False  # nothing armed by the failures
    assert not timer.closed
    timer.close()
    timer.close()  # again: nothing happens
    assert timer.closed
    for call in (timer.fileno, timer.disarm, timer.expired, lambda: timer.arm(1.0)):
        with pytest.raises(ValueError, match="the precise timer is closed"):
            call()


def test_the_c_timer_takes_no_arguments():
    from aiotb import _tokenbucket

    with pytest.raises(TypeError, match=r"PreciseTimer\(\) takes no arguments"):
        _tokenbucket.PreciseTimer(1)  # type: ignore[call-arg]


@pytest.mark.parametrize("PreciseTimer", _timer_classes())
def test_a_timer_dropped_closes_its_descriptor(PreciseTimer):
    timer = PreciseTimer()
    fd = timer.fileno()
    os.fstat(fd)
    del timer
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


# ---- the dispatcher's use of it ----

def _dispatcher(limiter: Any) -> Any:
    return limiter._owners.dispatchers[asyncio.get_running_loop()]


async def order_of_grants(limiter: Any, n: int) -> list[int]:
    """n tasks started at once, each through `async with limiter`: the order their blocks ran in."""
    order: list[int] = []

    async def one(k: int) -> None:
        async with limiter:
            order.append(k)

    await asyncio.wait_for(asyncio.gather(*(one(k) for k in range(n))), 30)
    return order


def test_a_short_wait_is_timed_by_the_precise_timer_watched_only_while_armed(lib, run):
    PreciseTimer = precise_or_skip(lib)

    async def main() -> None:
        limiter = lib.Limiter(100, 1, burst=1)  # a grant every 10 ms: a short wait, even where the loop runs slowly
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        dispatcher = _dispatcher(limiter)
        precise = dispatcher._precise
        assert isinstance(precise, PreciseTimer) and dispatcher._timer is precise
        await asyncio.wait_for(waiter, 5)
        assert dispatcher._timer is None
        loop = asyncio.get_running_loop()
        if isinstance(loop, asyncio.BaseEventLoop):  # uvloop's remove_reader does not say
            assert loop.remove_reader(precise.fileno()) is False  # no longer watched once idle
        # the same timer serves the next short wait
        await asyncio.wait_for(limiter.acquire(), 5)
        assert dispatcher._precise is precise and not precise.closed

    run(main())


def test_many_short_waits_are_granted_in_order_by_the_precise_timer(lib, run):
    precise_or_skip(lib)

    async def main() -> tuple[list[int], int]:
        limiter = lib.Limiter(2000, 1, burst=1)
        return await order_of_grants(limiter, 200), limiter.waiting

    order, waiting = run(main())
    assert order == list(range(200)) and waiting == 0


def test_a_long_wait_is_timed_by_the_loops_timer(lib, run):
    async def main() -> None:
        limiter = lib.Limiter(20, 1, burst=1)  # 50 ms a token: beyond the precise timer's reach
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        dispatcher = _dispatcher(limiter)
        assert dispatcher._timer is not None and dispatcher._precise is None  # the loop's own timer
        await asyncio.wait_for(waiter, 5)

    run(main())


async def _waiting(limiter: Any, empty: float, amount: float) -> asyncio.Future[None]:
    """Empties limiter (empty tokens), then a waiter for amount that is still queued when this returns: a
    machine that stalled past its due instant before it queued is given another try."""
    for _ in range(10):
        await limiter.acquire(empty)
        waiter = asyncio.ensure_future(limiter.acquire(amount))
        await asyncio.sleep(0)
        if not waiter.done():
            return waiter
        await waiter
    raise AssertionError("ten waiters in a row were due before they queued")


def test_a_big_bucket_keeps_the_loops_timer_until_set_rate_makes_it_small(lib, run):
    precise_or_skip(lib)

    async def main() -> None:
        limiter = lib.Limiter(1000, 1, burst=100)  # fills in 100 ms: a late wake-up costs it nothing
        waiter = await _waiting(limiter, 100, 10)  # due in 10 ms
        dispatcher = _dispatcher(limiter)
        assert dispatcher._timer is not None and dispatcher._precise is None  # the loop's own timer
        await asyncio.wait_for(waiter, 5)
        limiter.set_rate(100, 1, burst=1)  # fills in 10 ms: every late wake-up would cost tokens
        waiter = await _waiting(limiter, 1, 1)  # due in 10 ms
        assert dispatcher._precise is not None and dispatcher._timer is dispatcher._precise
        await asyncio.wait_for(waiter, 5)

    run(main())


def test_a_virtual_clock_keeps_the_loops_timer_and_exact_virtual_time(lib):
    loop = VirtualClockLoop()

    async def main() -> tuple[list[float], Any]:
        limiter = lib.Limiter(10_000, 1, burst=1)
        times: list[float] = []

        async def one() -> None:
            async with limiter:
                times.append(loop.time())

        await asyncio.gather(*(one() for _ in range(50)))
        return times, _dispatcher(limiter)

    try:
        times, dispatcher = loop.run_until_complete(main())
    finally:
        loop.close()
    assert times == pytest.approx([k / 10_000 for k in range(50)], abs=1e-9)
    assert dispatcher._precise is None


class NoReaders(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors (as a proactor loop cannot), and says how often it was asked."""

    asked = 0

    def add_reader(self, *args: Any) -> Any:
        type(self).asked += 1
        raise NotImplementedError


def test_a_loop_that_cannot_watch_descriptors_keeps_its_own_timer(lib, run_on):
    precise_or_skip(lib)
    NoReaders.asked = 0

    async def main() -> tuple[list[int], Any]:
        limiter = lib.Limiter(1000, 1, burst=1)
        return await order_of_grants(limiter, 20), _dispatcher(limiter)

    order, dispatcher = run_on(NoReaders(), main())
    assert order == list(range(20))
    assert NoReaders.asked == 1  # tried once, never again
    assert dispatcher._precise is None


QUEUED = 200


def test_a_closed_loops_dispatcher_closes_its_precise_timer(lib):
    """Its timer is armed at the next waiter's grant, 1 ms away as long as any waits: a loop held for
    QUEUED ms before its first look would grant them all, and arm nothing (one waiter, as this test had,
    was granted before its first step on a slow day)."""
    precise_or_skip(lib)
    limiter_box: list[Any] = []

    async def first_loop() -> Any:
        limiter = lib.Limiter(1000, 1, burst=1, initial=0)
        limiter_box.append(limiter)
        for _ in range(QUEUED):  # left waiting when the loop closes, the next one always within 1 ms
            asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        return _dispatcher(limiter)

    loop = asyncio.new_event_loop()
    dispatcher = loop.run_until_complete(first_loop())
    precise = dispatcher._precise
    assert precise is not None and not precise.closed
    loop.close()

    async def second_loop() -> None:
        await asyncio.wait_for(limiter_box[0].acquire(), 5)  # drops the closed loop's dispatcher

    asyncio.run(second_loop())
    assert precise.closed


def test_a_precise_timer_firing_after_its_limiter_is_gone_closes(lib, run):
    precise_or_skip(lib)

    class Gone:
        pass

    async def main() -> None:
        limiter = lib.Limiter(100, 1, burst=1)  # 10 ms a token: the second waits, even where the loop runs slowly
        await limiter.acquire()
        await asyncio.wait_for(limiter.acquire(), 5)
        dispatcher = _dispatcher(limiter)
        dispatcher._arm(time.monotonic() + 0.002, None)  # as a pass would, for a waiter to come
        precise = dispatcher._precise
        assert precise is not None and dispatcher._timer is precise
        alive, gone = dispatcher.owners._bucket, Gone()
        dispatcher.owners._bucket = weakref.ref(gone)
        del gone  # the limiter, as its dispatcher sees it, is collected
        try:
            assert readable(precise.fileno(), 5.0)
            dispatcher._on_precise()
            assert precise.closed and dispatcher._precise is None and dispatcher._timer is None
        finally:
            dispatcher.owners._bucket = alive

    run(main())


def test_a_spurious_wake_up_runs_no_pass(lib, run):
    precise_or_skip(lib)
    passes = []

    class Counted(lib.Limiter):  # type: ignore[misc, name-defined]
        def _grant_due(self, at: float | None, owner: object) -> Any:
            passes.append(at)
            return super()._grant_due(at, owner)

    async def main() -> None:
        limiter = Counted(100, 1, burst=1)  # 10 ms a token
        await limiter.acquire()
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0)
        dispatcher = _dispatcher(limiter)
        assert dispatcher._timer is dispatcher._precise
        before = len(passes)
        dispatcher._on_precise()  # the loop saw the descriptor readable, but the instant has not come
        assert len(passes) == before and not waiter.done()
        await asyncio.wait_for(waiter, 5)

    run(main())


def test_descriptors_do_not_outlive_the_limiters(lib, run):
    precise_or_skip(lib)

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def main() -> tuple[int, int]:
        async def use_one() -> None:
            limiter = lib.Limiter(1000, 1, burst=1)
            await limiter.acquire()
            await asyncio.wait_for(limiter.acquire(), 5)  # a short wait: a precise timer opened

        await use_one()  # whatever the loop opens once
        gc.collect()
        before = open_descriptors()
        for _ in range(50):
            await use_one()
        gc.collect()
        return before, open_descriptors()

    before, after = run(main())
    assert after == before


def test_aiotb_precise_timer_0_turns_it_off():
    code = ("import aiotb._core as core, aiotb._dispatch as d; "
            "print(core.PRECISE_TIMER is None, d.PRECISE_TIMER is None)")
    default = str(aiotb._core.PreciseTimer is None)  # the engine's own: None only for the twin before 3.13
    for value, expected in (("0", "True True"), ("1", f"{default} {default}"), ("", f"{default} {default}")):
        env = dict(os.environ, AIOTB_PRECISE_TIMER=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected, (value, out.stderr)


def test_the_installed_engine_has_a_precise_timer():
    assert aiotb.IMPLEMENTATION != "c" or aiotb._core.PRECISE_TIMER is not None
