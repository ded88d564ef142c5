"""``await limiter.areserve(amount)`` over a RedisStore, against a real redis-server: a place in the order
of every client of the key, taken in one round trip, awaited to its instant or given back by the script's
rule."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, TypeVar

import aiotb
import pytest

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]
KEY = "test-reservations"


def limiter_on(url: str, *args: Any, **kwargs: Any) -> Any:
    return aiotb.Limiter(*args, store=aiotb.RedisStore(url, KEY), **kwargs)


async def closing(check: Awaitable[None], *limiters: Any) -> None:
    """check, then every limiter's client closed, whether check passed or not."""
    try:
        await check
    finally:
        for limiter in limiters:
            await limiter.store.redis.aclose()


async def next_token_in(limiter: Any) -> float:
    """Seconds until every client of the key could take one more token (one round trip)."""
    return await limiter._store_rates.fit_delay(1) / 1e9


def test_a_reservation_takes_its_place_for_every_client(run: Run[None], redis_url: str) -> None:
    a, b = limiter_on(redis_url, 2, 1, burst=1), limiter_on(redis_url, 2, 1, burst=1)  # a token each 0.5 s

    async def check() -> None:
        loop = asyncio.get_running_loop()
        await a.acquire()
        reservation = await a.areserve(1)
        assert isinstance(reservation, aiotb.RedisReservation) and not reservation.done()
        assert 0 < reservation.delay <= 0.5
        assert 0.5 < await next_token_in(b) <= 1.0  # b's next token comes after the reserved one
        await reservation
        assert loop.time() >= reservation.ready_at
        assert reservation.done() and not await reservation.acancel()
        assert a.stats().granted == 2 and a.stats().granted_tokens == 2
        with pytest.raises(RuntimeError, match="already awaited"):
            await reservation

    run(closing(check(), a, b))


def test_a_reservation_given_back_restores_its_tokens(run: Run[None], redis_url: str) -> None:
    a, b = limiter_on(redis_url, 1, 3600, burst=2), limiter_on(redis_url, 1, 3600, burst=2)

    async def check() -> None:
        await a.acquire(2)
        reservation = await a.areserve(1)
        assert reservation.delay == pytest.approx(3600, abs=1)
        assert await next_token_in(b) == pytest.approx(7200, abs=1)
        assert await reservation.acancel() and not await reservation.acancel()
        assert await next_token_in(b) == pytest.approx(3600, abs=1)  # nobody reserved after it: all back
        assert a.stats().granted == 1

    run(closing(check(), a, b))


def test_a_reservation_cancelled_while_awaited_is_given_back(run: Run[None], redis_url: str) -> None:
    a, b = limiter_on(redis_url, 1, 3600, burst=2), limiter_on(redis_url, 1, 3600, burst=2)

    async def check() -> None:
        await a.acquire(2)
        reservation = await a.areserve(1)
        waiting = asyncio.ensure_future(_awaited(reservation))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        deadline = time.monotonic() + 5
        while await next_token_in(b) > 3601 and time.monotonic() < deadline:  # the give-back's round trip
            await asyncio.sleep(0.01)
        assert await next_token_in(b) == pytest.approx(3600, abs=1)
        assert a.stats().granted == 1

    run(closing(check(), a, b))


async def _awaited(reservation: Any) -> None:
    await reservation


def test_a_reservation_checks_its_amount_and_names_its_call(run: Run[None], redis_url: str) -> None:
    limiter = limiter_on(redis_url, 10, 1, burst=2)

    async def check() -> None:
        with pytest.raises(ValueError, match="amount"):
            await limiter.areserve(0)
        with pytest.raises(ValueError, match="burst"):
            await limiter.areserve(3)
        with pytest.raises(TypeError, match=r"await limiter\.areserve\(amount\)"):
            limiter.reserve(1)
        assert await limiter.atry_acquire(2)  # nothing was taken by the refused calls

    run(closing(check(), limiter))


def test_a_leased_store_refuses_reservations_with_its_reason(run: Run[None], redis_url: str) -> None:
    limiter = aiotb.Limiter(10, 1, store=aiotb.RedisStore(redis_url, KEY, lease=1.0))

    async def check() -> None:
        reason = "a limiter over a leased RedisStore grants from the units this process holds for a while"
        with pytest.raises(TypeError, match=reason):
            limiter.reserve(1)
        with pytest.raises(TypeError, match=reason):
            await limiter.areserve(1)

    run(closing(check(), limiter))


def test_a_reservation_given_back_while_awaited_wakes_its_awaiter(run: Run[None], redis_url: str) -> None:
    a, b = limiter_on(redis_url, 1, 3600, burst=2), limiter_on(redis_url, 1, 3600, burst=2)

    async def check() -> None:
        await a.acquire(2)
        reservation = await a.areserve(1)
        waiting = asyncio.ensure_future(_awaited(reservation))
        await asyncio.sleep(0.01)
        assert not reservation.done() and not waiting.done()  # awaited, not granted: due in an hour
        assert await reservation.acancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 5)  # at once, not in an hour
        assert reservation.done() and await next_token_in(b) == pytest.approx(3600, abs=1)
        assert a.stats().granted == 1

    run(closing(check(), a, b))
