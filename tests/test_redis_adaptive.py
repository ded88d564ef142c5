"""AdaptiveLimiter over a RedisStore: the rule runs in the key's script for every client of the key. Two clients
(each its own connection, as two hosts) cut the key's rate once per round between them, a growth step comes only
if no client cut since the asker began to count, the bounds hold, and the HTTP adapters feed it. The store's clock
is the test's (it moves only when the test moves it), so every figure is exact."""

from __future__ import annotations

import asyncio
import importlib
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import httpx
import pytest
from conftest import ClientClock

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


def adaptive(lib: SimpleNamespace, redis_url: str, key: str, *args: Any, **kwargs: Any) -> Any:
    store = lib.package.RedisStore(redis_url, key)
    store._client_clock = True  # the test's clock
    return lib.package.AdaptiveLimiter(*args, store=store, **kwargs)


async def closed(*limiters: Any) -> None:
    for limiter in limiters:
        await limiter.store.redis.aclose()


async def key_rate(limiter: Any) -> float:
    """The key's first rate in Redis, in tokens per second."""
    ns_per_token = await limiter.store.redis.hget(limiter.store.redis_key, "t1")
    return 1e9 / float(ns_per_token)


def test_two_clients_cut_the_keys_rate_once_per_round(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                      store_clock: ClientClock) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        a = adaptive(lib, redis_url, "rounds", 100, 1, min_rate=10)
        b = adaptive(lib, redis_url, "rounds", 100, 1, min_rate=10)
        assert type(a).__name__ == "RedisAdaptiveLimiter" and isinstance(a, lib.package.AdaptiveLimiter)
        try:
            seen: list[Any] = []
            await a.aobserve(429, sent_at=loop.time())  # a cut: 80
            seen.append((a.max_rate, a.cuts, await key_rate(a)))
            await b.aobserve(429, sent_at=loop.time() - 0.01)  # sent before a's cut (the store's clock stood
            seen.append((b.max_rate, b.cuts, await key_rate(b)))  # still): the same round; b hears 80
            await a.aobserve(503, sent_at=loop.time() - 0.01)  # the same round
            store_clock.us += 2_000_000
            await asyncio.sleep(0.01)  # the loop's clock moves too (uvloop's reads whole ms, once per iteration)
            await b.aobserve(503, sent_at=loop.time())  # sent 2 s after the cut, by the key's clock: 64
            seen.append((b.max_rate, b.cuts, await key_rate(b)))
            await asyncio.sleep(0.01)
            await a.aobserve(429, sent_at=loop.time())  # after the cut a knows of; at b's instant by the key's
            seen.append((a.max_rate, a.cuts, await key_rate(a)))  # clock: b's round, no cut, and a hears 64
            return seen
        finally:
            await closed(a, b)

    assert run(main()) == [(80, 1, 80), (80, 0, 80), (64, 1, 64), (64, 1, 64)]


def test_a_step_comes_only_if_no_client_cut_since_the_asker_began_to_count(
        lib: SimpleNamespace, run: Run[Any], redis_url: str, store_clock: ClientClock) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        a = adaptive(lib, redis_url, "steps", 100, 1, min_rate=10, burst=1)
        b = adaptive(lib, redis_url, "steps", 100, 1, min_rate=10, burst=1)
        waiter = None
        try:
            seen = []
            await a.aobserve(429, sent_at=loop.time())  # 80
            store_clock.us += 2_000_000
            await asyncio.sleep(0.01)
            await b.aobserve(429, sent_at=loop.time())  # 64: 80 is known too high
            await a.acquire()  # the burst taken; a pause of the key, so that a waiter waits
            await a.apenalize(60)
            waiter = asyncio.create_task(a.acquire())
            while not a.waiting:
                await asyncio.sleep(0.001)
            store_clock.us += 10_000_000
            seen.append(await successes_until_a_change(a))  # a period's worth at the rate a knows (80)...
            seen += [await key_rate(a), a.max_rate]  # ...takes the key's 64 half way to 80
            for _ in range(36):  # a's count starts anew; b cuts before a has a period's worth (72)
                await a.aobserve(200, sent_at=loop.time())
            store_clock.us += 2_000_000
            await asyncio.sleep(0.01)
            await b.aobserve(429, sent_at=loop.time())  # 57.6
            seen.append(36 + await successes_until_a_change(a))  # a period's worth, but a cut came meanwhile:
            seen += [await key_rate(a), a.max_rate]               # no step, and a hears the cut
            return seen
        finally:
            if waiter is not None:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
            await closed(a, b)

    seen = run(main())
    assert seen[0] in (80, 81) and seen[3] in (72, 73), seen  # 1/rate summed rate times may fall short of 1
    assert [seen[1], seen[2], seen[4], seen[5]] == pytest.approx([72, 72, 57.6, 57.6])


