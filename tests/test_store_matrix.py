"""The table of stores (README.md, docs/guides/stores.md), cell by cell, at run time: every feature over every
store either works (a real call, checked) or is refused with the table's reason (``aiotb._capabilities``), each
of the row's calls. On both engines where the store allows (a SharedMemoryStore needs the C one), against the
session's redis-server and real loops and threads."""

from __future__ import annotations

import asyncio
import re
import uuid
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

import pytest

import aiotb
from aiotb._capabilities import FEATURES, STORES, refusal

Step = Callable[[], Any]  # one call of a feature: its value, or an awaitable of it, must not be False


class Cell:
    """One store of one kind, and the limiters a cell made over it (closed at its end)."""

    def __init__(self, lib: SimpleNamespace, kind: str, store: Any) -> None:
        self.lib, self.kind, self.store = lib, kind, store
        self.made: list[Any] = []

    @property
    def remote(self) -> bool:
        return self.kind.startswith("RedisStore")

    def make(self, cls: Any, *args: Any, **kwargs: Any) -> Any:
        limiter = cls(*args, **kwargs) if self.store is None else cls(*args, store=self.store, **kwargs)
        self.made.append(limiter)
        return limiter

    def limiter(self) -> Any:
        return self.make(self.lib.Limiter, 1000, 1)

    def keyed(self, key: str) -> Any:
        """The limiter of key in a KeyedLimiter over the store."""
        limiter = self.make(self.lib.KeyedLimiter, 1000, 1)[key]
        self.made.append(limiter)
        return limiter

    async def close(self) -> None:
        for limiter in self.made:
            if hasattr(limiter, "aclose"):  # a leased store's: its units back
                await limiter.aclose()
            for _ in range(3000):  # a Redis limiter's round trips on their way (a reservation given back)
                if not getattr(limiter, "_trips", None):
                    break
                await asyncio.sleep(0.01)
        if self.remote:
            await self.store.redis.aclose()


async def acquired(limiter: Any) -> bool:
    """limiter used as a task uses it: async with, acquire with a timeout, a decorated call, a slot."""
    async with limiter:
        pass
    await limiter.acquire(1, timeout=5)

    @limiter
    async def call() -> int:
        return 1

    assert await call() == 1
    async with limiter.slot(2):
        pass
    return bool(limiter.stats().granted == 4)


def in_thread(call: Callable[[], Any]) -> Awaitable[Any]:
    """call() in a plain thread of its own (no event loop there), while this loop runs."""
    return asyncio.get_running_loop().run_in_executor(None, call)


async def blocked(limiter: Any) -> bool:
    """limiter used first on this loop, then by a plain thread's blocking calls while this loop runs."""
    await limiter.acquire()

    def there() -> bool:
        limiter.acquire_blocking()
        with limiter:
            pass
        return True

    return bool(await in_thread(there))


async def used(limiter: Any, call: Callable[[Any], Awaitable[Any]]) -> Any:
    """call(limiter) once the limiter was used (a leased store's holds units only then)."""
    await limiter.acquire()
    return await call(limiter)


async def other_loop(limiter: Any) -> bool:
    """limiter used first on this loop, then on a loop of another thread while this one runs."""
    await limiter.acquire()

    async def there() -> bool:
        for _ in range(3):
            async with limiter:
                pass
        return True

    return bool(await in_thread(lambda: asyncio.run(there())))


async def reserved(limiter: Any, remote: bool) -> bool:
    place = await limiter.areserve(1) if remote else limiter.reserve(1)
    await place
    return True


