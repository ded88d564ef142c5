"""The engine's hooks for a limiter that grants from a time-limited lease of a remote quota, on both engines
(virtual time): ``Bucket._grant_until`` (no grant at or after an instant), ``Bucket._set_largest`` (requests
above the bursts, waiting for a burst to grow to them) and ``Bucket._credit`` (tokens given or taken without a
grant). Each change is followed by ``Limiter._settle``, as the limiter's own changes are: it re-times the
waiters and fails those it strands."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from test_scenarios import ns

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


async def granted_at(limiter: Any, amount: float = 1) -> int:
    """The loop time (ns) at which acquire(amount) is granted."""
    await limiter.acquire(amount)
    return ns(asyncio.get_running_loop().time())


# ---- an end of grants ----

def test_nothing_is_granted_at_or_after_the_end(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[Any]:
        limiter = lib.Limiter(1000, 1, burst=10)  # full: 10 at once, then 1,000/s
        limiter._grant_until(0.005)
        seen: list[Any] = [limiter.try_acquire(), limiter.tokens, limiter._as_good_as_new()]
        await asyncio.sleep(0.005)
        seen += [limiter.try_acquire(), limiter.has_capacity(), limiter.tokens]
        with pytest.raises(asyncio.TimeoutError):
            await limiter.acquire(1, timeout=100)  # never before the end: it cannot meet any deadline
        seen.append(limiter._stats()[-1])
        return seen

    assert vrun(main()) == [True, 9, False, False, False, 0, 1]


def test_a_waiter_past_the_end_is_not_timed_and_is_granted_once_the_end_moves(lib: SimpleNamespace,
                                                                              vrun: Run[Any]) -> None:
    async def main() -> tuple[int, int, bool]:
        limiter = lib.Limiter(10, 1, burst=1)  # one token, then one every 100 ms
        limiter._grant_until(0.05)
        assert limiter.try_acquire()
        waiter = asyncio.ensure_future(granted_at(limiter))
        await asyncio.sleep(1)  # ready at 100 ms, past the end: it waits for a change, whatever the time
        waiting = limiter.waiting
        assert not waiter.done()
        limiter._grant_until(2.0)  # a renewal: granted at once, the tokens long refilled
        limiter._settle()
        at = await waiter
        limiter._grant_until(math.inf)
        await asyncio.sleep(0.1)
        return waiting, at, limiter.try_acquire()

    assert vrun(main()) == (1, ns(1), True)


def test_a_renewal_grants_the_waiters_that_fit_before_its_end(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[bool], list[int]]:
        limiter = lib.Limiter(10, 1, burst=1)
        limiter._grant_until(0.05)
        assert limiter.try_acquire()
        waiters = [asyncio.ensure_future(granted_at(limiter)) for _ in range(2)]  # ready at 100 and 200 ms
        await asyncio.sleep(0.02)
        limiter._grant_until(0.15)  # the first fits before the new end, the second not
        limiter._settle()
        await asyncio.sleep(0.3)
        done = [w.done() for w in waiters]
        limiter._grant_until(math.inf)
        limiter._settle()
        return done, [await w for w in waiters]

    assert vrun(main()) == ([True, False], [ns(0.1), ns(0.32)])


def test_a_lapse_fails_a_waiter_with_a_deadline_and_rebuilds_none(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[bool, float]:
        limiter = lib.Limiter(10, 1, burst=1)
        assert limiter.try_acquire()
        waiter = asyncio.ensure_future(limiter.acquire(1, timeout=10))
        await asyncio.sleep(0)
        limiter._grant_until(-math.inf)  # the lease lapsed: an end long past
        limiter._settle()
        with pytest.raises(asyncio.TimeoutError):
            await waiter
        await asyncio.sleep(1)
        return limiter.try_acquire(), limiter.tokens

    assert vrun(main()) == (False, 0)


@pytest.mark.parametrize(("when", "error", "words"), [
    (math.nan, ValueError, "when must be a loop time within the engine's range or math.inf, got nan"),
    (1e300, ValueError, "got 1e+300"),
    ("soon", TypeError, "when must be a real number, got 'soon'"),
    (True, TypeError, "when must be a real number, got True"),
])
def test_grant_until_refuses_bad_instants_changing_nothing(lib: SimpleNamespace, vrun: Run[Any], when: object,
                                                          error: type[Exception], words: str) -> None:
    async def main() -> tuple[float, bool]:
        limiter = lib.Limiter(1000, 1, burst=10)
        limiter._grant_until(5.0)
        with pytest.raises(error) as caught:
            limiter._grant_until(when)
        assert words in str(caught.value)
        await asyncio.sleep(4)
        ok = limiter.try_acquire()  # the end at 5 s still holds: grants before it...
        await asyncio.sleep(1)
        return limiter.tokens, ok and not limiter.try_acquire()  # ...none from it on

    assert vrun(main()) == (0, True)


# ---- a largest amount apart from the bursts ----

def test_an_amount_above_the_burst_waits_until_a_burst_grows_to_it(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[Any], int]:
        limiter = lib.Limiter(100, 1, burst=2)  # full: 2 tokens, then 100/s
        with pytest.raises(ValueError, match="must not exceed burst"):
            limiter.try_acquire(3)
        limiter._set_largest(5)
        seen: list[Any] = [limiter.try_acquire(3), limiter.has_capacity(3)]
        with pytest.raises(asyncio.TimeoutError):
            await limiter.acquire(3, timeout=1000)  # never timed: no deadline can be met
        with pytest.raises(ValueError, match="must not exceed burst"):
            limiter.try_acquire(5.5)
        waiter = asyncio.ensure_future(granted_at(limiter, 3))
        await asyncio.sleep(1)
        seen += [limiter.waiting, waiter.done()]
        limiter.set_rate(100, 1, burst=4)  # it holds its 2 tokens: the third comes 10 ms later
        at = await waiter
        seen.append(limiter.tokens)
        return seen, at

    assert vrun(main()) == ([False, False, 1, False, 0], ns(1.01))


def test_largest_zero_strands_a_waiter_above_the_bursts(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> bool:
        limiter = lib.Limiter(100, 1, burst=2)
        limiter._set_largest(3)
        waiter = asyncio.ensure_future(limiter.acquire(3))
        await asyncio.sleep(0)
        limiter._set_largest(0)  # the bursts alone again: it can never be granted
        limiter._settle()
        with pytest.raises(ValueError, match="new burst is below this request's amount"):
            await waiter
        return limiter.try_acquire(2)

    assert vrun(main())


@pytest.mark.parametrize(("amount", "error", "words"), [
    (-1, ValueError, "amount must be 0 or finite and > 0, got -1"),
    (math.nan, ValueError, "amount must be 0 or finite and > 0, got nan"),
    (math.inf, ValueError, "amount must be 0 or finite and > 0, got inf"),
    ("5", TypeError, "amount must be a real number, got '5'"),
    (True, TypeError, "amount must be a real number, got True"),
])
def test_set_largest_refuses_bad_amounts_changing_nothing(lib: SimpleNamespace, vrun: Run[Any], amount: object,
                                                          error: type[Exception], words: str) -> None:
    async def main() -> bool:
        limiter = lib.Limiter(100, 1, burst=2)
        limiter._set_largest(4)
        with pytest.raises(error) as caught:
            limiter._set_largest(amount)
        assert str(caught.value) == words
        with pytest.raises(ValueError, match="must not exceed burst"):
            limiter.try_acquire(4.5)
        return limiter.try_acquire(4)  # still a request, still above the burst

    assert vrun(main()) is False


# ---- tokens credited without a grant ----

def test_credit_gives_and_takes_tokens_without_counting_a_grant(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[float], int, bool]:
        limiter = lib.Limiter(1000, 1, burst=10)
        assert limiter.try_acquire(8)
        stats = limiter._stats()
        seen = [limiter.tokens]
        limiter._credit(3)
        seen.append(limiter.tokens)
        limiter._credit(100)  # never fuller than full
        seen.append(limiter.tokens)
        limiter._credit(-15)  # a debt, fitting or not
        seen.append(limiter.tokens)
        unchanged = limiter._stats() == stats
        at = await granted_at(limiter)
        return seen, at, unchanged

    assert vrun(main()) == ([2, 5, 10, 0], ns(0.006), True)


def test_a_debt_delays_a_queued_waiter_and_a_credit_hastens_it(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> list[int]:
        limiter = lib.Limiter(1000, 1, burst=10)
        assert limiter.try_acquire(10)
        first = asyncio.ensure_future(granted_at(limiter, 5))  # ready at 5 ms
        await asyncio.sleep(0)
        limiter._credit(-2)
        limiter._settle()
        second = asyncio.ensure_future(granted_at(limiter, 1))
        await asyncio.sleep(0.001)
        limiter._credit(4)
        limiter._settle()
        return [await first, await second]

    assert vrun(main()) == [ns(0.003), ns(0.004)]


@pytest.mark.parametrize(("tokens", "error", "words"), [
    (math.nan, ValueError, "tokens must be finite, got nan"),
    (-math.inf, ValueError, "tokens must be finite, got -inf"),
    (-1e300, ValueError, "tokens is beyond the engine's range: -1e+300 would leave a rate empty"),
    ("3", TypeError, "tokens must be a real number, got '3'"),
    (None, TypeError, "tokens must be a real number, got None"),
])
def test_credit_refuses_bad_amounts_changing_nothing(lib: SimpleNamespace, vrun: Run[Any], tokens: object,
                                                     error: type[Exception], words: str) -> None:
    async def main() -> float:
        limiter = lib.Limiter(1000, 1, burst=10)
        assert limiter.try_acquire(4)
        with pytest.raises(error) as caught:
            limiter._credit(tokens)
        assert str(caught.value).startswith(words)
        return limiter.tokens

    assert vrun(main()) == 6


def test_a_window_has_no_tokens_to_credit(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> float:
        limiter = lib.WindowLimiter(5, 1)
        assert limiter.try_acquire(2)
        with pytest.raises(ValueError, match="tokens cannot be credited to a window, got 1"):
            limiter._credit(1)
        return limiter.tokens

    assert vrun(main()) == 3
