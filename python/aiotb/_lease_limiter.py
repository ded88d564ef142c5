"""``Limiter`` over a ``RedisStore(..., lease=seconds)``: an in-process limiter (its engine, queue, dispatcher and
fast path) whose rates are the units of the key it holds, which its lease keeper (``_store_lease``) sets as the
lease is renewed. Its calls that may need Redis are the awaitable ones, as over a RedisStore without lease=."""

from __future__ import annotations

import asyncio
import math
from typing import Any, Sequence

from . import _params
from ._capabilities import refused
from ._core import Bucket
from ._limiter import Limiter, serve
from ._remote import OnItsLoop, on_its_loop, pause_ns
from ._reservation import BaseReservation
from ._store_lease import LeaseKeeper
from ._store_redis import RedisStore


class RedisLeaseLimiter(OnItsLoop, Limiter[RedisStore]):
    """``Limiter(..., store=RedisStore(redis, key, lease=seconds))``: grants from a share of the key's rates
    leased to this limiter (see docs/guides/redis.md). Its methods that may talk to Redis are coroutines, as
    ``RedisLimiter``'s: ``await limiter.atry_acquire()``, ``ahas_capacity``, ``read_tokens``, ``apenalize``,
    ``aretry_after``; ``await limiter.aclose()`` gives its units back at once (else they come back as its lease
    ends). A timeout is waited out: when units come is not known in advance."""

    __slots__ = ("_store", "_keeper", "_loop")

    def __init__(self, max_rate: float | None = None, time_period: float = 60, *,
                 burst: float | None = None, initial: float | None = None, fair: bool = True,
                 rates: Sequence[tuple[float, ...]] | None = None, store: RedisStore | None = None) -> None:
        if not isinstance(store, RedisStore) or store.lease is None:
            raise TypeError(f"store must be a RedisStore with lease=, got {store!r}")
        checked = _params.limiter_rates(max_rate, time_period, burst, initial, rates)
        self._setup(checked, None, _params.flag("fair", fair), smallest_first=False)
        self._store = store
        self._keeper = LeaseKeeper(store, [r.engine() for r in checked], self)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the lease serves (its Redis client's)
        self._set_largest(self.burst)  # the key's: an amount above the units' share waits for more units
        self._owners.exact_use = True  # the bound holds at every use, over every holder of the key
        self._grant_until(-math.inf)  # no lease yet: grants ended long past

    @property
    def store(self) -> RedisStore:
        """Where the rates are leased from."""
        return self._store

    @property
    def units(self) -> int:
        """The units of the rates this limiter holds now (of ``store.units``)."""
        return self._keeper.units

    # ---- the engine's waits, and the awaitable calls, on the units held ----

    @on_its_loop
    async def _wait(self, amount: float, timeout: float | None) -> None:
        """The engine's wait, on the loop the lease serves, with the lease kept meanwhile."""
        self._check_loop()
        engine_wait = super()._wait
        await self._keeper.serve(amount, timeout, lambda: engine_wait(amount, None))

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, the one the lease serves (see LeaseKeeper.check_loop)."""
        self._loop = self._keeper.check_loop()
        return self._loop

    def _fail_waiting(self, error: BaseException) -> None:
        """Fails every caller queued now (the lease keeper's: no units to grant them from)."""
        self._owners.fail_all(error)

    @on_its_loop
    async def atry_acquire(self, amount: float = 1) -> bool:
        """Takes ``amount`` tokens now if the units held have them (no round trip); False if not, or if others
        wait in this limiter's queue (fair)."""
        self._check_loop()
        if Bucket.try_acquire(self, amount):
            return True
        self._keeper.refused(float(amount))
        await asyncio.sleep(0)  # a caller that tries again at once lets the keeper run
        return False

    @on_its_loop
    async def ahas_capacity(self, amount: float = 1) -> bool:
        """Whether ``atry_acquire(amount)`` would take the tokens now (takes nothing)."""
        self._check_loop()
        return Bucket.has_capacity(self, amount)

    async def read_tokens(self) -> float:
        """Tokens the units held have now (0 without a lease)."""
        return self._engine_tokens()

    @on_its_loop
    async def apenalize(self, seconds: float) -> None:
        """Grants nothing for ``seconds``: here at once, and at every other holder of the key from its next
        renewal on (one round trip)."""
        span_ns = pause_ns(seconds)
        loop = self._check_loop()
        Limiter.pause_until(self._here(), loop.time() + span_ns / 1e9)  # its own units, at once
        await self._keeper.lease.pause(span_ns)

    @on_its_loop
    async def aclose(self) -> None:
        """Gives every unit back now, with the tokens they hold; the next call leases again."""
        await self._keeper.close()

    async def aset_rate(self, max_rate: float, time_period: float | None = None, *,
                        burst: float | None = None, index: int = 0) -> None:
        """Not here: the rates are the key's, split among its holders."""
        raise refused("set_rate / aset_rate", "RedisStore(lease=)")

    def _settle_cost(self, taken: float, used: float, held: bool) -> None:
        raise TypeError("settle() over a RedisStore may need a round trip to Redis: await limiter.asettle(taken, "
                        "used), or await slot.asettle(used)")

    @on_its_loop
    async def asettle(self, taken: float, used: float) -> None:
        """A grant of ``taken`` tokens cost ``used``, as ``Limiter.settle``, on the units held: less, given back to
        them; more, taken from them now as debt, which the key keeps should the lease lapse (see _store_lease)."""
        x, y = self._settle_amounts(taken, used)
        self._check_loop()
        Bucket._settle_cost(self, x, y, False)  # x may pass the units' burst: up to the key's, the core's largest
        if self.waiting:
            self._settle()
        if y > x:
            await self._keeper.tell_debt()

    async def alimit_until(self, tokens: float, when: float) -> None:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("limit_until, follow / alimit_until, afollow", "RedisStore(lease=)")

    def reserve(self, amount: float = 1) -> Any:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("reserve / areserve", "RedisStore(lease=)")

    async def areserve(self, amount: float = 1) -> BaseReservation:
        """Not over a leased RedisStore (see the table of stores, docs/guides/stores.md)."""
        raise refused("reserve / areserve", "RedisStore(lease=)")

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}(max_rate={self.max_rate!r}, time_period={self.time_period!r}, "
                f"burst={self.burst!r}, fair={self.fair!r}, store={self._store!r}) units={self.units} "
                f"waiting={self.waiting} at {id(self):#x}>")


serve("RedisStore(lease=)", "Limiter", RedisLeaseLimiter)
