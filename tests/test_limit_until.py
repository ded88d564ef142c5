"""What a server says is left of its quota: ``limit_until`` and ``follow`` on both engines (virtual time), and over a
RedisStore for every client of the key (real loops, the session's redis-server)."""

from __future__ import annotations

import asyncio
import email.utils
import time
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from test_scenarios import ns

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


async def grant_instants(limiter: Any, count: int) -> list[int]:
    """The loop times (ns) at which count acquires in a row are granted."""
    loop = asyncio.get_running_loop()
    instants = []
    for _ in range(count):
        await limiter.acquire()
        instants.append(ns(loop.time()))
    return instants


def test_at_most_the_tokens_left_before_the_end_then_the_rates_again(lib: SimpleNamespace, vrun: Run[Any]) -> None:
    async def main() -> tuple[list[int], float, float]:
        limiter = lib.Limiter(100, 1, burst=10)  # full: 10 at once, then 100/s
        limiter.limit_until(3, 1.0)
        during = limiter.tokens
        instants = await grant_instants(limiter, 6)
        return instants, during, limiter.tokens

    instants, during, after = vrun(main())
    # 3 at once, then nothing before 1 s; then the rates: 7 tokens held and refilled since, 10 at most
    assert instants == [0, 0, 0, ns(1), ns(1), ns(1)]
    assert during == 3 and after == 7


def test_zero_left_grants_nothing_until_the_end_and_waiters_keep_their_order(lib: SimpleNamespace,
                                                                             vrun: Run[Any]) -> None:
    async def main() -> list[tuple[str, int]]:
        loop = asyncio.get_running_loop()
        limiter = lib.Limiter(10, 1, burst=1)
        order: list[tuple[str, int]] = []

        async def one(name: str) -> None:
            await limiter.acquire()
            order.append((name, ns(loop.time())))

        tasks = [asyncio.ensure_future(one(name)) for name in "abc"]
        await asyncio.sleep(0)
        limiter.limit_until(0, 0.5)  # while a waits for nothing: it was granted already
        await asyncio.gather(*tasks)
        return order

    assert vrun(main()) == [("a", 0), ("b", ns(0.5)), ("c", ns(0.6))]


def test_news_of_the_same_window_only_tightens_and_late_news_changes_nothing(lib: SimpleNamespace,
                                                                            vrun: Run[Any]) -> None:
    async def main() -> list[float]:
        limiter = lib.Limiter(1000, 1, burst=100)
        seen = []
        limiter.limit_until(5, 10.0)
        limiter.limit_until(8, 10.4)  # the same window, read out of order: 5 stay
        seen.append(limiter.tokens)
        limiter.limit_until(2, 9.8)  # the same window, fewer left
        seen.append(limiter.tokens)
        limiter.limit_until(50, 5.0)  # an earlier window's, come late
        seen.append(limiter.tokens)
        limiter.limit_until(40, 20.0)  # the next window: replaces it
        seen.append(limiter.tokens)
        limiter.limit_until(1, -1.0)  # over already: nothing
        seen.append(limiter.tokens)
        await asyncio.sleep(20)  # over: the rates alone
        seen.append(limiter.tokens)
        return seen

    assert vrun(main()) == [5, 2, 2, 40, 40, 100]


@pytest.mark.parametrize("tokens, when, error, name", [(-1, 1.0, ValueError, "tokens"),
                                                       (float("nan"), 1.0, ValueError, "tokens"),
                                                       (float("inf"), 1.0, ValueError, "tokens"),
                                                       ("3", 1.0, TypeError, "tokens"), (True, 1.0, TypeError, "tokens"),
                                                       (3, float("nan"), ValueError, "when"),
                                                       (3, "1", TypeError, "when"), (3, 1e12, ValueError, "when")])
def test_bad_limits_are_refused_and_change_nothing(lib: SimpleNamespace, vrun: Run[Any], tokens: Any, when: Any,
                                                  error: type[Exception], name: str) -> None:
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        with pytest.raises(error, match=name):
            limiter.limit_until(tokens, when)
        return limiter.tokens

    assert vrun(main()) == 10


