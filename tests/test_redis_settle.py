"""settle over a RedisStore: the key's rates and window give back or take a grant's difference for every client of
the key, as the engine does in one process; the store's clock stands still (the test's), so the figures are exact.
Each token takes at least 10 s: a grant used later than a token's time after it was made is taken again (the stale
rule), which a stalled loop on a loaded machine would otherwise meet."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, TypeVar

import pytest
from conftest import ClientClock

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]


def store(lib: SimpleNamespace, redis_url: str, key: str = "settled") -> Any:
    made = lib.package.RedisStore(redis_url, key)
    made._client_clock = True  # the test's clock, which stands still: no refill between the calls
    return made


def test_rates_give_back_and_take_debt_for_every_client(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                        store_clock: ClientClock) -> None:
    async def main() -> list[float]:
        a = lib.Limiter(rates=[(10, 100), (100, 6000, 20)], store=store(lib, redis_url))
        b = lib.Limiter(rates=[(10, 100), (100, 6000, 20)], store=store(lib, redis_url))
        try:
            seen = []
            await a.acquire(5)
            await a.asettle(5, 2)  # 3 back to each rate
            seen.append(await b.read_tokens())  # 10 - 2
            await b.acquire(4)
            await b.asettle(4, 7)  # 3 more, now
            seen.append(await a.read_tokens())  # 8 - 7
            await a.acquire(1)
            await a.asettle(1, 11)  # a debt of 10 on the first rate, 10 on the second (of 20)
            seen.append(await b.read_tokens())
            seen.append(await b._store_rates.fit_delay(1) / 1e9)  # the first rate's debt and the token: 110 s
            await a.asettle(1, 0)  # a refund reaches no fuller than full
            return seen
        finally:
            for limiter in (a, b):
                await limiter.store.redis.aclose()

    assert run(main()) == [8.0, 1.0, 0.0, pytest.approx(110, abs=1e-9)]


def test_a_window_logs_the_settled_amount(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                          store_clock: ClientClock) -> None:
    async def main() -> list[float]:
        limiter = lib.WindowLimiter(10, 100, store=store(lib, redis_url))
        try:
            seen = []
            await limiter.acquire(4)
            await limiter.asettle(4, 1)  # its log entry keeps 1
            seen.append(await limiter.read_tokens())
            await limiter.acquire(2)
            await limiter.asettle(2, 5)  # 3 more, logged now
            seen.append(await limiter.read_tokens())
            async with limiter.slot(2) as slot:  # held: settled inside the block, it holds 1
                await slot.asettle(1)
                seen.append(await limiter.read_tokens())
            seen.append(await limiter.read_tokens())  # ended: its 1 stays in the window
            async with limiter.slot(1) as slot:
                pass
            await slot.asettle(2)  # after the block: 1 more, logged now
            seen.append(await limiter.read_tokens())
            return seen
        finally:
            await limiter.store.redis.aclose()

    assert run(main()) == [9.0, 4.0, 3.0, 3.0, 1.0]


def test_a_debt_counts_against_a_servers_limit(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                               store_clock: ClientClock) -> None:
    async def main() -> float:
        limiter = lib.Limiter(100, 1000, store=store(lib, redis_url))
        try:
            await limiter.alimit_until(5, asyncio.get_running_loop().time() + 100)
            await limiter.acquire(1)
            await limiter.asettle(1, 3)  # the limit's count loses the 2 more
            return float(await limiter.read_tokens())
        finally:
            await limiter.store.redis.aclose()

    assert run(main()) == 2.0


@pytest.mark.parametrize("taken, used, error, words", [
    (0, 1, ValueError, "taken"), (11, 1, ValueError, "taken must not exceed burst"), ("x", 1, TypeError, "taken"),
    (1, -1, ValueError, "used"), (1, float("nan"), ValueError, "used"), (1, 1e30, ValueError, "26 days")])
def test_bad_input_names_itself_and_changes_nothing(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                    store_clock: ClientClock, taken: Any, used: Any,
                                                    error: type[Exception], words: str) -> None:
    async def main() -> tuple[str, float, float]:
        limiter = lib.Limiter(10, 100, store=store(lib, redis_url))
        try:
            await limiter.acquire(4)
            before = await limiter.read_tokens()
            with pytest.raises(error) as raised:
                await limiter.asettle(taken, used)
            return str(raised.value), before, await limiter.read_tokens()
        finally:
            await limiter.store.redis.aclose()

    message, before, after = run(main())
    assert words in message and before == after == 6.0


def test_the_calls_that_need_a_round_trip_name_their_coroutine(lib: SimpleNamespace, run: Run[Any],
                                                               redis_url: str) -> None:
    async def main() -> list[str]:
        limiter = lib.Limiter(10, 100, store=store(lib, redis_url))
        errors = []
        try:
            await limiter.acquire(2)
            with pytest.raises(TypeError) as raised:
                limiter.settle(2, 1)
            errors.append(str(raised.value))
            async with limiter.slot(2) as slot:
                with pytest.raises(TypeError) as raised:
                    slot.settle(1)
                errors.append(str(raised.value))
                await slot.asettle(1)  # the coroutine works where the call does not
            with pytest.raises(RuntimeError, match="settled already"):
                await slot.asettle(1)
            return errors
        finally:
            await limiter.store.redis.aclose()

    errors = run(main())
    assert "await limiter.asettle(taken, used)" in errors[0] and "await slot.asettle(used)" in errors[1]


def test_a_slot_settled_twice_at_once_is_settled_once(lib: SimpleNamespace, run: Run[Any], redis_url: str,
                                                      store_clock: ClientClock) -> None:
    async def main() -> tuple[list[str], float]:
        limiter = lib.Limiter(10, 100, store=store(lib, redis_url))
        try:
            async with limiter.slot(4) as slot:
                outcomes = await asyncio.gather(slot.asettle(1), slot.asettle(2), return_exceptions=True)
            with pytest.raises(ValueError, match="used"):
                async with limiter.slot(1) as failed:
                    await failed.asettle(-1)  # refused: the slot is not settled, and may be again
            await failed.asettle(0)
            return [type(o).__name__ for o in outcomes], await limiter.read_tokens()
        finally:
            await limiter.store.redis.aclose()

    names, tokens = run(main())
    assert names == ["NoneType", "RuntimeError"] and tokens == 9.0  # 4 taken, settled at 1; 1 taken, settled at 0