def steps(feature: str, cell: Cell) -> list[Step]:
    """The calls of feature's row over the cell's store: the awaitable ones over Redis, both forms elsewhere."""
    lib, remote = cell.lib, cell.remote
    later = lambda: asyncio.get_running_loop().time() + 0.01  # noqa: E731
    if feature == "async with, acquire(timeout=), decorators, slot":
        return [lambda: acquired(cell.limiter())]
    if feature == "try_acquire, has_capacity, tokens":
        return [lambda: cell.limiter().try_acquire(), lambda: cell.limiter().has_capacity(),
                lambda: cell.limiter().tokens > 0]
    if feature == "atry_acquire, ahas_capacity, read_tokens":
        return [lambda: used(cell.limiter(), lambda limiter: limiter.atry_acquire()),
                lambda: used(cell.limiter(), lambda limiter: limiter.ahas_capacity()),
                lambda: used(cell.limiter(), lambda limiter: positive(limiter.read_tokens()))]
    if feature == "several rates at once":
        return [lambda: acquired(cell.make(lib.Limiter, rates=[(1000, 1), (10_000, 60)]))]
    if feature == "set_rate / aset_rate":
        local = [] if remote else [lambda: cell.limiter().set_rate(500) is None]
        return [*local, lambda: done(cell.limiter().aset_rate(500))]
    if feature == "penalize, retry_after / apenalize, aretry_after":
        local = [] if remote else [lambda: cell.limiter().penalize(0.01) is None,
                                   lambda: cell.limiter().retry_after("0") == 0]
        return [*local, lambda: done(cell.limiter().apenalize(0.01)),
                lambda: positive(cell.limiter().aretry_after(0.01))]
    if feature == "pause_until / apause_until":
        local = [] if remote else [lambda: cell.limiter().pause_until(later()) is None]
        return [*local, lambda: done(cell.limiter().apause_until(later()))]
    if feature == "limit_until, follow / alimit_until, afollow":
        local = [] if remote else [lambda: limited_now(cell.limiter()), lambda: followed_now(cell.limiter())]
        return [*local, lambda: limited(cell.limiter()), lambda: followed(cell.limiter())]
    if feature == "settle / asettle":
        slow = lambda: cell.make(lib.Limiter, 30, 60)  # noqa: E731  # 30 at once, half a token a second
        local = [] if remote else [lambda: settled_now(slow())]
        return [*local, lambda: settled(slow()), lambda: slot_settled(slow())]
    if feature == "reserve / areserve":
        return [lambda: reserved(cell.limiter(), remote)]
    if feature == "threads: acquire_blocking, with limiter":
        return [lambda: blocked(cell.limiter())]
    if feature == "several event loops":
        return [lambda: other_loop(cell.limiter())]
    if feature == "WindowLimiter":
        return [lambda: acquired(cell.make(lib.WindowLimiter, 1000, 1))]
    if feature == "AsyncLimiter":
        return [lambda: acquired(cell.make(lib.AsyncLimiter, 1000, 1))]
    if feature == "AdaptiveLimiter":
        adaptive = lambda: cell.make(lib.AdaptiveLimiter, 1000, 1, min_rate=10)  # noqa: E731
        local = [] if remote else [lambda: cut_now(adaptive())]
        return [*local, lambda: acquired(adaptive()), lambda: cut(adaptive())]
    assert feature == "KeyedLimiter"
    return [lambda: acquired(cell.keyed("user"))]


def cut_now(limiter: Any) -> bool:
    """A 429 cuts the rate to 0.8 times what it was (the store's, which an earlier check may have cut)."""
    before = limiter.max_rate
    limiter.observe(429, sent_at=asyncio.get_running_loop().time())
    return bool(limiter.max_rate == pytest.approx(0.8 * before) and limiter.cuts == 1)


async def cut(limiter: Any) -> bool:
    """cut_now, awaited."""
    before = limiter.max_rate
    await limiter.aobserve(429, sent_at=asyncio.get_running_loop().time())
    return bool(limiter.max_rate == pytest.approx(0.8 * before) and limiter.cuts == 1)


# Each check's limit ends 10 s after the one before, so that it replaces a limit still running in a store the
# checks share (a segment's name): 2 requests left for 20 s, then for 40 s.
QUOTA_LEFT = {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "20"}
QUOTA_LEFT_LATER = {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "40"}