async def successes_until_a_change(limiter: Any) -> int:
    """Feeds limiter successes until it hears a rate other than its own (at most 200); how many it took."""
    loop, before = asyncio.get_running_loop(), limiter.max_rate
    for count in range(1, 201):
        await limiter.aobserve(200, sent_at=loop.time())
        if limiter.max_rate != before:
            return count
    return 0


def test_the_floor_of_a_cut_is_what_the_clients_said_they_were_served(lib: SimpleNamespace, run: Run[Any],
                                                                      redis_url: str, store_clock: ClientClock) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        a = adaptive(lib, redis_url, "served", 50, 1, min_rate=1)
        b = adaptive(lib, redis_url, "served", 50, 1, min_rate=1)
        try:
            for limiter in (a, b):  # each served 30 in the last second (nobody waits: no step asked for)
                for _ in range(30):
                    await limiter.aobserve(200, sent_at=loop.time())
            await a.aobserve(429, sent_at=loop.time())  # 40: the floor, 0.8 x the 30 a told, is lower
            await b.aobserve(429, sent_at=loop.time() - 0.01)  # the same round: no cut, and b tells its 30
            store_clock.us += 500_000
            await asyncio.sleep(0.01)
            await a.aobserve(429, sent_at=loop.time())  # a new round: 0.8 x 40 = 32, below 0.8 x (30 + 30) = 48:
            return [a.max_rate, a.cuts, await key_rate(a)]  # a cut all the same, to what the server just served
        finally:
            await closed(a, b)

    assert run(main()) == [40, 2, 40]


def test_cuts_stop_at_min_rate_and_each_still_ends_a_round(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                           store_clock: ClientClock) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        limiter = adaptive(lib, redis_url, "floor", 100, 1, min_rate=30, decrease=0.5)
        try:
            seen = []
            for _ in range(4):
                store_clock.us += 2_000_000
                await asyncio.sleep(0.01)  # the loop's clock moves too (uvloop's reads whole ms)
                await limiter.aobserve(429, sent_at=loop.time())
                seen.append((limiter.max_rate, await key_rate(limiter)))
            await limiter.aobserve(429, sent_at=loop.time() - 0.01)  # the same round as the last cut
            seen.append(limiter.cuts)
            return seen
        finally:
            await closed(limiter)

    assert run(main()) == [(50, 50), (30, 30), (30, 30), (30, 30), 4]


def test_observe_needs_the_round_trip_and_bad_input_is_refused_before_it(
        lib: SimpleNamespace, run: Run[Any], redis_url: str, store_clock: ClientClock) -> None:
    async def main() -> float:
        limiter = adaptive(lib, redis_url, "input", 100, 1, min_rate=10)
        try:
            with pytest.raises(TypeError, match=r"await limiter\.aobserve"):
                limiter.observe(429, sent_at=0.0)
            with pytest.raises(TypeError, match="status"):
                await limiter.aobserve("429", sent_at=0.0)
            with pytest.raises(ValueError, match="status"):
                await limiter.aobserve(99, sent_at=0.0)
            with pytest.raises(ValueError, match="sent_at"):
                await limiter.aobserve(429, sent_at=float("nan"))
            with pytest.raises(ValueError, match="amount"):
                await limiter.aobserve(200, sent_at=0.0, amount=-1)
            assert await limiter.store.redis.exists(limiter.store.redis_key) == 0  # nothing reached Redis
            return float(limiter.max_rate)
        finally:
            await closed(limiter)

    assert run(main()) == 100


def test_the_httpx_adapter_cuts_the_keys_rate_on_a_429(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                        store_clock: ClientClock) -> None:
    async def main() -> list[float]:
        limiter = adaptive(lib, redis_url, "adapter", 100, 1, min_rate=10)
        other = adaptive(lib, redis_url, "adapter", 100, 1, min_rate=10)
        answers = iter([429, 200])
        transport = importlib.import_module(f"{lib.package.__name__}.httpx").LimitedTransport(
            limiter, httpx.MockTransport(lambda request: httpx.Response(next(answers))), follow=None, retries=0)
        try:
            async with httpx.AsyncClient(transport=transport) as client:
                statuses = [(await client.get("http://api.test/")).status_code for _ in range(2)]
            assert statuses == [429, 200]
            await other.aobserve(429, sent_at=asyncio.get_running_loop().time() - 0.01)  # the same round
            return [limiter.max_rate, await key_rate(limiter), other.max_rate, other.cuts]
        finally:
            await closed(limiter, other)

    assert run(main()) == [80, 80, 80, 0]
