"""AdaptiveLimiter: the rule's steps (cut once per round, grow while the rate holds requests back, the bounds),
its input checks, and the rule against a server of a sliding window that answers bare 429s, through the httpx
adapter, on the virtual clock (both engines)."""

from __future__ import annotations

import asyncio
import collections
import importlib
import math
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import httpx
import pytest

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


def adaptive(lib: SimpleNamespace, *args: Any, **kwargs: Any) -> Any:
    return lib.package.AdaptiveLimiter(*args, **kwargs)


def test_it_starts_at_max_rate_within_its_bounds(lib: SimpleNamespace) -> None:
    limiter = adaptive(lib, 200, 1, min_rate=1)
    assert (limiter.max_rate, limiter.rate, limiter.bounds, limiter.burst, limiter.cuts) == (200, 200, (1, 200), 1, 0)
    assert adaptive(lib, 200, 2, min_rate=5).burst == 10  # min_rate's tokens of a period
    assert adaptive(lib, 200, 1, min_rate=1, burst=30).burst == 30
    assert isinstance(limiter, lib.Limiter)


def test_a_429_cuts_once_per_round_of_requests(lib: SimpleNamespace, vrun: Run[list[float]]) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, 100, 1, min_rate=10)
        rates = []
        limiter.observe(429, sent_at=0.0)  # cut: 80
        rates.append(limiter.max_rate)
        limiter.observe(429, sent_at=0.0)  # sent at the cut's instant: the same round
        rates.append(limiter.max_rate)
        await asyncio.sleep(1)
        limiter.observe(503, sent_at=0.5)  # sent after the cut at 0: a new round, cut: 64
        rates.append(limiter.max_rate)
        limiter.observe(429, sent_at=0.9)  # before the cut at 1
        rates.append(limiter.max_rate)
        await asyncio.sleep(0.1)
        limiter.observe(429, sent_at=loop.time() - 0.05)  # sent after the cut at 1
        rates.append(limiter.max_rate)
        rates.append(limiter.cuts)
        return rates

    assert vrun(main()) == pytest.approx([80, 80, 64, 64, 51.2, 3])


def test_cuts_stop_at_min_rate(lib: SimpleNamespace, vrun: Run[tuple[float, int]]) -> None:
    async def main() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, 100, 1, min_rate=30, decrease=0.5)
        for _ in range(4):
            limiter.observe(429, sent_at=loop.time())
            await asyncio.sleep(0.1)
        return limiter.max_rate, limiter.cuts

    assert vrun(main()) == (30, 4)


def test_a_cut_keeps_most_of_what_the_server_served_in_the_last_period(lib: SimpleNamespace,
                                                                       vrun: Run[list[float]]) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, 200, 1, min_rate=1, burst=200)
        for _ in range(40):  # 40 served at 0.1 s; the rate holds nothing back: it does not grow
            await asyncio.sleep(0.0025)
            limiter.observe(200, sent_at=loop.time())
        seen = []
        for _ in range(12):  # a 429 per round: the server remembers the 40 of its last second
            await asyncio.sleep(0.02)
            limiter.observe(429, sent_at=loop.time() - 0.01)
            seen.append(limiter.max_rate)
        await asyncio.sleep(1)  # the 40 are more than a period ago: a cut may go lower now
        limiter.observe(429, sent_at=loop.time() - 0.01)
        seen.append(limiter.max_rate)
        return seen

    seen = vrun(main())
    assert seen[:7] == pytest.approx([160, 128, 102.4, 81.92, 65.536, 52.4288, 41.94304])
    assert seen[7:12] == pytest.approx([33.554432, 32, 32, 32, 32])  # 0.8 of the 40 served
    assert seen[12] == pytest.approx(25.6)


def test_it_remembers_one_period_of_successes_only(lib: SimpleNamespace, vrun: Run[int]) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, 100, 1, min_rate=10, burst=100)
        for _ in range(1000):  # 100 per second for 10 s, never a 429
            await asyncio.sleep(0.01)
            limiter.observe(200, sent_at=loop.time())
        return len(limiter._rule.served)

    assert vrun(main()) <= 101  # a long run without a 429 keeps no more than the last second's


def test_successes_grow_the_rate_half_way_back_then_probe_beyond(lib: SimpleNamespace,
                                                                 vrun: Run[list[float]]) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, 100, 1, min_rate=10, burst=1, increase=8, decrease=0.5)
        limiter.observe(429, sent_at=0.0)  # 50
        await asyncio.sleep(0.1)
        limiter.observe(429, sent_at=loop.time())  # 25: 50 is known too high
        await limiter.acquire()  # the one token of its burst: the rate now holds requests back
        seen = [limiter.max_rate]
        for _ in range(2000):
            limiter.observe(200, sent_at=loop.time())
            if limiter.max_rate != seen[-1]:
                seen.append(limiter.max_rate)
        return seen

    # a step per period's worth of successes (25, 38, 46 ...): half way to 50, at least 8; beyond 50 steps of
    # 8, 16, 32; no higher than max_rate
    assert vrun(main()) == pytest.approx([25, 37.5, 45.5, 53.5, 61.5, 77.5, 100])


def test_a_rate_that_holds_nothing_back_does_not_grow(lib: SimpleNamespace, vrun: Run[list[float]]) -> None:
    async def main() -> list[float]:
        limiter = adaptive(lib, 100, 1, min_rate=10, burst=10)
        limiter.observe(429, sent_at=0.0)  # 80
        seen = []
        for _ in range(200):  # 10 tokens free, no waiter: the client sends slower than the rate
            limiter.observe(200, sent_at=0.0)
        seen.append(limiter.max_rate)
        for status in (500, 502, 504):  # a failing server says nothing of the rate
            limiter.observe(status, sent_at=1.0)
        seen.append(limiter.max_rate)
        return seen

    assert vrun(main()) == [80, 80]


