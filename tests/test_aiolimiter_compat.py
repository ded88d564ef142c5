"""aiotb.AsyncLimiter as a drop-in for aiolimiter.AsyncLimiter, checked against aiolimiter itself: the version
the test extra pins (1.3.0).

Four angles: random schedules replayed on both limiters give the same grant times;
the public surface behaves like aiolimiter's; tests in aiolimiter's own manner,
which patch ``time`` on a real running loop and move a fake clock by hand, pass on aiotb;
and aiolimiter's own tests, taken from its sdist, pass with its limiter replaced by aiotb's.
Deliberate differences are left out: aiotb's has_capacity() rejects an amount below 0 (aiolimiter
answers True), and aiotb grants a woken waiter its tokens at once, so a newcomer in the same loop
iteration cannot take them."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import importlib.metadata
import math
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable, Iterator
from unittest import mock

import aiolimiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from virtual_loop import VirtualClockLoop

TOLERANCE = 1e-6  # s: aiolimiter's float leaky bucket against aiotb's integer nanoseconds
REUSE_WARNING = "This AsyncLimiter instance is being re-used across loops."
OUT_OF_RANGE = "Amount must be a number between 0 and the maximum capacity"

Run = Callable[[Awaitable[Any]], Any]
CREEP = 1e-12  # s the clock moves on each reading; far below TOLERANCE, above a float's step at these times


class MovingClockLoop(VirtualClockLoop):
    """A virtual clock that, like a real one, has moved on a little every time it is read.

    On a clock that stands still aiolimiter can spin at one instant forever: its float
    arithmetic may leave a waiter a hair short of capacity and re-arm its timer for a
    time that rounds to now. One more picosecond of refill ends that."""

    def time(self) -> float:
        self._now += CREEP
        return self._now


@pytest.fixture
def mrun(run_on: Callable[[Any, Awaitable[Any]], Any]) -> Run:
    """Runs a coroutine on a fresh MovingClockLoop starting at t=0."""
    return lambda main: run_on(MovingClockLoop(), main)


def both(lib: Any) -> list[tuple[str, type]]:
    """aiolimiter's class and aiotb's on this engine, each with a name for failure messages."""
    return [("aiolimiter", aiolimiter.AsyncLimiter), (f"aiotb-{lib.name}", lib.AsyncLimiter)]


# ---- random schedules: the same grant times as aiolimiter ----

RATES = (1, 2, 3, 5, 10, 7.5)
PERIODS = (0.5, 1, 1.5, 10)
AMOUNTS = (1, 2, 3, 0.5, 5)
SLOTS = 16  # arrivals fall within SLOTS half-token refill times: a burst or two, so tasks queue
MAX_ARRIVALS = 12
GOLDEN = (math.sqrt(5) - 1) / 2


def slot_time(slot: int, step: float) -> float:
    """When events in ``slot`` happen: slot steps, nudged by a fraction of a step unique to the slot.

    Every wake instant is some event's time plus a whole number of steps (half a token's
    refill time; every amount drawn is a multiple of half a token). At such an instant the
    two limiters differ by design: aiotb grants the woken waiter its tokens at once, while
    aiolimiter only wakes it, so an arrival in that same loop iteration could take them first.
    The nudge, a multiple of the golden ratio modulo 1, is different for every slot and never
    a whole number of steps apart from another slot's, so an arrival or cancellation meets a
    wake instant only by float accident. Events of one slot still happen together, on purpose."""
    return step * (slot + 0.5 * ((slot + 1) * GOLDEN % 1.0))


@dataclass(frozen=True)
class Schedule:
    max_rate: float
    time_period: float
    arrivals: list[tuple[int, float]]  # (slot, amount) of each acquire, in creation order within a slot
    cancels: list[tuple[int, int]]  # (slot, index into arrivals), always a later slot than that arrival

    @property
    def step(self) -> float:
        return 0.5 * self.time_period / self.max_rate


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    max_rate = draw(st.sampled_from(RATES))
    period = draw(st.sampled_from(PERIODS))
    amounts = [amount for amount in AMOUNTS if amount <= max_rate]
    arrivals = draw(st.lists(st.tuples(st.integers(0, SLOTS), st.sampled_from(amounts)),
                             min_size=1, max_size=MAX_ARRIVALS))
    later = draw(st.lists(st.tuples(st.integers(0, len(arrivals) - 1), st.integers(1, SLOTS // 2)),
                          max_size=len(arrivals)))
    cancels = [(arrivals[index][0] + delay, index) for index, delay in later]
    return Schedule(max_rate, period, arrivals, cancels)


async def replay(limiter: Any, schedule: Schedule) -> list[float | str]:
    """Each arrival's grant time (loop time when its acquire returned), or "cancelled"."""
    loop = asyncio.get_running_loop()
    tasks: dict[int, asyncio.Task[None]] = {}
    granted: dict[int, float] = {}
    by_slot: dict[int, list[tuple[str, int]]] = {}
    for index, (slot, _) in enumerate(schedule.arrivals):
        by_slot.setdefault(slot, []).append(("arrive", index))
    for slot, index in schedule.cancels:
        by_slot.setdefault(slot, []).append(("cancel", index))
    last_slot = max(by_slot)
    all_started = loop.create_future()

    async def arrival(index: int, amount: float) -> None:
        await limiter.acquire(amount)
        granted[index] = loop.time()

    def run_slot(slot: int) -> None:
        # One timer per slot, so events of a slot keep their order whatever timers the limiter keeps.
        for kind, index in by_slot[slot]:
            if kind == "arrive":
                tasks[index] = loop.create_task(arrival(index, schedule.arrivals[index][1]))
            else:
                tasks[index].cancel()
        if slot == last_slot:
            all_started.set_result(None)

    for slot in by_slot:
        loop.call_at(slot_time(slot, schedule.step), run_slot, slot)
    await all_started
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    for task in tasks.values():
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    return ["cancelled" if tasks[i].cancelled() else granted[i] for i in range(len(schedule.arrivals))]


