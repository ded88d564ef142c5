"""A server's quota over a SharedMemoryStore (``limit_until``, ``follow``): one limit in the segment, for every
process of the host. Real processes (spawned) and real loops: a shared segment runs on CLOCK_MONOTONIC. The
limit's arithmetic and its races are checked in C (tests/c/test_shm.c, the model checker's scenarios); here, that
the limiters of several processes obey one limit, that it ends, and that bad input changes nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

import aiotb
from aiotb import Limiter, SharedMemoryStore
from aiotb import _tokenbucket  # noqa: F401  (a failing C import must fail these tests)
from shm_workers import try_count
from spawned import run_workers

pytestmark = pytest.mark.skipif(aiotb.IMPLEMENTATION != "c", reason="the pure-Python engine has no shared store")


def test_processes_take_at_most_what_the_limit_leaves_in_all(name: str) -> None:
    async def main() -> tuple[list[int], float, float]:
        limiter = Limiter(1000, 1, burst=100, store=SharedMemoryStore(name))
        limiter.limit_until(5, asyncio.get_running_loop().time() + 120)
        granted = run_workers(try_count, [(name, (1000, 1), {"burst": 100}, 4)] * 3)
        return granted, limiter.tokens, SharedMemoryStore(name).bind([(1e6, 100, 100)]).segment.tokens(
            time.monotonic_ns())

    granted, left, seen_by_another = asyncio.run(main())
    assert sum(granted) == 5 and len(granted) == 3  # 12 tries in three processes; the limit let 5 through
    assert left == 0 and seen_by_another == 0


def test_limiters_follow_one_limit_until_the_reset_then_the_rates_again(name: str) -> None:
    async def main() -> tuple[int, float, float, float]:
        loop = asyncio.get_running_loop()
        a, b = (Limiter(1000, 1, burst=100, store=SharedMemoryStore(name)) for _ in range(2))  # two mappings
        started = loop.time()
        signals = a.follow({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1"})
        assert signals.requests.remaining == 3
        taken = sum([a.try_acquire(), b.try_acquire(), a.try_acquire(), b.try_acquire(), a.try_acquire()])
        left = b.tokens
        await b.acquire(1, timeout=5)  # the 4th: once the limit is over
        return taken, left, loop.time() - started, a.tokens

    taken, left, waited, after = asyncio.run(main())
    assert taken == 3 and left == 0
    assert 0.9 <= waited < 3.0  # the reset, 1 s on (whole seconds); not much later on a loaded machine
    assert after > 90  # the rates again: 100 at most, less the 4 taken, refilled since


def test_news_of_an_earlier_window_does_not_loosen_the_limit_of_another_process(name: str) -> None:
    async def main() -> list[float]:
        now = asyncio.get_running_loop().time()
        a, b = (Limiter(1000, 1, burst=100, store=SharedMemoryStore(name)) for _ in range(2))
        a.limit_until(2, now + 60)
        seen = [b.tokens]
        b.limit_until(50, now + 30)  # an earlier window's, come late: kept as it was
        seen.append(a.tokens)
        b.limit_until(40, now + 60.5)  # the same window (within a second): the fewer
        seen.append(a.tokens)
        a.limit_until(1, now + 60.2)
        seen.append(b.tokens)
        b.limit_until(7, now + 90)  # the next window: replaces it
        seen.append(a.tokens)
        return seen

    assert asyncio.run(main()) == [2, 2, 2, 1, 7]


@pytest.mark.parametrize("tokens, ahead, error", [(-1, 10, ValueError), (float("nan"), 10, ValueError),
                                                  (float("inf"), 10, ValueError), ("3", 10, TypeError),
                                                  (3, 2.0 ** 56 / 1e9 + 10, ValueError),
                                                  (3, float("inf"), ValueError)])
def test_a_bad_limit_is_refused_and_changes_nothing(name: str, tokens: object, ahead: float,
                                                     error: type[Exception]) -> None:
    async def main() -> tuple[float, float]:
        limiter = Limiter(1000, 1, burst=100, store=SharedMemoryStore(name))
        limiter.limit_until(5, asyncio.get_running_loop().time() + 60)
        before = limiter.tokens
        with pytest.raises(error, match="tokens|when"):
            limiter.limit_until(tokens, asyncio.get_running_loop().time() + ahead)  # type: ignore[arg-type]
        return before, limiter.tokens

    before, after = asyncio.run(main())
    assert before == after == 5