@pytest.mark.parametrize("kwargs, error, name", [
    ({"status": True}, TypeError, "status"), ({"status": "429"}, TypeError, "status"),
    ({"status": 99}, ValueError, "status"), ({"status": 600}, ValueError, "status"),
    ({"sent_at": math.nan}, ValueError, "sent_at"), ({"sent_at": "0"}, TypeError, "sent_at"),
    ({"amount": 0}, ValueError, "amount"), ({"amount": -1}, ValueError, "amount"),
    ({"amount": math.inf}, ValueError, "amount")])
def test_bad_observations_are_refused_and_change_nothing(lib: SimpleNamespace, vrun: Run[tuple[float, int]],
                                                       kwargs: dict[str, Any], error: type[Exception],
                                                       name: str) -> None:
    async def main() -> tuple[float, int]:
        limiter = adaptive(lib, 100, 1, min_rate=10)
        given = {"status": 429, "sent_at": 0.0, "amount": 1, **kwargs}
        status = given.pop("status")
        with pytest.raises(error, match=name):
            limiter.observe(status, **given)
        return limiter.max_rate, limiter.cuts

    assert vrun(main()) == (100, 0)


@pytest.mark.parametrize("kwargs, error, name", [
    ({"min_rate": 0}, ValueError, "min_rate"), ({"min_rate": 300}, ValueError, "min_rate"),
    ({"min_rate": "1"}, TypeError, "min_rate"), ({"decrease": 1}, ValueError, "decrease"),
    ({"decrease": 0}, ValueError, "decrease"), ({"decrease": math.nan}, ValueError, "decrease"),
    ({"increase": 0}, ValueError, "increase"), ({"increase": math.inf}, ValueError, "increase"),
    ({"burst": 0.5}, ValueError, "burst"), ({"time_period": 0}, ValueError, "time_period")])
def test_bad_parameters_are_refused(lib: SimpleNamespace, kwargs: dict[str, Any], error: type[Exception],
                                    name: str) -> None:
    given = {"min_rate": 1, **kwargs}
    with pytest.raises(error, match=name):
        adaptive(lib, 200, **given)


def test_the_adapters_feed_it_only_http_statuses(lib: SimpleNamespace, vrun: Run[tuple[list[int], float]]) -> None:
    async def main() -> tuple[list[int], float]:
        limiter = adaptive(lib, 100, 1, min_rate=10)
        answers = iter([999, 0, 429])  # a proxy's statuses that are not HTTP's: the answer, never an exception
        transport = importlib.import_module(f"{lib.package.__name__}.httpx").LimitedTransport(
            limiter, httpx.MockTransport(lambda request: httpx.Response(next(answers))), retries=0)
        async with httpx.AsyncClient(transport=transport) as client:
            statuses = [(await client.get("http://api.test/")).status_code for _ in range(3)]
        return statuses, limiter.max_rate

    assert vrun(main()) == ([999, 0, 429], 80)


def test_the_stores_that_keep_no_rule_refuse_it_with_the_tables_reason(lib: SimpleNamespace) -> None:
    from aiotb._capabilities import refusal

    leased = lib.package.RedisStore("redis://127.0.0.1:1", "k", lease=1.0)  # never reached
    with pytest.raises(TypeError) as refused:
        adaptive(lib, 200, 1, min_rate=1, store=leased)
    assert str(refused.value) == refusal("AdaptiveLimiter", "RedisStore(lease=)")

    class Mine(lib.package.AdaptiveLimiter):
        pass

    with pytest.raises(TypeError, match="store= works with AdaptiveLimiter itself, not Mine"):
        Mine(200, 1, min_rate=1, store=lib.package.RedisStore("redis://127.0.0.1:1", "k"))


class SlidingServer:
    """``limit`` requests per any ``window`` s (those it answered 200), a bare 429 above it; ``limit`` may be
    changed while it runs. Records each answer as (loop time, status)."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit, self.window = limit, window
        self.served: collections.deque[float] = collections.deque()
        self.answers: list[tuple[float, int]] = []

    def answer(self, now: float) -> int:
        while self.served and self.served[0] <= now - self.window:
            self.served.popleft()
        status = 200 if len(self.served) < self.limit else 429
        if status == 200:
            self.served.append(now)
        self.answers.append((now, status))
        return status


def test_it_finds_a_sliding_windows_quota_through_the_httpx_adapter(lib: SimpleNamespace,
                                                                    vrun: Run[SlidingServer]) -> None:
    async def main() -> SlidingServer:
        loop = asyncio.get_running_loop()
        server = SlidingServer(40, 1.0)
        limiter = adaptive(lib, 200, 1, min_rate=1)

        async def respond(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(0.01)  # half a round trip there
            status = server.answer(loop.time())
            await asyncio.sleep(0.01)  # and back
            return httpx.Response(status)

        transport = importlib.import_module(f"{lib.package.__name__}.httpx").LimitedTransport(limiter, httpx.MockTransport(respond), retries=0)

        async def client(http: httpx.AsyncClient) -> None:
            while loop.time() < 60:
                await http.get("/")

        async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as http:
            await asyncio.gather(*(client(http) for _ in range(8)))
        return server

    server = vrun(main())
    late = [status for at, status in server.answers if at >= 10]
    served = late.count(200)
    assert late.count(429) <= 0.02 * len(late), (late.count(429), len(late))
    assert served >= 0.85 * 40 * 50, served  # of the 40 per second the server allows, from 10 s to 60 s