def mismatches(expected: list[float | str], actual: list[float | str]) -> list[int]:
    def same(a: float | str, b: float | str) -> bool:
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return abs(a - b) <= TOLERANCE

    return [i for i, (a, b) in enumerate(zip(expected, actual, strict=True)) if not same(a, b)]


def test_random_schedules_grant_when_aiolimiter_does(lib, mrun):
    seen: Counter[str] = Counter()

    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(schedules())
    def same_as_aiolimiter(schedule: Schedule) -> None:
        reference = mrun(replay(aiolimiter.AsyncLimiter(schedule.max_rate, schedule.time_period), schedule))
        ours = mrun(replay(lib.AsyncLimiter(schedule.max_rate, schedule.time_period), schedule))
        wrong = mismatches(reference, ours)
        assert not wrong, f"arrivals {wrong} differ:\n aiolimiter {reference}\n aiotb      {ours}"
        for index, outcome in enumerate(ours):
            arrived = slot_time(schedule.arrivals[index][0], schedule.step)
            if outcome == "cancelled":
                seen["cancelled"] += 1
            elif outcome > arrived + TOLERANCE:
                seen["waited"] += 1

    same_as_aiolimiter()
    # The comparison means something only if the schedules made tasks queue and cancel.
    assert seen["waited"] >= 400 and seen["cancelled"] >= 60, seen


# ---- hand-written schedules on the virtual clock, the same for both limiters ----