def limited_now(limiter: Any) -> bool:
    limiter.limit_until(3, asyncio.get_running_loop().time() + 10)
    return bool(limiter.tokens == 3)


def followed_now(limiter: Any) -> bool:
    return bool(limiter.follow(QUOTA_LEFT).requests.remaining == 2 and limiter.tokens == 2)


async def limited(limiter: Any) -> bool:
    await limiter.alimit_until(3, asyncio.get_running_loop().time() + 30)
    return bool(await limiter.read_tokens() == 3)


async def followed(limiter: Any) -> bool:
    return bool((await limiter.afollow(QUOTA_LEFT_LATER)).requests.remaining == 2 and await limiter.read_tokens() == 2)


async def settled_now(limiter: Any) -> bool:
    await limiter.acquire(3)
    before = limiter.tokens
    limiter.settle(3, 1)
    return bool(abs(limiter.tokens - before - 2) < 0.01)


async def settled(limiter: Any) -> bool:
    await limiter.acquire(3)
    before = await limiter.read_tokens()
    await limiter.asettle(3, 1)
    return bool(abs(await limiter.read_tokens() - before - 2) < 0.01)


async def slot_settled(limiter: Any) -> bool:
    async with limiter.slot(3) as slot:
        before = await limiter.read_tokens()
        await slot.asettle(1)
        return bool(abs(await limiter.read_tokens() - before - 2) < 0.01)


async def done(awaitable: Awaitable[None]) -> bool:
    return await awaitable is None


async def positive(awaitable: Awaitable[float]) -> bool:
    return await awaitable > 0


def test_the_table_covers_every_feature() -> None:
    cell = Cell(SimpleNamespace(), "in process", None)
    assert all(steps(feature, cell) for feature in FEATURES)


@pytest.mark.parametrize("kind", [kind for kind in STORES if not kind.startswith("RedisStore")])
@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_over_a_store_of_this_host(lib: SimpleNamespace, request: pytest.FixtureRequest, feature: str,
                                                kind: str) -> None:
    cell_checked(lib, request, feature, kind)


@pytest.mark.parametrize("kind", [kind for kind in STORES if kind.startswith("RedisStore")])
@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_over_redis(lib: SimpleNamespace, request: pytest.FixtureRequest, feature: str,
                                 kind: str) -> None:
    cell_checked(lib, request, feature, kind)


def cell_checked(lib: SimpleNamespace, request: pytest.FixtureRequest, feature: str, kind: str) -> None:
    """The feature over a store of kind works, or each of its row's calls is refused with the table's reason."""
    name = f"aiotb-matrix-{uuid.uuid4().hex[:12]}"
    package = lib.package
    if kind == "SharedMemoryStore":
        if lib.name != "c":
            pytest.skip("a SharedMemoryStore needs the C engine (tests/test_bad_input.py checks the twin refuses it)")
        store: Any = package.SharedMemoryStore(name)
    elif kind == "RedisStore":
        store = package.RedisStore(request.getfixturevalue("redis_url"), name)
    elif kind == "RedisStore(lease=)":
        store = package.RedisStore(request.getfixturevalue("redis_url"), name, lease=1.0, units=2)
    else:
        store = None
    cell = Cell(lib, kind, store)
    reason = refusal(feature, kind)

    async def main() -> list[object]:
        outcomes: list[object] = []
        try:
            for step in steps(feature, cell):
                try:
                    value = step()
                    if isinstance(value, Awaitable):
                        value = await value
                except TypeError as error:
                    outcomes.append(error)
                else:
                    outcomes.append(value)
        finally:
            await cell.close()
        return outcomes

    try:
        outcomes = asyncio.run(main())
    finally:
        if kind == "SharedMemoryStore":
            package.SharedMemoryStore.unlink(name)
    if reason:
        assert outcomes and all(isinstance(o, TypeError) and re.search(re.escape(reason), str(o)) for o in outcomes), \
            (reason, outcomes)
    else:
        assert outcomes and all(o is True for o in outcomes), outcomes