def http_date(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


@pytest.mark.parametrize("headers", [
    {"RateLimit": '"default";r=2;t=5', "RateLimit-Policy": '"default";q=50;w=10'},
    {"RateLimit-Remaining": "2", "RateLimit-Reset": "5", "RateLimit-Limit": "50"},
    {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "5"},
    {"x-ratelimit-remaining-requests": "2", "x-ratelimit-reset-requests": "5s"},
    [("X-RateLimit-Remaining", "2"), ("X-RateLimit-Reset", "epoch")],  # an epoch instant against the server's Date
], ids=["draft", "draft-older", "x-ratelimit", "openai", "epoch"])
def test_follow_reads_each_style_and_limits_until_the_reset(lib: SimpleNamespace, vrun: Run[Any],
                                                            headers: Any) -> None:
    if isinstance(headers, list):  # the server's clock 1,000 s behind this host's: its Date says so
        server_now = time.time() - 1000
        headers = [("X-RateLimit-Remaining", "2"), ("X-RateLimit-Reset", str(round(server_now) + 5)),
                   ("Date", http_date(round(server_now)))]

    async def main() -> tuple[list[int], Any]:
        limiter = lib.Limiter(100, 1, burst=10)
        signals = limiter.follow(headers)
        return await grant_instants(limiter, 3), signals.requests

    instants, told = vrun(main())
    assert told.remaining == 2
    assert instants[:2] == [0, 0]
    assert abs(instants[2] - ns(5)) <= ns(1)  # the reset, from whole seconds (and a Date's) read at the wall clock


def test_follow_counts_the_requests_in_flight_and_the_quota_of_the_limiters_unit(lib: SimpleNamespace,
                                                                                     vrun: Run[Any]) -> None:
    async def main() -> list[float]:
        seen = []
        limiter = lib.Limiter(1000, 1, burst=100)
        limiter.follow({"X-RateLimit-Remaining": "10", "X-RateLimit-Reset": "60"}, in_flight=4)
        seen.append(limiter.tokens)
        tokens = lib.Limiter(1000, 1, burst=100)
        tokens.follow({"x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "1m",
                       "x-ratelimit-remaining-tokens": "30", "x-ratelimit-reset-tokens": "6m0s"}, quota="tokens")
        seen.append(tokens.tokens)
        return seen

    assert vrun(main()) == [6, 30]


@pytest.mark.parametrize("headers", [{}, {"X-RateLimit-Remaining": "2"}, {"X-RateLimit-Remaining": "-2",
                                                                          "X-RateLimit-Reset": "5"},
                                     {"X-RateLimit-Remaining": "nan", "X-RateLimit-Reset": "5"},
                                     {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "99999999999999999999"},
                                     {"RateLimit": '"a;r=2'}, {"X-RateLimit-Remaining": "２", "X-RateLimit-Reset": "5"},
                                     [("X-RateLimit-Remaining", b"\xff\xfe"), (b"X-RateLimit-Reset", "5")]],
                         ids=["none", "no reset", "negative", "nan", "absurd reset", "open string", "non-ascii",
                              "bytes"])
def test_what_follow_cannot_read_changes_nothing(lib: SimpleNamespace, vrun: Run[Any], headers: Any) -> None:
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        limiter.follow(headers)
        return limiter.tokens

    assert vrun(main()) == 10


@pytest.mark.parametrize("kwargs, error, name", [({"headers": None}, TypeError, "headers"),
                                                 ({"headers": "X-RateLimit-Remaining: 2"}, TypeError, "headers"),
                                                 ({"quota": "bytes"}, ValueError, "quota"),
                                                 ({"in_flight": -1}, ValueError, "in_flight"),
                                                 ({"in_flight": "1"}, TypeError, "in_flight")])
def test_follow_refuses_bad_arguments(lib: SimpleNamespace, vrun: Run[Any], kwargs: dict[str, Any],
                                      error: type[Exception], name: str) -> None:
    async def main() -> float:
        limiter = lib.Limiter(10, 1)
        given = dict(kwargs)  # the parameters' dict is shared by the engines' runs
        headers = given.pop("headers", {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "5"})
        with pytest.raises(error, match=name):
            limiter.follow(headers, **given)
        return limiter.tokens

    assert vrun(main()) == 10


# ---- over a RedisStore: every client of the key ----

@pytest.mark.parametrize("window", [False, True], ids=["rates", "window"])
def test_a_limit_over_redis_holds_for_every_client_of_the_key(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                              window: bool) -> None:
    key = f"limit-{window}-{time.monotonic_ns()}"

    async def main() -> tuple[int, float, float]:
        loop = asyncio.get_running_loop()
        kind = lib.package.WindowLimiter if window else lib.package.Limiter
        a, b = (kind(1000, 1, store=lib.package.RedisStore(redis_url, key)) for _ in range(2))
        try:
            started = loop.time()
            await a.afollow({"X-RateLimit-Remaining": "3", "X-RateLimit-Reset": "1"})
            taken = 0
            for limiter in (a, b, a, b, a):
                taken += await limiter.atry_acquire()
            left = await b.read_tokens()
            await b.acquire(1, timeout=5)  # the 4th: once the limit is over
            return taken, left, loop.time() - started
        finally:
            for limiter in (a, b):
                await limiter.store.redis.aclose()

    taken, left, waited = run(main())
    assert taken == 3 and left == 0
    assert 0.9 <= waited < 3.0  # the reset, 1 s on (whole seconds); not much later on a loaded machine
