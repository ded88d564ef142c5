"""``@limiter``, ``@limiter.limit(...)`` and ``KeyedLimiter``, on both engines."""

from __future__ import annotations

import asyncio
import gc

import pytest
from test_scenarios import ns


def test_decorator_takes_a_token_per_call(lib, vrun):
    limiter = lib.Limiter(2, 1, burst=1)
    calls: list[int] = []

    @limiter
    async def fetch(page: int) -> int:
        """Gets a page."""
        calls.append(ns(asyncio.get_running_loop().time()))
        return page * 10

    async def main() -> list[int]:
        return await asyncio.gather(*(fetch(page) for page in range(4)))

    assert vrun(main()) == [0, 10, 20, 30]
    assert calls == [0, ns(0.5), ns(1.0), ns(1.5)]
    assert fetch.__name__ == "fetch" and fetch.__doc__ == "Gets a page."


def test_amount_from_the_call(lib, vrun):
    limiter = lib.Limiter(100, 1, initial=0)  # 100 tokens per second, none at first

    @limiter.limit(amount=lambda prompt, **_: len(prompt.split()))
    async def complete(prompt: str, *, model: str = "m") -> str:
        return f"{model}:{prompt}"

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        first = await complete("one two three four five")
        t1 = ns(loop.time())
        second = await complete("ten words " * 5, model="x")
        return [first, t1, second, ns(loop.time())]

    assert vrun(main()) == ["m:one two three four five", ns(0.05), "x:" + "ten words " * 5, ns(0.15)]


def test_fixed_amount_and_bad_uses(lib, vrun):
    limiter = lib.Limiter(10, 1, initial=0)

    @limiter.limit(amount=5)
    async def heavy() -> str:
        return "done"

    async def main() -> tuple[str, int]:
        result = await heavy()
        return result, ns(asyncio.get_running_loop().time())

    assert vrun(main()) == ("done", ns(0.5))
    with pytest.raises(ValueError, match="amount must not exceed burst"):
        limiter.limit(amount=11)
    with pytest.raises(TypeError, match="amount must be a real number"):
        limiter.limit(amount="5")
    with pytest.raises(TypeError, match="decorates async functions"):
        limiter(lambda: None)
    assert limiter.tokens == 0.0  # checking the amounts took nothing


def test_keys_are_independent(lib, vrun):
    async def main() -> dict[str, list[int]]:
        loop = asyncio.get_running_loop()
        keyed = lib.KeyedLimiter(1, 1)
        seen: dict[str, list[int]] = {"alice": [], "bob": []}

        async def call(user: str) -> None:
            async with keyed[user]:
                seen[user].append(ns(loop.time()))

        await asyncio.gather(*(call(user) for user in ["alice", "bob", "alice", "bob", "alice"]))
        await keyed.acquire("bob", 1, timeout=5)
        seen["bob"].append(ns(loop.time()))
        with pytest.raises(TimeoutError):
            await keyed.acquire("alice", 1, timeout=0.5)
        return seen

    assert vrun(main()) == {"alice": [0, ns(1), ns(2)], "bob": [0, ns(1), ns(2)]}


def test_options_are_checked_once_and_passed_on(lib):
    with pytest.raises(ValueError, match="max_rate"):
        lib.KeyedLimiter(-1, 1)
    with pytest.raises(TypeError):
        lib.KeyedLimiter(1, 1, colour="red")
    keyed = lib.KeyedLimiter(10, 1, burst=3, fair=False)
    limiter = keyed["k"]
    assert (limiter.burst, limiter.fair, limiter.rate) == (3, False, 10)
    assert "k" in keyed and len(keyed) == 1


def test_memory_follows_the_keys_in_use(lib, vrun):
    count = 100_000 if lib.name == "c" else 30_000  # keys seen: many times more than the bound below

    async def main() -> tuple[int, int, list[int]]:
        keyed = lib.KeyedLimiter(10, 1)  # a used key is full again 0.1 s after its last token
        held = keyed["held"]
        held.try_acquire()
        most = 0
        for i in range(count):
            assert keyed[i].try_acquire()
            most = max(most, len(keyed))
            if i % 1000 == 999:
                await asyncio.sleep(0.01)  # 1,000 new keys per 10 ms: about 10,000 are not yet full
        await asyncio.sleep(1)
        for i in range(2 * SWEEP):  # later traffic sweeps out the rest
            keyed[("late", i % 3)]
        return most, len(keyed), [int("held" in keyed)]

    SWEEP = 10_000
    most, left, held_kept = vrun(main())
    assert most <= 13_000  # bounded by the keys used in the last ~0.1 s, not by every key seen
    assert left == 3 + 1 and held_kept == [1]  # a limiter someone holds is never dropped
    gc.collect()


def test_a_held_limiter_is_never_replaced(lib, vrun):
    async def main() -> list[object]:
        keyed = lib.KeyedLimiter(1, 3600)
        mine = keyed["k"]
        await mine.acquire()
        for i in range(100):
            keyed[i]
        return [keyed["k"] is mine, keyed["k"].try_acquire()]

    assert vrun(main()) == [True, False]  # the same bucket, still empty: no second burst for "k"