async def staggered(limiter: Any, requests: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """Starts each (name, amount, delay) request after its delay; returns (name, grant time) in grant order."""
    loop = asyncio.get_running_loop()
    log: list[tuple[str, float]] = []

    async def ask(name: str, amount: float, delay: float) -> None:
        await asyncio.sleep(delay)
        await limiter.acquire(amount)
        log.append((name, loop.time()))

    await asyncio.gather(*(ask(*request) for request in requests))
    return log


def check_on_both(lib: Any, mrun: Run, scenario: Callable[[type], Awaitable[list[tuple[str, float]]]],
                  expected: list[tuple[str, float]]) -> None:
    for name, cls in both(lib):
        log = mrun(scenario(cls))
        assert [who for who, _ in log] == [who for who, _ in expected], name
        assert [at for _, at in log] == pytest.approx([at for _, at in expected], abs=TOLERANCE), name


def test_equal_amounts_are_granted_in_arrival_order(lib, mrun):
    async def scenario(cls: type) -> list[tuple[str, float]]:
        limiter = cls(2, 1)  # a token every 0.5 s
        await limiter.acquire(2)
        return await staggered(limiter, [("d", 1, 0.4), ("a", 1, 0.1), ("c", 1, 0.3), ("b", 1, 0.2)])

    check_on_both(lib, mrun, scenario, [("a", 0.5), ("b", 1.0), ("c", 1.5), ("d", 2.0)])


def test_smaller_amounts_are_woken_first(lib, mrun):
    async def scenario(cls: type) -> list[tuple[str, float]]:
        limiter = cls(3, 3)  # a token every second
        await limiter.acquire(3)
        return await staggered(limiter, [("three", 3, 0.1), ("two", 2, 0.2), ("one", 1, 0.3), ("one more", 1, 0.4)])

    check_on_both(lib, mrun, scenario, [("one", 1.0), ("one more", 2.0), ("two", 4.0), ("three", 7.0)])


@pytest.mark.parametrize(("newcomer_at", "expected"), [
    (None, [("big", 1.0)]),
    (0.0, [("newcomer", 0.0), ("big", 2.0)]),
    (0.5, [("newcomer", 0.5), ("big", 2.0)]),
])
def test_newcomer_takes_free_capacity_ahead_of_a_bigger_waiter(lib, mrun, newcomer_at, expected):
    async def scenario(cls: type) -> list[tuple[str, float]]:
        limiter = cls(3, 3)
        await limiter.acquire(1)  # 2 free: the big waiter needs 1 more second
        requests = [("big", 3, 0.0)]
        if newcomer_at is not None:
            requests.append(("newcomer", 1, newcomer_at))
        return await staggered(limiter, requests)

    check_on_both(lib, mrun, scenario, expected)


@pytest.mark.parametrize(("cancel_first", "expected"), [
    (False, [("first", 1.0), ("second", 4.0)]),
    (True, [("second", 1.0)]),
])
def test_cancelling_the_head_waiter_lets_the_next_go_sooner(lib, mrun, cancel_first, expected):
    async def scenario(cls: type) -> list[tuple[str, float]]:
        limiter = cls(3, 3)
        await limiter.acquire(1)
        first = asyncio.create_task(staggered(limiter, [("first", 3, 0.0)]))
        second = asyncio.create_task(staggered(limiter, [("second", 3, 0.0)]))
        if cancel_first:
            await asyncio.sleep(0.5)
            first.cancel()
        results = await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError) == cancel_first
        return [grant for log in results if isinstance(log, list) for grant in log]

    check_on_both(lib, mrun, scenario, expected)


# ---- the public surface ----

def test_constructor_signature(lib):
    """aiolimiter's parameters, in its order, kinds and defaults; aiotb's one more (store=) is keyword-only with a
    default, so that every call written for aiolimiter binds the same way."""
    def shape(cls: type) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]

    ours, theirs = shape(lib.AsyncLimiter), shape(aiolimiter.AsyncLimiter)
    assert ours[:len(theirs)] == theirs
    assert ours[len(theirs):] == [("store", inspect.Parameter.KEYWORD_ONLY, None)]
    assert theirs == [
        ("max_rate", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("time_period", inspect.Parameter.POSITIONAL_OR_KEYWORD, 60),
    ]


@pytest.mark.parametrize(("args", "kwargs"), [
    ((42, 81), {}), ((10,), {}), ((7.5, 1.5), {}),
    ((), {"max_rate": 3, "time_period": 0.5}), ((5,), {"time_period": 10}),
])
def test_attributes(lib, args, kwargs):
    ours, theirs = lib.AsyncLimiter(*args, **kwargs), aiolimiter.AsyncLimiter(*args, **kwargs)
    assert (ours.max_rate, ours.time_period) == (theirs.max_rate, theirs.time_period)


def test_method_signatures(lib):
    for method in ("acquire", "has_capacity"):
        params = list(inspect.signature(getattr(lib.AsyncLimiter(1), method)).parameters.values())
        assert (params[0].name, params[0].default) == ("amount", 1), method


def test_has_capacity_answers_like_aiolimiter(lib, mrun):
    async def answers(cls: type) -> list[bool]:
        limiter = cls(3, 3)
        out = [limiter.has_capacity(), limiter.has_capacity(3), limiter.has_capacity(amount=3)]
        await limiter.acquire(2)
        out += [limiter.has_capacity(), limiter.has_capacity(1.5), limiter.has_capacity(amount=2)]
        await asyncio.sleep(0.5)
        out += [limiter.has_capacity(1.5), limiter.has_capacity(2)]
        await asyncio.sleep(0.5)
        out += [limiter.has_capacity(2), limiter.has_capacity(3)]
        return out

    reference = mrun(answers(aiolimiter.AsyncLimiter))
    assert reference == [True, True, True, True, False, False, True, False, True, False]
    assert mrun(answers(lib.AsyncLimiter)) == reference


def test_has_capacity_above_max_rate_is_false(lib, mrun):
    async def answers(cls: type) -> list[bool]:
        limiter = cls(1)
        return [limiter.has_capacity(42), limiter.has_capacity(1.5)]

    assert mrun(answers(aiolimiter.AsyncLimiter)) == [False, False]
    assert mrun(answers(lib.AsyncLimiter)) == [False, False]


def test_acquire_returns_an_awaitable_of_none(lib, mrun):
    async def results(cls: type) -> list[Any]:
        limiter = cls(2, 1)  # full: 2 tokens, then one every 0.5 s
        first, second = limiter.acquire(), limiter.acquire(amount=1)
        assert inspect.isawaitable(first) and inspect.isawaitable(second)
        out = [await first, await second]
        out.append(await limiter.acquire())
        out.append(await asyncio.ensure_future(limiter.acquire(0.5)))
        out.append(await asyncio.wait_for(limiter.acquire(amount=2), timeout=5))
        out += await asyncio.gather(limiter.acquire(), limiter.acquire(1))
        out.append(asyncio.get_running_loop().time())
        return out

    reference = mrun(results(aiolimiter.AsyncLimiter))
    assert reference[:-1] == [None] * 7
    ours = mrun(results(lib.AsyncLimiter))
    assert ours[:-1] == [None] * 7
    assert ours[-1] == pytest.approx(reference[-1], abs=TOLERANCE)


def test_async_with_gives_none(lib, mrun):
    async def entered(cls: type) -> list[Any]:
        limiter = cls(1, 1)
        out = []
        for _ in range(2):  # free, then after a wait
            async with limiter as value:
                out.append((value, asyncio.get_running_loop().time()))
        return out

    for name, cls in both(lib):
        values, times = zip(*mrun(entered(cls)))
        assert values == (None, None), name
        assert times == pytest.approx((0.0, 1.0), abs=TOLERANCE), name


def test_async_with_does_not_swallow_exceptions(lib, mrun):
    async def body(cls: type) -> None:
        async with cls(1, 1):
            raise KeyError("inside")

    for _, cls in both(lib):
        with pytest.raises(KeyError, match="inside"):
            mrun(body(cls))


@pytest.mark.parametrize(("max_rate", "amount"), [
    (1, 42), (7.5, 7.6), (10, 10.000001), (1, math.inf), (1, -1), (1, -1e-300), (1, -math.inf), (1, math.nan),
])
def test_amount_out_of_range_error(lib, mrun, max_rate, amount):
    async def error(cls: type) -> ValueError:
        with pytest.raises(ValueError) as caught:
            await cls(max_rate).acquire(amount)
        return caught.value

    theirs, ours = mrun(error(aiolimiter.AsyncLimiter)), mrun(error(lib.AsyncLimiter))
    assert type(ours) is type(theirs) is ValueError
    assert ours.args == theirs.args == (OUT_OF_RANGE,)


def test_acquire_zero_returns_at_once_and_takes_nothing(lib, mrun):
    async def zero_amid_a_waiter(cls: type) -> list[Any]:
        loop, limiter = asyncio.get_running_loop(), cls(1, 1)
        await limiter.acquire()  # empty: a token a second
        waiter = asyncio.ensure_future(limiter.acquire())
        await asyncio.sleep(0.25)
        out: list[Any] = [await limiter.acquire(0), await limiter.acquire(amount=0.0), loop.time()]
        out.append(limiter.has_capacity(0))
        await waiter
        out.append(loop.time())
        return out

    reference = mrun(zero_amid_a_waiter(aiolimiter.AsyncLimiter))
    assert reference[:4] == [None, None, pytest.approx(0.25, abs=TOLERANCE), True]
    assert reference[4] == pytest.approx(1.0, abs=TOLERANCE)
    ours = mrun(zero_amid_a_waiter(lib.AsyncLimiter))
    assert ours[:2] + ours[3:4] == [None, None, True]
    assert ours[2::2] == pytest.approx(reference[2::2], abs=TOLERANCE)


def test_acquire_blocking_zero_returns_at_once(lib):
    limiter = lib.AsyncLimiter(1, 60)
    limiter.acquire_blocking()
    started = time.monotonic()
    assert limiter.acquire_blocking(0) is None
    assert time.monotonic() - started < 30  # the next token is 60 s away
    with pytest.raises(ValueError) as caught:
        limiter.acquire_blocking(-1)
    assert caught.value.args == (OUT_OF_RANGE,)


def test_limiter_still_rejects_amount_zero(lib):
    with pytest.raises(ValueError, match="amount must be finite and > 0, got 0"):
        lib.Limiter(1, 1).acquire(0)


def test_acquire_exactly_max_rate_is_allowed(lib, mrun):
    async def grant_times(cls: type) -> list[float]:
        loop, limiter = asyncio.get_running_loop(), cls(7.5, 1.5)
        times = []
        for _ in range(2):
            await limiter.acquire(7.5)
            times.append(loop.time())
        return times

    for name, cls in both(lib):
        assert mrun(grant_times(cls)) == pytest.approx([0.0, 1.5], abs=TOLERANCE), name


def test_is_an_async_context_manager(lib):
    assert isinstance(aiolimiter.AsyncLimiter(1), contextlib.AbstractAsyncContextManager)
    assert isinstance(lib.AsyncLimiter(1), contextlib.AbstractAsyncContextManager)


def test_reuse_across_loops_with_waiters_warns(lib):
    for name, cls in both(lib):
        limiter = cls(1)  # a token a minute: the second run finds the bucket still empty

        async def leave_waiters() -> int:
            tasks = [asyncio.ensure_future(limiter.acquire()) for _ in range(4)]
            done, _ = await asyncio.wait(tasks, timeout=0)
            return len(done)  # asyncio.run cancels the others

        assert asyncio.run(leave_waiters()) == 1, name  # and no warning: filterwarnings = error
        with pytest.warns(RuntimeWarning, match=REUSE_WARNING):
            assert asyncio.run(leave_waiters()) == 0, name


# ---- aiolimiter's own tests, from the sdist of the version installed, on aiotb's limiter ----

AIOLIMITER = importlib.metadata.version("aiolimiter")
AS_AIOLIMITER = "from aiotb import AsyncLimiter\n\n__all__ = [\"AsyncLimiter\"]\n"
ITS_CONFIG = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
ITS_OWN_VERSION_TEST = "test_version"  # its version against its git checkout: not about the limiter


@pytest.fixture(scope="session")
def aiolimiter_sdist(pytestconfig: pytest.Config) -> Path:
    """aiolimiter's sdist of the installed version, downloaded once into pytest's cache."""
    cache = pytestconfig.cache.mkdir(f"aiolimiter-{AIOLIMITER}-sdist")
    found = sorted(cache.glob("aiolimiter-*.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "-d", str(cache), f"aiolimiter=={AIOLIMITER}"], check=True, timeout=300)
        found = sorted(cache.glob("aiolimiter-*.tar.gz"))
    assert [path.name for path in found] == [f"aiolimiter-{AIOLIMITER}.tar.gz"]
    return found[0]


def test_aiolimiters_own_tests_pass_on_aiotb(lib, aiolimiter_sdist, tmp_path):
    with tarfile.open(aiolimiter_sdist) as sdist:
        sdist.extractall(tmp_path, filter="data")
    tests = tmp_path / f"aiolimiter-{AIOLIMITER}" / "tests"
    shim = tmp_path / "shim" / "aiolimiter"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(AS_AIOLIMITER)
    (tmp_path / "pytest.ini").write_text(ITS_CONFIG)
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    env.pop("AIOTB_NO_EXTENSIONS", None)
    if lib.name == "python":
        env["AIOTB_NO_EXTENSIONS"] = "1"
    probe = "import aiolimiter, aiotb; print(aiolimiter.AsyncLimiter is aiotb.AsyncLimiter, aiotb.IMPLEMENTATION)"
    imported = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert imported.stdout.split() == ["True", lib.name], imported.stderr
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"),
         "--rootdir", str(tests.parent), "-k", f"not {ITS_OWN_VERSION_TEST}", str(tests)],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    report = f"{summary}\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    assert result.returncode == 0, report
    assert " passed" in summary and not any(word in summary for word in ("failed", "error", "skipped")), report


# ---- aiolimiter's style: a real loop whose time() is patched and moved by hand ----

class HandClock:
    """While entered, the running loop's ``time()`` returns ``now``, which the test moves."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self._patch = mock.patch.object(asyncio.get_running_loop(), "time", self.read)

    def read(self) -> float:
        return self.now

    def __enter__(self) -> HandClock:
        self._patch.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._patch.stop()


QUIET_ROUNDS = 5


async def settle(tasks: Iterable[asyncio.Future[Any]]) -> int:
    """Lets the loop run at the current instant until QUIET_ROUNDS zero-timeout waits in a row
    finish nothing; returns how many of tasks are done."""
    pending = set(tasks)
    total, quiet = len(pending), 0
    while pending and quiet < QUIET_ROUNDS:
        done, pending = await asyncio.wait(pending, timeout=0)
        quiet = 0 if done else quiet + 1
    return total - len(pending)


@contextlib.contextmanager
def no_loop_errors() -> Iterator[None]:
    """Fails the test if anything reaches the running loop's exception handler meanwhile."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        yield
    finally:
        loop.set_exception_handler(previous)
    assert not errors, errors


async def take_one(limiter: Any) -> None:
    await limiter.acquire()


async def enter_once(limiter: Any) -> None:
    async with limiter:
        pass


@pytest.mark.asyncio
@pytest.mark.parametrize("job", [take_one, enter_once])
async def test_patched_clock_burst_then_one_per_refill(lib, job):
    for name, cls in both(lib):
        limiter = cls(5, 10)  # a token every 2 s
        with no_loop_errors(), HandClock() as clock:
            tasks = [asyncio.ensure_future(job(limiter)) for _ in range(10)]
            assert await settle(tasks) == 5, name
            clock.now = 3
            assert limiter.has_capacity(), name  # newcomers may take what waiters have not
            assert await settle(tasks) == 6, name
            clock.now = 7
            assert await settle(tasks) == 8, name
            clock.now = 11
            assert await settle(tasks) == 10, name


@pytest.mark.asyncio
async def test_patched_clock_has_capacity(lib):
    for name, cls in both(lib):
        limiter = cls(1)
        with no_loop_errors(), HandClock() as clock:
            assert limiter.has_capacity(), name
            await limiter.acquire()
            assert not limiter.has_capacity(), name
            clock.now = 59.5
            assert not limiter.has_capacity(), name
            clock.now = 60
            assert limiter.has_capacity(), name


@pytest.mark.asyncio
async def test_patched_clock_big_amount_waits_for_its_share(lib):
    for name, cls in both(lib):
        limiter = cls(3, 3)
        with no_loop_errors(), HandClock() as clock:
            await limiter.acquire(1)
            big = asyncio.ensure_future(limiter.acquire(3))
            assert await settle([big]) == 0, name
            clock.now = 0.999
            assert await settle([big]) == 0, name
            clock.now = 1
            assert await settle([big]) == 1, name


@pytest.mark.asyncio
async def test_patched_clock_newcomer_delays_a_bigger_waiter(lib):
    for name, cls in both(lib):
        limiter = cls(3, 3)
        with no_loop_errors(), HandClock() as clock:
            await limiter.acquire(1)
            big = asyncio.ensure_future(limiter.acquire(3))
            assert await settle([big]) == 0, name
            await limiter.acquire(1)  # free capacity goes to the newcomer at once
            clock.now = 1
            assert await settle([big]) == 0, name
            clock.now = 1.999
            assert await settle([big]) == 0, name
            clock.now = 2
            assert await settle([big]) == 1, name


@pytest.mark.asyncio
async def test_patched_clock_cancelled_head_waiter(lib):
    for name, cls in both(lib):
        limiter = cls(3, 3)
        with no_loop_errors(), HandClock() as clock:
            await limiter.acquire(1)
            first, second = (asyncio.ensure_future(limiter.acquire(3)) for _ in range(2))
            assert await settle([first, second]) == 0, name
            first.cancel()
            clock.now = 1
            assert await settle([second]) == 1, name
            assert first.cancelled(), name


@pytest.mark.asyncio
async def test_patched_clock_after_use_on_the_real_clock_and_back(lib):
    """Used on the real clock first, in this same task: the patch must still be noticed,
    the limiter's state carries over at the switch, and the real clock rules again after it."""
    limiter = lib.AsyncLimiter(50, 1)  # a token every 20 ms
    with no_loop_errors():
        emptied = time.monotonic()
        await limiter.acquire(50)
        assert not limiter.has_capacity()
        with HandClock() as clock:  # far behind the real clock: time must not jump with it
            assert not limiter.has_capacity()  # the switch: what the real clock refilled till then carries over
            carried = time.monotonic() - emptied  # at most this much (a loaded machine: a millisecond or more)
            waiter = asyncio.ensure_future(limiter.acquire())
            assert await settle([waiter]) == 0
            if carried < 0.019:
                clock.now = 0.0199 - carried
                assert await settle([waiter]) == 0
                assert not limiter.has_capacity()
            clock.now = 0.02
            assert await settle([waiter]) == 1
            clock.now = 0.04
            assert limiter.has_capacity()
            await limiter.acquire()  # empty again at the moment the patch goes
        start = time.monotonic()  # before the limiter reads the real clock again
        assert not limiter.has_capacity()
        await limiter.acquire()
        elapsed = time.monotonic() - start
        assert 0.02 - carried - TOLERANCE <= elapsed < 2.0  # less what carried over at the first switch


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["loop class", "time.monotonic"])
async def test_otherwise_patched_clock_after_use_on_the_real_clock(lib, where):
    """Like patching ``time`` on the loop instance, but on its class, or the clock asyncio reads.

    A patch of the loop's class is seen at any time. A replaced ``time.monotonic`` is seen when it
    is in place before the limiter is first used on the loop (documented: the C engine checks it
    when it proves a task's clock, not on every call), so that case drains a fresh limiter under it."""
    loop = asyncio.get_running_loop()
    fake = [0.0]
    if where == "loop class":
        patch = mock.patch.object(type(loop), "time", lambda _: fake[0])
    else:
        patch = mock.patch.object(asyncio.base_events.time, "monotonic", lambda: fake[0])
    limiter = lib.AsyncLimiter(50, 1)
    with no_loop_errors():
        if where == "loop class":
            await limiter.acquire(50)
        else:
            patch.start()
            try:
                await asyncio.create_task(limiter.acquire(50), context=contextvars.Context())
                await asyncio.create_task(_patched_monotonic_is_honoured(limiter, fake), context=contextvars.Context())
            finally:
                patch.stop()
            return
        with patch:
            if where == "time.monotonic":
                return await asyncio.create_task(_patched_monotonic_is_honoured(limiter, fake))
            waiter = asyncio.ensure_future(limiter.acquire())
            assert await settle([waiter]) == 0
            fake[0] = 0.0199
            assert await settle([waiter]) == 0
            fake[0] = 0.02
            assert await settle([waiter]) == 1


async def _patched_monotonic_is_honoured(limiter, fake) -> None:
    waiter = asyncio.ensure_future(limiter.acquire())
    assert await settle([waiter]) == 0
    fake[0] = 0.0199
    assert await settle([waiter]) == 0
    fake[0] = 0.02
    assert await settle([waiter]) == 1

